package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteCDF(t *testing.T) {
	mk := func(base float64, n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = base * (1 + float64(i%100)/50)
		}
		v[n-1] = base * 100 // a tail
		return v
	}
	path := filepath.Join(t.TempDir(), "cdf.png")
	if p := os.Getenv("KBT_BENCH_PLOT"); p != "" { // to look at it
		path = p
	}
	err := writeCDF(path, "test", []Series{{"direct", mk(7, 5000)}, {"kbridge-adaptive", mk(30, 5000)}, {"empty", nil}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) || len(data) < 10000 {
		t.Fatalf("not a PNG: %d bytes, %v", len(data), err)
	}
	if err := writeCDF(path, "test", nil); err == nil {
		t.Error("want an error with nothing to plot")
	}
}

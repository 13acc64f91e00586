package harness

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestIperf3Gbps(t *testing.T) {
	for file, want := range map[string]float64{"iperf3-up.json": 0.508634213507, "iperf3-reverse.json": 0.554535157889} {
		data, err := os.ReadFile("testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Iperf3Gbps(data)
		if err != nil || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %v, %v; want %v", file, got, err, want)
		}
	}
	g, err := Iperf3Gbps([]byte(`{"end":{"sum_received":{"bits_per_second":2.5e9}}}`))
	if err != nil || g != 2.5 {
		t.Errorf("got %v %v", g, err)
	}
	for _, c := range []struct{ out, want string }{
		{`{"error":"the server is busy running a test"}`, "busy"},
		{`{"start":{},"end":{},"error":"unable to connect to server: Connection refused"}`, "Connection refused"},
	} {
		if _, err := Iperf3Gbps([]byte(c.out)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want iperf3's error, got %v", c.out, err)
		}
	}
	if _, err := Iperf3Gbps([]byte(`{"end":{"sum_received":{"bits_per_second":0}}}`)); err != ErrIperf3NoData {
		t.Errorf("a run that received nothing: got %v, want ErrIperf3NoData", err)
	}
	if _, err := Iperf3Gbps([]byte(`iperf3: error`)); err == nil {
		t.Error("text that is not JSON parsed")
	}
}

func TestParseIperf3Bytes(t *testing.T) {
	r, err := ParseIperf3([]byte(`{"end":{"sum_received":{"bytes":1048576,"bits_per_second":8e6}}}`))
	if err != nil || r.End.SumReceived.Bytes != 1<<20 || r.End.SumReceived.BitsPerSecond != 8e6 {
		t.Errorf("got %+v, %v", r, err)
	}
}

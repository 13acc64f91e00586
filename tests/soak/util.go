package main

// Helpers: bounded commands, the bed's PID files, small statistics.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// runLoud runs a bed script: its progress (stderr) goes to ours, its
// stdout is returned.
func runLoud(timeout time.Duration, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	err := cmd.Run()
	return stdout.Bytes(), err
}

// hashCmd runs a command and returns the sha256 and length of its stdout.
func hashCmd(ctx context.Context, timeout time.Duration, args ...string) (string, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, err
	}
	if err := cmd.Start(); err != nil {
		return "", 0, err
	}
	h := sha256.New()
	n, cerr := io.Copy(h, out)
	err = cmd.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		return "", n, fmt.Errorf("timed out after %v", timeout)
	}
	if err == nil {
		err = cerr
	}
	if err != nil {
		return "", n, fmt.Errorf("%v: %s", err, harness.LastLine(stderr.String()))
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(path string, off int64) string {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < off {
		return ""
	}
	return string(data[off:])
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func countLines(b []byte) int {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 0
	}
	return bytes.Count(b, []byte("\n")) + 1
}

// lastMatch returns the value (up to a space) after the last prefix in s.
func lastMatch(s, prefix string) string {
	i := strings.LastIndex(s, prefix)
	if i < 0 {
		return ""
	}
	v := s[i+len(prefix):]
	if j := strings.IndexAny(v, " \n"); j >= 0 {
		v = v[:j]
	}
	return v
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

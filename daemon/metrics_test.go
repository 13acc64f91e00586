package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsRetryWhileThePortIsTaken(t *testing.T) {
	old := metricsRetry
	metricsRetry = 50 * time.Millisecond
	defer func() { metricsRetry = old }()

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kbridge_test_total", Help: "test"})
	log, logBuf := bufLogger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- ServeMetrics(ctx, addr, c, log) }()

	time.Sleep(300 * time.Millisecond) // several retries
	select {
	case err := <-errc:
		t.Fatalf("ServeMetrics returned while the port was taken: %v", err)
	default:
	}
	if n := strings.Count(logBuf.String(), "metrics: not served"); n != 1 {
		t.Errorf("the bind failure was logged %d times, want once:\n%s", n, logBuf)
	}
	if !strings.Contains(logBuf.String(), addr) {
		t.Errorf("the log does not name the address:\n%s", logBuf)
	}

	busy.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "kbridge_test_total") {
				t.Fatalf("metrics lack the collector:\n%s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never served after the port was freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("ServeMetrics = %v after the context ended", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeMetrics did not return after the context ended")
	}
}

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

	"github.com/kbridge/kbridge/ring"
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

// fakeStatus is a snapshotter serving a fixed Status.
type fakeStatus Status

func (f fakeStatus) Snapshot() Status { return Status(f) }

// The collector exports the offload events by name, the coalescer's bad
// checksums and both checksum directions included, and the app's own
// counters only where the app keeps them (ring mode: Queue.App set); mode
// vhost's app keeps none, and zeros would claim it counted nothing.
func TestCollectorExportsWhatIsReal(t *testing.T) {
	q := Queue{App: &ring.AppCounters{Kicks: 7}}
	q.Offload.BadCsum, q.Offload.CsumFromKernel, q.Offload.CsumToKernel, q.Offload.CsumTrusted = 3, 4, 5, 6
	for _, tc := range []struct {
		name    string
		st      Status
		appKick bool
	}{
		{"ring", Status{Queues: []Queue{q}}, true},
		{"vhost", Status{Queues: []Queue{{Snapshot: q.Snapshot}}}, false},
	} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newCollector(fakeStatus(tc.st)))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				key := mf.GetName()
				for _, l := range m.GetLabel() {
					if l.GetName() == "event" {
						key += "/" + l.GetValue()
					}
				}
				if c := m.GetCounter(); c != nil {
					got[key] = c.GetValue()
				}
			}
		}
		for key, want := range map[string]float64{
			"kbridge_offload_total/coalesce_bad_csum":          3,
			"kbridge_offload_total/csum_completed_from_kernel": 4,
			"kbridge_offload_total/csum_completed_to_kernel":   5,
			"kbridge_offload_total/coalesce_packets":           0,
			"kbridge_offload_total/coalesce_csum_trusted":      6,
		} {
			if v, ok := got[key]; !ok || v != want {
				t.Errorf("%s: %s = %v (exported %v), want %v", tc.name, key, v, ok, want)
			}
		}
		if v, ok := got["kbridge_app_kicks_total"]; ok != tc.appKick || (ok && v != 7) {
			t.Errorf("%s: kbridge_app_kicks_total exported %v (%v), want exported %v", tc.name, ok, v, tc.appKick)
		}
		if _, ok := got["kbridge_app_to_kernel_dropped_total"]; ok != tc.appKick {
			t.Errorf("%s: kbridge_app_to_kernel_dropped_total exported %v, want %v", tc.name, ok, tc.appKick)
		}
	}
}

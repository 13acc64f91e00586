package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/copp"
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	served := make(chan struct{})
	go func() {
		StartMetrics(ctx, addr, reg, log)()
		close(served)
	}()

	time.Sleep(300 * time.Millisecond) // several retries
	select {
	case <-served:
		t.Fatal("StartMetrics stopped serving while the port was taken")
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
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("StartMetrics did not stop serving after the context ended")
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
					if l.GetName() == "direction" {
						key += "/" + l.GetValue()
					}
				}
				if c := m.GetCounter(); c != nil {
					got[key] = c.GetValue()
				}
			}
		}
		for key, want := range map[string]float64{
			"kbridge_offload_coalesce_bad_csum_packets_total":         3,
			"kbridge_offload_csum_completed_frames_total/from_kernel": 4,
			"kbridge_offload_csum_completed_frames_total/to_kernel":   5,
			"kbridge_offload_coalesce_packets_total":                  0,
			"kbridge_offload_coalesce_csum_trusted_packets_total":     6,
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

// Every offload event has its metric: a new counter in bridge's Events is
// exported, not dropped.
func TestEveryOffloadEventHasItsMetric(t *testing.T) {
	for _, e := range (bridge.OffloadSnapshot{}).Events() {
		if _, ok := offloadMetrics[e.Name]; !ok {
			t.Errorf("offload event %s has no metric in offloadMetrics", e.Name)
		}
	}
}

// fullStatus sets every counter the collector exports, so that each
// metric family shows in one scrape.
func fullStatus() Status {
	c := &copp.Snapshot{Policing: []string{copp.ClassNames[0]}}
	c.Passed[0], c.Unparsed[copp.Parsed+1], c.ToKernelReserved = 1, 2, 3
	q := Queue{Snapshot: bridge.Snapshot{Queue: 0, Mode: "adaptive", ToKernelPackets: 1,
		Drops: map[string]uint64{"runt": 1}, Residence: []uint64{1, 2, 3}},
		App: &ring.AppCounters{Kicks: 1}, CoPP: c}
	return Status{Queues: []Queue{q}, ResidenceBoundsNs: []uint64{1000, 2000},
		Recovery: &Recovery{}, Adopted: &Adopted{How: HowStored, Backlog: 3}}
}

// names returns the metric names c describes.
func names(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 100)
	go func() { c.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var out []string
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		out = append(out, m[1])
	}
	return out
}

// TestMetricsFollowPrometheusConventions scrapes every metric family once
// and holds it to Prometheus's conventions: promlint's (promtool check
// metrics), one unit per metric (no "event" label sorting writes from
// packets, as kbridge_offload_total did),
// label values that are tokens (no pid, no free text: a new series per
// restart or a space would break queries), kbridge_build_info, and the Go
// and process collectors.
func TestMetricsFollowPrometheusConventions(t *testing.T) {
	reg, err := NewRegistry(newCollector(fakeStatus(fullStatus())), "1.2.3+git4.gabcdef0")
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	token := regexp.MustCompile(`^[a-z0-9_]+$`)
	seen := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		seen[name] = true
		if !strings.HasPrefix(name, "kbridge_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case strings.Contains(l.GetName(), "pid"):
					t.Errorf("%s: label %s: a pid makes a new series per restart", name, l.GetName())
				case l.GetName() == "event":
					t.Errorf("%s: label %s sorts writes, packets and frames into one metric: one metric per unit", name, l.GetName())
				case name == "kbridge_build_info":
				case !token.MatchString(l.GetValue()):
					t.Errorf("%s{%s=%q}: a label value must be a token (a-z, 0-9, _)", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	for _, want := range []string{"kbridge_build_info", "go_goroutines", "go_info", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if !seen[want] {
			t.Errorf("no %s in the scrape", want)
		}
	}
	for _, mf := range mfs {
		if mf.GetName() != "kbridge_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != "1.2.3+git4.gabcdef0" || labels["dpdk"] != ring.BuiltWith().String() || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("kbridge_build_info %v = %v", labels, mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
}

// TestMetricsTableMatchesTheExposition keeps docs/CONFIG.md's metrics
// table the exposition's: every metric kbridge describes (the ring and
// vhost collector's, mode xdp's, kbridge_build_info) has its row, and
// every row names a metric that exists.
func TestMetricsTableMatchesTheExposition(t *testing.T) {
	b, err := os.ReadFile("../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Prometheus metrics\n")
	if !ok {
		t.Fatal("docs/CONFIG.md has no section Prometheus metrics")
	}
	if i := strings.Index(table, "\n## "); i >= 0 {
		table = table[:i]
	}
	documented := map[string]bool{}
	cell := regexp.MustCompile(`(?m)^\| ([^|]+)\|`)
	name := regexp.MustCompile("`((?:kbridge|go|process)_[a-z0-9_*]+)`")
	for _, row := range cell.FindAllStringSubmatch(table, -1) {
		for _, m := range name.FindAllStringSubmatch(row[1], -1) {
			documented[m[1]] = true
		}
	}
	exposed := append(names(t, newCollector(fakeStatus(fullStatus()))), names(t, xdpCollector{})...)
	exposed = append(exposed, "kbridge_build_info")
	// The port set's collector is unchecked (its ports come and go): what
	// it adds shows in a scrape only.
	exposed = append(exposed, gathered(t, testSetCollector())...)
	for _, n := range exposed {
		if !documented[n] {
			t.Errorf("%s has no row in docs/CONFIG.md's metrics table", n)
		}
	}
	for n := range documented {
		if !strings.HasPrefix(n, "kbridge_") {
			continue
		}
		if !slices.Contains(exposed, n) {
			t.Errorf("docs/CONFIG.md's metrics table names %s, which kbridge does not export", n)
		}
	}
	for _, p := range []string{"go_*", "process_*"} {
		if !documented[p] {
			t.Errorf("docs/CONFIG.md's metrics table has no row for the %s collector", p)
		}
	}
}

// testSetCollector is a port set's collector over two ports and one
// failed.
func testSetCollector() *setCollector {
	return newSetCollector(func() ([]portSnapshot, int) {
		return []portSnapshot{{"dpdk0.kni", fakeStatus(fullStatus())}, {"vlan100", fakeStatus(fullStatus())}}, 1
	})
}

// gathered returns the kbridge_ metric families a scrape of c shows.
func gathered(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.GetName())
	}
	return out
}

// A port set exports each port's metrics with a port label beside the
// queue, the same names as one port's, and kbridge_ports by state; it
// passes promlint.
func TestPortSetMetricsCarryThePort(t *testing.T) {
	reg, err := NewRegistry(testSetCollector(), "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := promlint.NewWithMetricFamilies(mfs).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
	single := names(t, newCollector(fakeStatus(fullStatus())))
	seen := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		if name == "kbridge_ports" {
			for _, m := range mf.GetMetric() {
				seen["ports/"+m.GetLabel()[0].GetValue()+"/"+strconv.Itoa(int(m.GetGauge().GetValue()))] = true
			}
			continue
		}
		if !slices.Contains(single, name) {
			continue
		}
		for _, m := range mf.GetMetric() {
			port := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "port" {
					port = l.GetValue()
				}
			}
			if port == "" {
				t.Errorf("%s has a series without a port label", name)
			}
			seen[port] = true
		}
	}
	for _, want := range []string{"dpdk0.kni", "vlan100", "ports/served/2", "ports/failed/1"} {
		if !seen[want] {
			t.Errorf("no %s in the scrape", want)
		}
	}
}

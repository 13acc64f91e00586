package main

import (
	"math"
	"os"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestParseSockperf(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Latency
	}{
		{"sockperf-continuous.txt", Latency{P50: 140.851, P99: 3581.289, P999: 13798.664, Max: 44141.990, N: 1531}},
		{"sockperf-cold.txt", Latency{P50: 1315.682, P99: 86552.813, P999: 86552.813, Max: 86552.813, N: 25}},
	} {
		got, err := parseSockperf(fixture(t, tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if !near(got.P50, tc.want.P50) || !near(got.P99, tc.want.P99) || !near(got.P999, tc.want.P999) ||
			!near(got.Max, tc.want.Max) || got.N != tc.want.N {
			t.Errorf("%s: got %+v, want %+v", tc.file, got, tc.want)
		}
	}
}

func TestParseSockperfErrors(t *testing.T) {
	if _, err := parseSockperf("sockperf: ERROR: connect() failed\n"); err == nil || !strings.Contains(err.Error(), "connect() failed") {
		t.Errorf("want an error quoting the last line, got %v", err)
	}
	out := "sockperf: ---> percentile 50.000 = 10.0\n" // summary but no observation count
	if _, err := parseSockperf(out); err == nil {
		t.Error("want an error for 0 observations")
	}
}

func TestParseFullLog(t *testing.T) {
	lat, err := parseFullLog(fixture(t, "sockperf-fulllog.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{111.968, 78.636, 394.438, 119.131, 105.651, 87.933, 507.083, 157.648}
	if len(lat) != len(want) {
		t.Fatalf("got %d rows, want %d: %v", len(lat), len(want), lat)
	}
	for i := range want {
		if !near(lat[i], want[i]) {
			t.Errorf("row %d: %v, want %v", i, lat[i], want[i])
		}
	}
	if _, err := parseFullLog("no header here\n1, 2, 3, 4\n"); err == nil {
		t.Error("want an error without the header")
	}
	if _, err := parseFullLog("packet, txTime(sec), rxTime(sec), latency(usec)\n0, 1, 2, x\n"); err == nil {
		t.Error("want an error for a bad row")
	}
}

func TestParseProcStat(t *testing.T) {
	got, err := parseProcStat(fixture(t, "proc-stat.txt"))
	if err != nil || got != (procStat{Comm: "kbridge", Ticks: 79 + 287, CPU: 0}) {
		t.Errorf("got %+v, %v; want kbridge, 366 ticks, CPU 0", got, err)
	}
	// A command name with spaces and parentheses must not shift the fields.
	line := "42 (a) b (c) S 1 42 42 0 -1 4194560 0 0 0 0 7 5 0 0 20 0 1 0 1 1 1"
	if got, err := parseProcStat(line); err != nil || got.Ticks != 12 || got.Comm != "a) b (c" || got.CPU != -1 {
		t.Errorf("tricky comm: got %+v, %v; want 12 ticks", got, err)
	}
	if _, err := parseProcStat("42 (x) S 1"); err == nil {
		t.Error("want an error for a short line")
	}
}

func TestCPUPercent(t *testing.T) {
	for _, tc := range []struct {
		ticks uint64
		clk   int
		wall  float64
		want  float64
	}{
		{500, 100, 5, 100},  // a full core for 5 s
		{1, 100, 5, 0.2},    // one tick in 5 s: the resolution
		{1000, 100, 5, 200}, // two threads spinning
		{5, 100, 0, 0},      // no interval
	} {
		if got := cpuPercent(tc.ticks, tc.clk, tc.wall); !near(got, tc.want) {
			t.Errorf("cpuPercent(%d, %d, %v) = %v, want %v", tc.ticks, tc.clk, tc.wall, got, tc.want)
		}
	}
}

func TestParseStatsAndDelta(t *testing.T) {
	mode, c, err := parseStats([]byte(fixture(t, "kbridge-stats.json")))
	if err != nil {
		t.Fatal(err)
	}
	if mode != "adaptive" || len(c.Bounds) != 24 || len(c.Residence) != 24 {
		t.Fatalf("mode %q, %d bounds, %d buckets", mode, len(c.Bounds), len(c.Residence))
	}
	before := c
	before.Residence = make([]uint64, len(c.Residence))
	after := c
	after.Parks += 10
	after.Kicks += 3
	after.Residence = make([]uint64, len(c.Residence))
	after.Residence[3] = 60 // 60 packets < 2048 ns
	after.Residence[9] = 39 // 39 packets < 131072 ns
	after.Residence[14] = 1 // one < 4194304 ns
	before.DropBy = map[string]uint64{"ring_full": 1}
	after.DropBy = map[string]uint64{"ring_full": 11, "no_mbuf": 2, "app_to_kernel": 0}
	after.Drops, after.AppDrops = c.Drops+12, c.AppDrops
	d := after.sub(before)
	if got := d.dropsText(); got != "12 (no_mbuf 2, ring_full 10)" {
		t.Errorf("drops %q", got)
	}
	if got := before.sub(before).dropsText(); got != "0" {
		t.Errorf("no drops: %q", got)
	}
	if d.Parks != 10 || d.Kicks != 3 || d.ToKernel != 0 {
		t.Errorf("delta %+v", d)
	}
	for q, want := range map[float64]uint64{0.5: 2048, 0.6: 2048, 0.61: 131072, 0.99: 131072, 1: 4194304} {
		if got := d.residenceQuantile(q); got != want {
			t.Errorf("residence q%.2f = %d, want %d", q, got, want)
		}
	}
	if got := (Counters{Bounds: c.Bounds, Residence: make([]uint64, 24)}).residenceQuantile(0.5); got != 0 {
		t.Errorf("empty histogram: %d", got)
	}
	if _, _, err := parseStats([]byte(`{"queues":[]}`)); err == nil {
		t.Error("want an error without queues")
	}
}

func TestCDFPoints(t *testing.T) {
	lat := make([]float64, 10000)
	for i := range lat {
		lat[i] = float64(10000 - i) // reverse order: must be sorted
	}
	xs, fs := cdfPoints(lat, 100, 50)
	if len(xs) < 100 || len(xs) > 200 {
		t.Errorf("%d points, want about 150", len(xs))
	}
	for i := 1; i < len(xs); i++ {
		if xs[i] < xs[i-1] || fs[i] <= fs[i-1] {
			t.Fatalf("not monotonic at %d", i)
		}
	}
	if xs[0] != 1 || xs[len(xs)-1] != 10000 || fs[len(fs)-1] != 1 {
		t.Errorf("ends: x %v..%v, F ends at %v", xs[0], xs[len(xs)-1], fs[len(fs)-1])
	}
	// The whole tail is kept.
	if xs[len(xs)-50] != 9951 {
		t.Errorf("tail start %v, want 9951", xs[len(xs)-50])
	}
	if q := quantile(lat, 0.5); q != 5000 {
		t.Errorf("median %v", q)
	}
}

func TestBusyList(t *testing.T) {
	before := map[int]procStat{1: {"idle", 100, 0}, 2: {"spin", 0, 1}, 3: {"half", 50, 0}, 4: {"new", 0, 0}}
	after := map[int]procStat{1: {"idle", 101, 0}, 2: {"spin", 200, 1}, 3: {"half", 150, 0}, 5: {"new", 500, 0}}
	got := strings.Join(busyList(before, after, 100, 2, 10), ", ")
	if want := "spin (pid 2, CPU 1) 100%, half (pid 3, CPU 0) 50%"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := busyList(before, before, 100, 2, 10); len(got) != 1 || got[0] != "none" {
		t.Errorf("quiet machine: %v", got)
	}
}

func TestVhostFeatures(t *testing.T) {
	log := `time=2026-11-30T12:20:04.900Z level=INFO msg="bridge running" mode=vhost socket=/run/kbt/kb0.sock
time=2026-11-30T12:20:05.029Z level=INFO msg="vhost-user frontend connected" socket=/run/kbt/kb0.sock vid=0 features=MRG_RXBUF,VERSION_1,IN_ORDER app_csum=false app_tso=false
time=2026-11-30T12:20:05.400Z level=INFO msg="vhost-user frontend gone" socket=/run/kbt/kb0.sock
time=2026-11-30T12:20:05.500Z level=INFO msg="vhost-user frontend connected" socket=/run/kbt/kb0.sock vid=0 features=CSUM,HOST_TSO4,HOST_TSO6,MRG_RXBUF,VERSION_1,IN_ORDER app_csum=true app_tso=true
`
	if got, want := vhostFeatures(log), "CSUM,HOST_TSO4,HOST_TSO6,MRG_RXBUF,VERSION_1,IN_ORDER"; got != want {
		t.Errorf("vhostFeatures = %q, want %q (the last connect counts)", got, want)
	}
	for _, none := range []string{"", `msg="bridge running" mode=ring`, `msg="vhost-user frontend gone" features=CSUM`} {
		if got := vhostFeatures(none); got != "" {
			t.Errorf("vhostFeatures(%q) = %q, want none", none, got)
		}
	}
}

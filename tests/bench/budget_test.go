package main

import (
	"strings"
	"testing"
)

func TestParsePerfSchedLatency(t *testing.T) {
	rows, err := parsePerfSchedLatency(fixture(t, "perf-sched-latency.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 { // the merged "cc1:(3)" row and TOTAL are skipped
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	if r := rows[5]; r.Comm != "kworker/0:1-eve" || r.TID != 77 || r.Switches != 20 || !near(r.AvgMs, 0.005) {
		t.Errorf("kworker row: %+v", r)
	}
	if r := rows[0]; r.Comm != "kbridge-refapp" || !near(r.RuntimeMs, 108.184) || !near(r.MaxMs, 170.814) {
		t.Errorf("first row: %+v", r)
	}
	kb := aggregate(rows, map[int]bool{5001: true, 5002: true})
	// (15000 x 10 us + 5000 x 30 us) / 20000 = 15 us; worst 2 ms.
	if kb.Switches != 20000 || !near(kb.AvgUs, 15) || !near(kb.MaxUs, 2000) {
		t.Errorf("kbridge aggregate: %+v", kb)
	}
	if _, err := parsePerfSchedLatency("no samples\n"); err == nil {
		t.Error("want an error without rows")
	}
}

func TestRenderBudget(t *testing.T) {
	rows, _ := parsePerfSchedLatency(fixture(t, "perf-sched-latency.txt"))
	direct := &Budget{Name: "direct", Kind: "direct", RTT: Latency{P50: 20, P99: 60, N: 10000}, Mean: 25,
		Client: aggregate(rows, map[int]bool{4001: true}), Server: aggregate(rows, map[int]bool{4002: true})}
	kb := &Budget{Name: "kbridge-adaptive", Kind: "kbridge", RTT: Latency{P50: 50, P99: 200, N: 10000}, Mean: 60,
		Client: aggregate(rows, map[int]bool{4001: true}), Server: aggregate(rows, map[int]bool{4002: true}),
		Fwd:      aggregate(rows, map[int]bool{5001: true, 5002: true}),
		App:      aggregate(rows, map[int]bool{10035: true}),
		Counters: &Counters{Kicks: 9000, Parks: 20000, Wakeups: 19000, Bounds: []uint64{16384, 65536}, Residence: []uint64{9000, 1000}}}
	kb.RunSec, kb.Traced = 5, 5 // the app's preemptions all within the run
	tp := &Budget{Name: "testpmd", Kind: "testpmd", Err: "test bed: up.sh: exit status 1"}
	got := renderBudget(Machine{NCPU: 2, Started: "2026-01-02 03:04 UTC"}, []*Budget{direct, kb, tp})
	for _, s := range []string{
		"| | direct | kbridge-adaptive | testpmd |",
		"| round trip p50 / p99 (us) | 20.0 / 60.0 | 50.0 / 200.0 | error: test bed: up.sh: exit status 1 |",
		"| mean added over direct (us) | - | +35.0 |",
		// client: 1 wakeup per round trip x 12 us; kbridge: 2 x 15 us
		"| client wakeup delay per round trip (us) | 12.0 (1.00 delays x 12.0 us; worst 1250 us) |",
		"| forwarder threads' delay per round trip (us) | - | 30.0 (2.00 delays x 15.0 us; worst 2000 us) |",
		"| kbridge: app kicks / parks / wakeups per round trip | - | 0.90 / 2.00 / 1.90 |",
		"| kbridge: residence app enqueue to TAP write, p50 / p99 | - | <16 us / <66 us |",
		// the app's poller: 125 delays of 2.08 ms over 10000 round trips
		"| reference app's threads' delay per round trip (us) | - | 26.0 (0.01 delays x 2080.0 us; worst 170814 us) |",
		// kbridge's 20000 delays, of which 19000 follow a park's wakeup: 1.9 x 15 us
		"| of which the round trip waits for (us): testpmd all; kbridge its wakeups from a park, est. | - | 28.5 |",
		// direct: 25 - 12 - 20.02 = -7.0 (made-up figures); kbridge: 60 - 12 - 20.02 - 28.5 - 26 = -26.5
		"| rest minus direct's rest: the forwarder's packet work (us) | - | -19.5 |",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("budget lacks %q:\n%s", s, got)
		}
	}
}

// A spinning worker's yields are not on the round trip's path: only as many
// delays as it had wakeups from a park count.
func TestBudgetCriticalDelays(t *testing.T) {
	b := &Budget{Kind: "kbridge", RTT: Latency{N: 1000}, Fwd: schedAgg{Switches: 2100, AvgUs: 15},
		Counters: &Counters{Wakeups: 50}}
	if got := b.wakeups(b.critical()); !near(got, 0.75) { // 50 x 15 us / 1000
		t.Errorf("spinning kbridge: %.2f us per round trip on the path, want 0.75", got)
	}
	b.Counters.Wakeups = 5000 // more wakeups than delays: all delays count
	if got := b.wakeups(b.critical()); !near(got, 31.5) {
		t.Errorf("parking kbridge: %.2f, want 31.5", got)
	}
	tp := &Budget{Kind: "testpmd", RTT: Latency{N: 1000}, Fwd: schedAgg{Switches: 10, AvgUs: 100}}
	if got := tp.wakeups(tp.critical()); !near(got, 1) {
		t.Errorf("testpmd: %.2f, want 1 (all of a poller's delays)", got)
	}
}

func TestBudgetForwarders(t *testing.T) {
	fs, err := budgetForwarders("all")
	if err != nil || names(fs) != "direct,kbridge-adaptive,testpmd" {
		t.Errorf("default: %q %v", names(fs), err)
	}
	if _, err := budgetForwarders("bed-ceiling"); err == nil {
		t.Error("bed-ceiling alone: want an error")
	}
}

func TestPollerShare(t *testing.T) {
	b := &Budget{Kind: "testpmd", RTT: Latency{N: 1000}, RunSec: 5, Traced: 6.25,
		Fwd: schedAgg{Switches: 100, AvgUs: 400}, App: schedAgg{Switches: 50, AvgUs: 100}}
	// testpmd's lcore: 100 preemptions traced, 80 of them in the run: 0.08 per round trip x 400 us.
	if got := b.wakeups(b.fwd()); !near(got, 32) {
		t.Errorf("testpmd poller delay per round trip = %v, want 32", got)
	}
	b.Kind = "kbridge" // kbridge's threads wake with traffic: not scaled
	if got := b.wakeups(b.fwd()); !near(got, 40) {
		t.Errorf("kbridge delay per round trip = %v, want 40", got)
	}
	if got := b.wakeups(b.poller(b.App)); !near(got, 4) { // 40 of 50 x 100 us / 1000
		t.Errorf("app poller delay per round trip = %v, want 4", got)
	}
	if (&Budget{}).pollerShare() != 1 {
		t.Error("no window: want share 1")
	}
}

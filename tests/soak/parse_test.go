package main

import (
	"testing"
)

func TestParseRefappStats(t *testing.T) {
	log := "kbridge-refapp: ready port=kb0 queues=1 lcore=1 pool=kb_pool pool_size=8191 baseline_in_use=0\n" +
		"kbridge-refapp: stats rx=10 own=0 to_kernel=10 to_kernel_dropped=0 from_kernel=9 tx=9 tx_dropped=0 kicks=3 in_rings=2 pool_in_use=5\n" +
		"kbridge-refapp: stats rx=12 own=0 to_kernel=12 to_kernel_dropped=0 from_kernel=11 tx=11 tx_dropped=0 kicks=4 in_rings=0 pool_in_use=1\n"
	u, r, ok := parseRefappStats(log)
	if !ok || u != 1 || r != 0 {
		t.Errorf("got in use %d, in rings %d, %v; want the last line's 1 and 0", u, r, ok)
	}
	if _, _, ok := parseRefappStats("kbridge-refapp: ready\n"); ok {
		t.Error("a log without a stats line parsed")
	}
}

func TestParseSockperf(t *testing.T) {
	out := "sockperf: ---> <MAX> observation =  120.5\n" +
		"sockperf: ---> percentile 99.000 =   60.250\n" +
		"sockperf: ---> percentile 50.000 =   30.125\n" +
		"sockperf: ---> percentile 50.000 =   99.000\n"
	p50, p99, err := parseSockperf(out)
	if err != nil || p50 != 30.125 || p99 != 60.25 {
		t.Errorf("got %v %v %v", p50, p99, err)
	}
	if _, _, err := parseSockperf("sockperf: error\n"); err == nil {
		t.Error("no summary parsed")
	}
}

func TestWithPolicy(t *testing.T) {
	base := "dpdk:\n  file_prefix: kbt\npolicy:\n  mode: adaptive\n  spin: 20us\nstats:\n  socket: /run/kbt/kbridge.sock\n"
	got := withPolicy(base, "busy")
	want := "dpdk:\n  file_prefix: kbt\nstats:\n  socket: /run/kbt/kbridge.sock\npolicy:\n  mode: busy\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestDeltas(t *testing.T) {
	prev := map[string]uint64{"a": 5, "b": 1}
	if d := deltas(prev, map[string]uint64{"a": 7, "b": 1}, true); d["a"] != 2 || d["b"] != 0 {
		t.Errorf("same process: %v", d)
	}
	// A new process counts from zero: its counters count whole.
	if d := deltas(prev, map[string]uint64{"a": 7, "b": 0}, false); d["a"] != 7 || d["b"] != 0 {
		t.Errorf("new process: %v", d)
	}
	if d := deltas(nil, map[string]uint64{"a": 7}, true); d["a"] != 0 {
		t.Errorf("first sample: %v", d)
	}
}

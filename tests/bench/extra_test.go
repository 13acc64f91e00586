package main

import (
	"math"
	"strings"
	"testing"
)

func TestParseWrk(t *testing.T) {
	h, err := parseWrk(fixture(t, "wrk.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !near(h.P50, 173) || !near(h.P99, 215320) || !near(h.RPS, 2254.77) || h.Requests != 4797 || h.Errors != "" {
		t.Errorf("got %+v", h)
	}
	// Units, socket errors and non-2xx answers.
	out := `  Latency Distribution
     50%   41.00us
     75%   52.00us
     90%   1.10ms
     99%    1.50s
  10 requests in 5.00s, 1.00KB read
  Socket errors: connect 0, read 1, write 0, timeout 0
  Non-2xx or 3xx responses: 3
Requests/sec:      2.00
`
	h, err = parseWrk(out)
	if err != nil || !near(h.P50, 41) || !near(h.P99, 1.5e6) ||
		h.Errors != "Socket errors: connect 0, read 1, write 0, timeout 0; Non-2xx or 3xx responses: 3" {
		t.Errorf("got %+v, %v", h, err)
	}
	if _, err := parseWrk("unable to connect to 198.18.0.1:8080 Connection refused\n"); err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("want an error quoting wrk, got %v", err)
	}
	if _, err := parseWrk("  Latency Distribution\n     50%   41.00us\n     99%   50.00us\n  0 requests in 5.00s, 0B read\nRequests/sec: 0.00\n"); err == nil {
		t.Error("want an error for 0 requests")
	}
}

func TestCPUPerGbit(t *testing.T) {
	for _, tc := range []struct{ cpu, gbps, want float64 }{
		{60, 1.5, 40},   // 60% of a core moving 1.5 Gbit/s
		{100, 0.8, 125}, // testpmd: a whole core for 0.8 Gbit/s
		{0.5, 2, 0.25},
	} {
		if got := cpuPerGbit(tc.cpu, tc.gbps); !near(got, tc.want) {
			t.Errorf("cpuPerGbit(%v, %v) = %v, want %v", tc.cpu, tc.gbps, got, tc.want)
		}
	}
	if !math.IsNaN(cpuPerGbit(50, 0)) || !math.IsNaN(cpuPerGbit(math.NaN(), 1)) {
		t.Error("no rate or no CPU: want NaN")
	}
	if got := mbPerSec(256<<20, 2); !near(got, 134.217728) {
		t.Errorf("mbPerSec = %v", got)
	}
}

func TestParsePing(t *testing.T) {
	rtt, err := parsePing(fixture(t, "ping.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{144, 23, 16, 21, 65}
	if len(rtt) != len(want) {
		t.Fatalf("%v", rtt)
	}
	for i := range want {
		if !near(rtt[i], want[i]) {
			t.Errorf("rtt[%d] = %v, want %v", i, rtt[i], want[i])
		}
	}
	l := halfRTT(rtt)
	if !near(l.P50, 11.5) || !near(l.Max, 72) || l.N != 5 {
		t.Errorf("halfRTT = %+v", l)
	}
	if _, err := parsePing("PING 198.18.0.2\n--- statistics ---\n10 packets transmitted, 0 received\n"); err == nil {
		t.Error("want an error without replies")
	}
}

func TestLinkRx(t *testing.T) {
	b, p, err := linkRx([]byte(fixture(t, "ip-link-stats.json")))
	if err != nil || b != 1297206 || p != 9626 {
		t.Errorf("got %d bytes, %d packets, %v", b, p, err)
	}
	if _, _, err := linkRx([]byte(`[]`)); err == nil {
		t.Error("want an error for no link")
	}
}

func TestFormatPlacement(t *testing.T) {
	ts := []Thread{{"dpdk-testpmd", "0"}, {"eal-intr-thread", "0"}, {"rte_mp_handle", "0"}, {"lcore-worker-1", "1"}, {"telemetry-v2", "0"}}
	if got, want := formatPlacement(ts), "CPU 0: dpdk-testpmd, eal-intr-thread, rte_mp_handle, telemetry-v2; CPU 1: lcore-worker-1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	kb := []Thread{{"kbridge", "0"}, {"kbridge", "0"}, {"kbridge", "0"}}
	if got := formatPlacement(kb); got != "CPU 0: kbridge x3" {
		t.Errorf("got %q", got)
	}
	if formatPlacement(nil) != "-" {
		t.Error("no threads: want -")
	}
	if got := cpusAllowed("Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n"); got != "0-1" {
		t.Errorf("cpusAllowed = %q", got)
	}
}

func TestRatioCellAndDrops(t *testing.T) {
	_, res := sample()
	up := func(r *Result) float64 { return r.Up }
	if got := ratioCell(res, "kbridge-adaptive", "testpmd", wUp, up); got != "0.83x" {
		t.Errorf("got %q", got)
	}
	if got := ratioCell(res, "testpmd", "testpmd", wUp, up); got != "-" {
		t.Errorf("self ratio: %q", got)
	}
	if got := ratioCell(res, "kni-4ms", "direct", wUp, up); got != "-" { // kni-4ms's iperf3 failed
		t.Errorf("failed figure: %q", got)
	}
	c := Counters{Drops: 7, AppDrops: 2500, DropBy: map[string]uint64{"ring_full": 5, "no_mbuf": 2, "app_to_kernel": 2500}}
	if got := c.kbDropsText(); got != "7 (no_mbuf 2, ring_full 5)" {
		t.Errorf("kbDropsText = %q", got)
	}
	if got := (Counters{AppDrops: 3}).kbDropsText(); got != "0" {
		t.Errorf("kbDropsText without kbridge drops = %q", got)
	}
}

func TestSkippedCell(t *testing.T) {
	r := newResult("direct")
	r.Skipped[wHTTP] = "wrk not installed: apt-get install wrk"
	if got := cell(r, wHTTP, "%.1f", 0); got != "wrk not installed: apt-get install wrk" {
		t.Errorf("cell = %q", got)
	}
	if got := dash(r, wHTTP, "%.1f", 0); got != "-" {
		t.Errorf("dash = %q", got)
	}
}

func TestCPUBusy(t *testing.T) {
	before := parseProcStatCPUs("cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 100 0 100 700 100 0 0 0 0 0\ncpu1 0 0 0 1000 0 0 0 0 0 0\nintr 5\n")
	after := parseProcStatCPUs("cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 300 0 200 800 100 50 50 100 40 0\ncpu1 500 0 0 1000 0 0 0 0 500 0\n")
	// cpu0: 600 ticks, 100 idle, 100 steal; cpu1: 500 ticks of user (guest ignored), no idle.
	if got, want := cpuBusyText(before, after), "CPU 0 83% busy (steal 17%), CPU 1 100% busy (steal 0%)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := cpuBusyText(before, before); got != "" {
		t.Errorf("no time passed: %q", got)
	}
}

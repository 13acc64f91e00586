package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/report.golden.md")

// sample is a made-up run: every forwarder, one failed workload.
func sample() (order []string, res map[string]*Result) {
	res = map[string]*Result{}
	add := func(name string, nfs float64, runs int, pp, cold Latency, up, down float64, cpu map[string]float64, app float64) {
		r := newResult(name)
		r.NFS, r.NFSRuns, r.PP, r.Cold, r.Up, r.Down, r.CPU, r.AppCPU = nfs, runs, pp, cold, up, down, cpu, app
		res[name] = r
		order = append(order, name)
	}
	add("direct", 4.0, 3, Latency{6.5, 7.5, 12, 80, 40000}, Latency{50, 65, 70, 70, 96}, 9.1, 8.7, map[string]float64{}, -1)
	add("kbridge-adaptive", 4.4, 3, Latency{25, 40, 90, 900, 9000}, Latency{60, 160, 170, 170, 96}, 2.5, 3.0,
		map[string]float64{wIdle: 0.4, wNFS: 55, wPP: 90, wCold: 2, wUp: 99, wDown: 98}, 99.8)
	add("kni-4ms", 30, 1, Latency{2000, 4000, 4100, 4200, 1200}, Latency{2100, 4000, 4000, 4000, 96}, 0.1, 0.1,
		map[string]float64{wIdle: 0.2}, 100)
	add("kbridge-vhost", 5.0, 3, Latency{35, 55, 95, 700, 8000}, Latency{90, 170, 180, 180, 96}, 0.9, 1.1,
		map[string]float64{wIdle: 0.5, wNFS: 40, wPP: 60, wCold: 1, wUp: 70, wDown: 65}, 100)
	add("testpmd", 4.8, 3, Latency{29.5, 46.3, 80, 1000, 8000}, Latency{80, 145, 150, 150, 96}, 3.0, 3.1,
		map[string]float64{wIdle: 100, wNFS: 100}, -1)
	// the targets' workloads: NFS read, iperf3 -P 4, HTTP, placement, the bed's ceiling
	for n, v := range map[string][4]float64{ // NFS MB/s, -P 4 Gbit/s, HTTP p50, p99
		"direct": {900, 9.5, 30, 60}, "kbridge-adaptive": {750, 3.2, 70, 150}, "kni-4ms": {12, 0.1, 4000, 8000}, "testpmd": {600, 1.0, 90, 140},
	} {
		r := res[n]
		r.NFSRead, r.ReadRuns, r.Down4 = v[0], 2, v[1]
		r.HTTP = HTTPStats{P50: v[2], P99: v[3], RPS: 1e6 / v[2] / 2, Requests: 1000}
	}
	res["kni-4ms"].ReadRuns = 1
	vh := res["kbridge-vhost"]
	vh.NFSRead, vh.ReadRuns, vh.Down4 = 500, 2, 1.2
	vh.HTTP = HTTPStats{P50: 95, P99: 160, RPS: 5000, Requests: 1000}
	vh.Place = Placement{Forwarder: "CPU 0: kbridge x7, vhost-events, vhost-reconn", App: "CPU 1: rte-worker-1; CPU 0: dpdk-testpmd, eal-intr-thread",
		Clients: "taskset -c 0", Servers: "ganesha 0, http 0, iperf3 0, sockperf 0"}
	vh.Features = "CSUM,HOST_TSO4,HOST_TSO6,MRG_RXBUF,VERSION_1,IN_ORDER"
	vh.Counters[wPP] = Counters{ToKernel: 1000, FromKernel: 1000, Parks: 20, Wakeups: 20, Kicks: 20}
	res["kbridge-adaptive"].CPU[wNFSRead], res["kbridge-adaptive"].CPU[wDown4], res["kbridge-adaptive"].CPU[wHTTP] = 40, 96, 30
	res["testpmd"].CPU[wUp], res["testpmd"].CPU[wDown] = 99, 100
	res["kbridge-adaptive"].Counters[wDown4] = Counters{ToKernel: 100000, FromKernel: 20000, Drops: 7, AppDrops: 2500,
		DropBy: map[string]uint64{"ring_full": 7, "app_to_kernel": 2500}}
	res["kbridge-adaptive"].Place = Placement{Forwarder: "CPU 0: kbridge x6", App: "CPU 1: kbridge-refapp; CPU 0: eal-intr-thread",
		Clients: "taskset -c 0", Servers: "ganesha 0, http 0, iperf3 0, sockperf 0"}
	res["testpmd"].Place = Placement{Forwarder: "CPU 0: dpdk-testpmd, eal-intr-thread; CPU 1: lcore-worker-1", App: "-",
		Clients: "taskset -c 0", Servers: "ganesha 0, http 0, iperf3 0, sockperf 0"}
	ceil := newResult("bed-ceiling")
	ceil.Ceiling = &Ceiling{Ping: Latency{P50: 12.5, P99: 30, P999: 41, Max: 90, N: 1999}, TxGbps: 4.2, TxMpps: 0.35, TxCPU: 100, Measured: true}
	res["bed-ceiling"] = ceil
	order = append(order, "bed-ceiling")
	res["direct"].Foreign = "none"
	res["testpmd"].Foreign = "ksoftirqd/1 (pid 22, CPU 1) 7%"
	res["kni-4ms"].Errs[wUp] = "iperf3: iperf3: exit status 1: unable | connect"
	res["kbridge-adaptive"].Counters[wPP] = Counters{ToKernel: 1000, FromKernel: 1000, Parks: 5, Wakeups: 5, Kicks: 5,
		Bounds: []uint64{1024, 2048, 4096}, Residence: []uint64{10, 980, 10}}
	return order, res
}

func TestEvalTargets(t *testing.T) {
	_, res := sample()
	ts := evalTargets(res)
	want := []struct{ issue, value, verdict string }{
		{"8", "0.27x (testpmd 0.33x)", "missed by 0.53x"},       // iperf3 to peer / direct: 2.5 / 9.1
		{"8", "0.83x", "missed by 2.17x"},                       // / testpmd: 2.5 / 3.0
		{"8", "0.34x (testpmd 0.36x)", "missed by 0.46x"},       // from peer / direct: 3.0 / 8.7
		{"8", "0.97x", "missed by 2.03x"},                       // / testpmd: 3.0 / 3.1
		{"8", "0.83x (testpmd 0.67x)", "met (by 0.03x)"},        // NFS read 750 / 900
		{"11", "25.0 us vs testpmd 29.5 us", "met (by 4.5 us)"}, // pp p50
		{"11", "40.0 us vs testpmd 46.3 us", "met (by 6.3 us)"}, // pp p99
		{"11", "160.0 us vs testpmd 145.0 us", "missed by 15.0 us (+10%)"},
		{"11", "160.0 us vs direct 65.0 us", "met (by 5.0 us)"},
		{"11", "1.10x (testpmd 1.20x)", "met (by 0.05x)"},                 // NFS ls -R
		{"11", "0.40% (testpmd 100%)", "met (by 0.60 points)"},            // idle CPU
		{"11", "150.0 us vs testpmd 140.0 us", "missed by 10.0 us (+7%)"}, // HTTP p99
		{"8", "-", "n/a (kbridge-plain not measured)"},                    // CPU per Gbit/s to peer
		{"8", "-", "n/a (kbridge-plain not measured)"},                    // from peer
	}
	if len(ts) != len(want) {
		t.Fatalf("%d targets, want %d", len(ts), len(want))
	}
	for i, w := range want {
		if ts[i].Issue != w.issue || ts[i].Value != w.value || ts[i].Verdict != w.verdict {
			t.Errorf("%s: got %s %q / %q, want %s %q / %q", ts[i].Name, ts[i].Issue, ts[i].Value, ts[i].Verdict, w.issue, w.value, w.verdict)
		}
	}
	if ts[0].Met() || !ts[4].Met() {
		t.Error("Met() disagrees with the verdicts")
	}

	// Missing, failed or skipped figures make a target n/a, never met.
	delete(res, "testpmd")
	res["direct"].Errs[wNFS] = "nfs-ls: timed out"
	res["kbridge-adaptive"].Skipped[wHTTP] = "wrk not installed: apt-get install wrk"
	res["kbridge-adaptive"].NFSRead = 0 // not measured
	for _, tg := range evalTargets(res) {
		if strings.Contains(tg.Name, "testpmd") || strings.Contains(tg.Name, "NFS") {
			if !strings.HasPrefix(tg.Verdict, "n/a") {
				t.Errorf("%s: %q, want n/a", tg.Name, tg.Verdict)
			}
		}
		if strings.Contains(tg.Name, "HTTP") && !strings.Contains(tg.Verdict, "wrk not installed") {
			t.Errorf("%s: %q, want the reason wrk did not run", tg.Name, tg.Verdict)
		}
	}
}

func TestEvalTargetsMet(t *testing.T) {
	_, res := sample()
	a := res["kbridge-adaptive"]
	a.Up, a.Down, a.NFS, a.CPU[wIdle], a.HTTP.P99 = 9.3, 9.5, 5.2, 3.5, 100 // 1.30x direct NFS, 3.5% idle
	ts := evalTargets(res)
	for i, want := range map[int]string{0: "met (by 0.22x)", 1: "met (by 0.10x)", 2: "met (by 0.29x)", 3: "met (by 0.06x)",
		9: "missed by 0.15x", 10: "missed by 2.50 points", 11: "met (by 40.0 us)"} {
		if ts[i].Verdict != want {
			t.Errorf("%s: %q, want %q", ts[i].Name, ts[i].Verdict, want)
		}
	}
}

func TestRender(t *testing.T) {
	order, res := sample()
	m := Machine{NCPU: 2, Model: "AMD EPYC", Kernel: "6.1.0", HZ: "250", DPDK: "22.11.11", Kbridge: "v0.1-3-gabc",
		Command: "bin/kbt-bench", Make: "make bench", Placement: "app on CPU 1, the rest on CPU 0", LoadStart: "0.10 0.20 0.30",
		LoadEnd: "1.00 0.50 0.40", BusyStart: "spin (pid 2, CPU 1) 100%", BusyEnd: "none", Started: "2026-01-02 03:04 UTC", Duration: "12m0s", PlotFile: "latency-cdf-x.png"}
	got := render(m, order, res, fullDurations)
	golden := filepath.Join("testdata", "report.golden.md")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("report differs from %s (go test -run TestRender -update to accept):\n%s", golden, got)
	}
	if strings.Contains(got, "| bed-ceiling | ") && strings.Contains(got, "| bed-ceiling | -") {
		t.Error("bed-ceiling must not appear in the comparison tables")
	}
	for _, s := range []string{
		"| kni-4ms | 30.00 (1 run) | 7.50x | 12 (1 run) | 0.01x |", // KNI's single NFS runs are marked, ratios to direct
		"| kbridge-adaptive | 4.40 | 1.10x | 750 | 0.83x | 2.50 | 0.27x | 0.83x | 3.00 | 0.34x | 0.97x | 3.20 | 0.34x | 3.20x | 7 (ring_full 7) | 2500 |",
		"| kbridge-adaptive | 25.0 | 40.0 | 90.0 | 900.0 | 60.0 | 160.0 | 170.0 | 70.0 | 150.0 | 7143 |",               // latency with HTTP
		"| kbridge-adaptive | 0.4 | 55.0 | 40.0 | 90.0 | 2.0 | 30.0 | 99.0 | 98.0 | 96.0 | 39.6 | 32.7 | 30.0 | 100 |", // CPU, CPU/Gbit
		"| testpmd | CPU 0: dpdk-testpmd, eal-intr-thread; CPU 1: lcore-worker-1 | - | taskset -c 0 |",
		"| ping through 5tswap, one-way (us), 1999 replies | 12.5 | 30.0 | 41.0 | 90.0 | - | - | - |",
		"| txonly to the peer, 1500-byte frames | - | - | - | - | 4.20 | 0.350 | 100% |",
		"| 11 | HTTP keep-alive p99: kbridge-adaptive vs testpmd | <= testpmd |",
		"error: iperf3: iperf3: exit status 1: unable / connect",         // errors stay in their cell, pipes escaped
		"| direct | - | - | - | - | - | - | - | - | - | - | - | - | - |", // no forwarder, no CPU
		"| kbridge-adaptive | ping-pong | 1000 | 1000 | 5 | 5 | 0 | 0 | 5 | 0 | <2.0 us | <2.0 us |",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

func TestFmtNs(t *testing.T) {
	for ns, want := range map[uint64]string{0: "-", 512: "<512 ns", 2048: "<2.0 us", 131072: "<131 us", 4194304: "<4.2 ms"} {
		if got := fmtNs(ns); got != want {
			t.Errorf("fmtNs(%d) = %q, want %q", ns, got, want)
		}
	}
}

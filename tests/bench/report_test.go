package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	add("testpmd", 4.8, 3, Latency{29.5, 46.3, 80, 1000, 8000}, Latency{80, 145, 150, 150, 96}, 3.0, 3.1,
		map[string]float64{wIdle: 100, wNFS: 100}, -1)
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
	want := []struct{ value, verdict string }{
		{"1.10x (testpmd 1.20x)", "met (by 0.05x)"},
		{"6.82x", "met (by 1.82x)"},
		{"25.0 us vs testpmd 29.5 us", "met (by 4.5 us)"},
		{"40.0 us vs testpmd 46.3 us", "met (by 6.3 us)"},
		{"160.0 us vs testpmd 145.0 us", "missed by 15.0 us (+10%)"},
		{"160.0 us vs direct 65.0 us", "met (by 5.0 us)"},
		{"0.40% (testpmd 100%)", "met (by 0.60 points)"},
	}
	if len(ts) != len(want) {
		t.Fatalf("%d targets, want %d", len(ts), len(want))
	}
	for i, w := range want {
		if ts[i].Value != w.value || ts[i].Verdict != w.verdict {
			t.Errorf("%s: got %q / %q, want %q / %q", ts[i].Name, ts[i].Value, ts[i].Verdict, w.value, w.verdict)
		}
	}
	if ts[4].Met() || !ts[0].Met() {
		t.Error("Met() disagrees with the verdicts")
	}

	// Missing or failed figures make a target n/a, never met.
	delete(res, "testpmd")
	res["direct"].Errs[wNFS] = "nfs-ls: timed out"
	for _, tg := range evalTargets(res) {
		if strings.Contains(tg.Name, "testpmd") || strings.Contains(tg.Name, "/ direct") {
			if !strings.HasPrefix(tg.Verdict, "n/a") {
				t.Errorf("%s: %q, want n/a", tg.Name, tg.Verdict)
			}
		}
	}
}

func TestEvalTargetsMissedRatio(t *testing.T) {
	_, res := sample()
	res["kbridge-adaptive"].NFS = 5.2 // 1.30x direct
	res["kni-4ms"].NFS = 10.4         // 2x adaptive
	res["kbridge-adaptive"].CPU[wIdle] = 3.5
	ts := evalTargets(res)
	for i, want := range map[int]string{0: "missed by 0.15x", 1: "missed by 3.00x", 6: "missed by 2.50 points"} {
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
	got := render(m, order, res, Durations{Idle: 5 * time.Second, PP: 5 * time.Second, Cold: 10 * time.Second, Iperf: 5 * time.Second, NFSRuns: 3})
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
	for _, s := range []string{
		"| kni-4ms | 30.00 (1 run) |",                            // KNI's single NFS run is marked
		"error: iperf3: iperf3: exit status 1: unable / connect", // errors stay in their cell, pipes escaped
		"| direct | - | - | - | - | - | - | - |",                 // no forwarder, no CPU
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

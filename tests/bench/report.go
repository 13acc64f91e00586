package main

// The markdown report: machine, result tables, the targets of issue 3.

import (
	"fmt"
	"math"
	"strings"
)

// Machine describes where and how the run happened.
type Machine struct {
	NCPU               int
	Model, Kernel, HZ  string
	DPDK, Kbridge      string
	Command            string // as executed
	Make               string // the make command that ran it, if any
	Placement          string
	LoadStart, LoadEnd string
	BusyStart, BusyEnd string // other processes above 10% of a core
	Started            string // UTC
	Duration           string
	Quick, Interrupted bool
	PlotFile           string
	RawDir             string
}

// Target is one goal of issue 3 checked against the run.
type Target struct {
	Name, Value, Goal string
	Verdict           string // "met ...", "missed ...", "n/a ..."
}

func (t Target) Met() bool { return strings.HasPrefix(t.Verdict, "met") }

// evalTargets checks the targets of issue 3; a missing figure makes a target
// "n/a" with the reason.
func evalTargets(res map[string]*Result) []Target {
	get := func(name, key string) (*Result, string) {
		r := res[name]
		if r == nil {
			return nil, name + " not measured"
		}
		if e := r.Errs[key]; e != "" {
			return nil, name + " failed"
		}
		return r, ""
	}
	var ts []Target
	ratio := func(name, goal string, a, b string, key string, f func(ra, rb *Result) float64, limit float64, atLeast bool, extra func() string) {
		t := Target{Name: name, Goal: goal}
		ra, why := get(a, key)
		rb, why2 := get(b, key)
		if ra == nil || rb == nil {
			t.Value, t.Verdict = "-", "n/a ("+strings.Trim(why+"; "+why2, "; ")+")"
			ts = append(ts, t)
			return
		}
		v := f(ra, rb)
		t.Value = fmt.Sprintf("%.2fx", v)
		if extra != nil {
			t.Value += extra()
		}
		ok := v <= limit
		if atLeast {
			ok = v >= limit
		}
		if ok {
			t.Verdict = fmt.Sprintf("met (by %.2fx)", math.Abs(limit-v))
		} else {
			t.Verdict = fmt.Sprintf("missed by %.2fx", math.Abs(v-limit))
		}
		ts = append(ts, t)
	}
	nfs := func(ra, rb *Result) float64 { return ra.NFS / rb.NFS }
	ratio("NFS ls -R: kbridge-adaptive / direct", "<= 1.15x", "kbridge-adaptive", "direct", wNFS, nfs, 1.15, false,
		func() string {
			if r, _ := get("testpmd", wNFS); r != nil && res["direct"] != nil && res["direct"].NFS > 0 {
				return fmt.Sprintf(" (testpmd %.2fx)", r.NFS/res["direct"].NFS)
			}
			return ""
		})
	ratio("NFS ls -R: kni-4ms / kbridge-adaptive", ">= 5x", "kni-4ms", "kbridge-adaptive", wNFS, nfs, 5, true, nil)

	// Latency: kbridge-adaptive against a reference, in microseconds.
	lat := func(name, goal, key, ref string, pick func(r *Result) float64, slack float64) {
		t := Target{Name: name, Goal: goal}
		a, why := get("kbridge-adaptive", key)
		b, why2 := get(ref, key)
		if a == nil || b == nil {
			t.Value, t.Verdict = "-", "n/a ("+strings.Trim(why+"; "+why2, "; ")+")"
			ts = append(ts, t)
			return
		}
		va, limit := pick(a), pick(b)+slack
		t.Value = fmt.Sprintf("%.1f us vs %s %.1f us", va, ref, pick(b))
		if va <= limit {
			t.Verdict = fmt.Sprintf("met (by %.1f us)", limit-va)
		} else {
			t.Verdict = fmt.Sprintf("missed by %.1f us (%+.0f%%)", va-limit, (va/limit-1)*100)
		}
		ts = append(ts, t)
	}
	lat("ping-pong p50: kbridge-adaptive vs testpmd", "<= testpmd", wPP, "testpmd", func(r *Result) float64 { return r.PP.P50 }, 0)
	lat("ping-pong p99: kbridge-adaptive vs testpmd", "<= testpmd", wPP, "testpmd", func(r *Result) float64 { return r.PP.P99 }, 0)
	lat("cold p99: kbridge-adaptive vs testpmd", "<= testpmd", wCold, "testpmd", func(r *Result) float64 { return r.Cold.P99 }, 0)
	lat("cold p99: kbridge-adaptive vs direct + 100 us", "<= direct + 100 us", wCold, "direct", func(r *Result) float64 { return r.Cold.P99 }, 100)

	t := Target{Name: "idle CPU: kbridge-adaptive", Goal: "<= 1% of one core"}
	if r, why := get("kbridge-adaptive", wIdle); r == nil {
		t.Value, t.Verdict = "-", "n/a ("+why+")"
	} else {
		v := r.CPU[wIdle]
		t.Value = fmt.Sprintf("%.2f%%", v)
		if tp, _ := get("testpmd", wIdle); tp != nil {
			t.Value += fmt.Sprintf(" (testpmd %.0f%%)", tp.CPU[wIdle])
		}
		if v <= 1 {
			t.Verdict = fmt.Sprintf("met (by %.2f points)", 1-v)
		} else {
			t.Verdict = fmt.Sprintf("missed by %.2f points", v-1)
		}
	}
	return append(ts, t)
}

// cell renders a figure, or the workload's error.
func cell(r *Result, key string, format string, v float64) string {
	if e, ok := r.Errs[key]; ok {
		return "error: " + shorten(e, 70)
	}
	return fmt.Sprintf(format, v)
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "|", "/")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}

// render writes the whole report.
func render(m Machine, order []string, res map[string]*Result, d Durations) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# kbridge benchmark, %s\n\n", m.Started)
	if m.Interrupted {
		w("**Interrupted: the figures below are incomplete.**\n\n")
	}
	w("- machine: %d CPUs, %s; kernel %s, HZ=%s; DPDK %s; kbridge %s\n", m.NCPU, m.Model, m.Kernel, m.HZ, m.DPDK, m.Kbridge)
	cmd := "`" + m.Command + "`"
	if m.Make != "" {
		cmd = "`" + m.Make + "` (runs " + cmd + ")"
	}
	if m.Quick {
		cmd += "; quick: shortened workloads, a smoke test"
	}
	w("- command: %s\n", cmd)
	w("- CPU placement (TESTBED.md): %s\n", m.Placement)
	w("- load average (1/5/15 min) at start: %s; at end: %s\n", m.LoadStart, m.LoadEnd)
	if m.BusyStart != "" || m.BusyEnd != "" {
		w("- other processes above 10%% of a core (2 s sample, not the benchmark's) at start: %s; at end: %s\n", or(m.BusyStart, "?"), or(m.BusyEnd, "?"))
	}
	w("- run time: %s\n\n", m.Duration)

	w("## Results\n\n")
	w("Latency is one-way (half the sockperf round trip) in microseconds. NFS: wall time of `nfs-ls -R` of %d entries, best of %d. ", nfsEntries, d.NFSRuns)
	w("Continuous ping-pong: %v back to back; cold: `--mps 10` for %v (each request after ~100 ms of silence). iperf3: %v each way, Gbit/s at the receiver.\n\n", d.PP, d.Cold, d.Iperf)
	w("| forwarder | NFS ls -R (s) | pp p50 | pp p99 | pp p99.9 | pp max | cold p50 | cold p99 | cold max | iperf3 to peer | iperf3 from peer |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range order {
		r := res[n]
		nfs := cell(r, wNFS, "%.2f", r.NFS)
		if r.Errs[wNFS] == "" && r.NFSRuns == 1 && d.NFSRuns > 1 {
			nfs += " (1 run)"
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, nfs,
			cell(r, wPP, "%.1f", r.PP.P50), dash(r, wPP, "%.1f", r.PP.P99), dash(r, wPP, "%.1f", r.PP.P999), dash(r, wPP, "%.1f", r.PP.Max),
			cell(r, wCold, "%.1f", r.Cold.P50), dash(r, wCold, "%.1f", r.Cold.P99), dash(r, wCold, "%.1f", r.Cold.Max),
			cell(r, wUp, "%.2f", r.Up), cell(r, wDown, "%.2f", r.Down))
	}
	if kni := anyKNI(order); kni {
		w("\n`kni-*` rows list the NFS tree once, with a 10 min timeout: with a 1 or 4 ms poll interval every NFS round trip waits for the poll, so one run is enough to show the pathology.\n")
	}

	w("\n### CPU of the forwarder process (%% of one core)\n\n")
	w("utime+stime of the whole forwarder process (kbridge's PID, or testpmd's) from /proc/PID/stat over each workload. ")
	w("Idle: %v after 1 s without traffic. `app lcore` is the reference DPDK app's own busy-polling lcore (the customer's app, present with every kbridge mode; testpmd has no separate app).\n\n", d.Idle)
	w("| forwarder | idle | NFS | ping-pong | cold | iperf3 to peer | iperf3 from peer | app lcore (idle) |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range order {
		r := res[n]
		row := []string{n}
		for _, k := range []string{wIdle, wNFS, wPP, wCold, wUp, wDown} {
			if _, bad := r.Errs[k]; bad {
				row = append(row, "error")
			} else if v, ok := r.CPU[k]; ok {
				row = append(row, fmt.Sprintf("%.1f", v))
			} else {
				row = append(row, "-")
			}
		}
		if r.AppCPU >= 0 {
			row = append(row, fmt.Sprintf("%.0f", r.AppCPU))
		} else {
			row = append(row, "-")
		}
		w("| %s |\n", strings.Join(row, " | "))
	}

	var foreign []string
	for _, n := range order {
		if f := res[n].Foreign; f != "" {
			foreign = append(foreign, fmt.Sprintf("- %s: %s", n, f))
		}
	}
	if len(foreign) > 0 {
		w("\nLoad this benchmark does not control: processes outside the bed's namespaces above 5%% of a core, averaged over each forwarder's measurements (kernel threads may be working for the bed):\n\n%s\n", strings.Join(foreign, "\n"))
	}

	w("\n## Targets (issue 3)\n\n")
	w("| target | goal | this run | verdict |\n|---|---|---|---|\n")
	for _, t := range evalTargets(res) {
		w("| %s | %s | %s | %s |\n", t.Name, t.Goal, t.Value, t.Verdict)
	}

	if kc := kbridgeRows(order, res); kc != "" {
		w("\n## kbridge counters per workload\n\n")
		w("Deltas of `kbridge stats` over each workload. Residence = app enqueue to TAP write (kernel-bound direction), as the upper bound of the histogram bucket holding p50/p99.\n\n")
		w("| forwarder | workload | pkts to kernel | pkts from kernel | parks | wakeups | park timeouts | sleeps | app kicks | drops (reason) | residence p50 | residence p99 |\n")
		w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		b.WriteString(kc)
	}

	var errs []string
	for _, n := range order {
		for _, k := range []string{wIdle, wPP, wCold, wNFS, wUp, wDown} {
			if e := res[n].Errs[k]; e != "" {
				errs = append(errs, fmt.Sprintf("- %s, %s: %s", n, workloadNames[k], e))
			}
		}
	}
	if len(errs) > 0 {
		w("\n## Errors\n\n%s\n", strings.Join(errs, "\n"))
	}
	if m.PlotFile != "" {
		w("\n## Latency CDF\n\n![continuous ping-pong latency CDF](%s)\n", m.PlotFile)
	}
	if m.RawDir != "" {
		w("\nRaw outputs (sockperf full logs, kbridge stats): `%s`\n", m.RawDir)
	}
	return b.String()
}

// dash renders the second and later figures of a workload: "-" on error (the
// first column already says why).
func dash(r *Result, key, format string, v float64) string {
	if _, bad := r.Errs[key]; bad {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func anyKNI(order []string) bool {
	for _, n := range order {
		if strings.HasPrefix(n, "kni-") {
			return true
		}
	}
	return false
}

func kbridgeRows(order []string, res map[string]*Result) string {
	var b strings.Builder
	for _, n := range order {
		r := res[n]
		for _, k := range []string{wIdle, wPP, wCold, wNFS, wUp, wDown} {
			c, ok := r.Counters[k]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n", n, workloadNames[k],
				c.ToKernel, c.FromKernel, c.Parks, c.Wakeups, c.Timeouts, c.Sleeps, c.Kicks, c.dropsText(),
				fmtNs(c.residenceQuantile(0.5)), fmtNs(c.residenceQuantile(0.99)))
		}
	}
	return b.String()
}

// fmtNs renders a histogram bound: "<4 us", "<1 ms"; "-" when empty.
func fmtNs(ns uint64) string {
	switch {
	case ns == 0:
		return "-"
	case ns < 1000:
		return fmt.Sprintf("<%d ns", ns)
	case ns < 10000:
		return fmt.Sprintf("<%.1f us", float64(ns)/1e3)
	case ns < 1000000:
		return fmt.Sprintf("<%.0f us", float64(ns)/1e3)
	default:
		return fmt.Sprintf("<%.1f ms", float64(ns)/1e6)
	}
}

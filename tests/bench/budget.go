package main

// The latency budget (`kbt-bench -budget`, `make latency-budget`):
// one TCP ping-pong per forwarder (direct, kbridge-adaptive, testpmd), traced
// with `perf sched record`, and the round trip split into what can be
// attributed: the scheduler's wakeup delays of the client, the server and the
// forwarder's threads (perf sched latency), kbridge's own counters (kicks,
// parks, wakeups per round trip) and its residence histogram (app enqueue to
// TAP write). What is left is the packet work itself: both TCP stacks, the
// veths, AF_PACKET, the rings and the poll loops.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// schedRow is one line of `perf sched latency -p`.
type schedRow struct {
	Comm      string
	TID       int
	RuntimeMs float64
	Switches  int
	AvgMs     float64
	MaxMs     float64
}

// parsePerfSchedLatency reads `perf sched latency -p` output: per thread
// "comm:tid | runtime ms | switches | avg: X ms | max: Y ms | ...".
func parsePerfSchedLatency(out string) ([]schedRow, error) {
	var rows []schedRow
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) < 5 || !strings.Contains(f[3], "avg:") {
			continue
		}
		task := strings.TrimSpace(f[0])
		i := strings.LastIndexByte(task, ':')
		if i < 0 {
			continue
		}
		tid, err := strconv.Atoi(task[i+1:])
		if err != nil {
			continue // merged rows "comm:(N)"
		}
		num := func(s string) float64 {
			s = strings.TrimSpace(s)
			for _, p := range []string{"avg:", "max:"} {
				s = strings.TrimPrefix(s, p)
			}
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "ms")), 64)
			return v
		}
		sw, _ := strconv.Atoi(strings.TrimSpace(f[2]))
		rows = append(rows, schedRow{Comm: task[:i], TID: tid, RuntimeMs: num(f[1]), Switches: sw, AvgMs: num(f[3]), MaxMs: num(f[4])})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no per-task rows in perf sched latency output (last line: %q)", harness.LastLine(out))
	}
	return rows, nil
}

// schedAgg sums the wakeup delays of a set of threads.
type schedAgg struct {
	Switches     int
	AvgUs, MaxUs float64 // mean weighted by switches; worst
}

func aggregate(rows []schedRow, tids map[int]bool) schedAgg {
	var a schedAgg
	var sum float64
	for _, r := range rows {
		if !tids[r.TID] {
			continue
		}
		a.Switches += r.Switches
		sum += r.AvgMs * 1000 * float64(r.Switches)
		a.MaxUs = math.Max(a.MaxUs, r.MaxMs*1000)
	}
	if a.Switches > 0 {
		a.AvgUs = sum / float64(a.Switches)
	}
	return a
}

// perRT is a count per round trip.
func perRT(n, rts int) float64 {
	if rts == 0 {
		return 0
	}
	return float64(n) / float64(rts)
}

// Budget is one forwarder's round trip and its attributable parts.
type Budget struct {
	Name           string
	Kind           string
	RTT            Latency // round trip (2x sockperf's one-way), us
	Mean           float64 // mean round trip, us
	Client, Server schedAgg
	Fwd            schedAgg // the forwarder process's threads (kbridge's or testpmd's)
	App            schedAgg // the reference DPDK app's threads (kbridge beds): a preempted poller delays packets too
	RunSec, Traced float64  // sockperf's run and the traced window around it, seconds
	Counters       *Counters
	Err            string
}

// wakeups returns the wakeup delay per round trip (us) of a set of threads.
func (b *Budget) wakeups(a schedAgg) float64 { return perRT(a.Switches, b.RTT.N) * a.AvgUs }

// pollerShare scales the delays of a busy poller, which is preempted whether
// or not traffic flows, from the traced window to sockperf's run.
func (b *Budget) pollerShare() float64 {
	if b.Traced <= 0 || b.RunSec <= 0 || b.RunSec > b.Traced {
		return 1
	}
	return b.RunSec / b.Traced
}

// poller returns a poller's delays scaled to the run.
func (b *Budget) poller(a schedAgg) schedAgg {
	a.Switches = int(math.Round(float64(a.Switches) * b.pollerShare()))
	return a
}

// rest is the mean round trip minus the delays on its path: the client's,
// the server's, the app's poller's and the forwarder's critical ones.
func (b *Budget) rest() float64 {
	return b.Mean - b.wakeups(b.Client) - b.wakeups(b.Server) - b.wakeups(b.critical()) - b.wakeups(b.poller(b.App))
}

// critical is the part of the forwarder's delays that the round trip waits
// for. testpmd's are all of them (a preempted poller holds packets). A
// kbridge worker that spins yields its CPU whenever the client or the server
// is runnable; perf counts each yield as a delay, but the round trip is then
// running the client's or the server's work, not waiting for kbridge. The
// round trip waits for kbridge after a park's wakeup, so kbridge's critical
// delays are estimated as its wakeups (kbridge's own counter) at the mean
// delay: at most all of them (interrupt mode), about none while it spins.
func (b *Budget) critical() schedAgg {
	a := b.fwd()
	if b.Kind == "testpmd" || b.Counters == nil {
		return a
	}
	a.Switches = min(a.Switches, int(b.Counters.Wakeups))
	return a
}

// fwd is the forwarder's delays: testpmd's threads are pollers (scaled to
// the run); kbridge's sleep and wake with traffic (counted as traced).
func (b *Budget) fwd() schedAgg {
	if b.Kind == "testpmd" {
		return b.poller(b.Fwd)
	}
	return b.Fwd
}

// measureBudget runs the traced ping-pong against f.
func (rn *Runner) measureBudget(ctx context.Context, f Forwarder) *Budget {
	b := &Budget{Name: f.Name, Kind: f.Kind}
	if err := rn.budgetRun(ctx, f, b); err != nil {
		b.Err = err.Error()
		rn.log("%s: budget: %v", f.Name, err)
	} else {
		rn.log("%s: budget: round trip p50 %.1f us, mean %.1f us, %d round trips", f.Name, b.RTT.P50, b.Mean, b.RTT.N)
	}
	return b
}

func (rn *Runner) budgetRun(ctx context.Context, f Forwarder, b *Budget) error {
	ns, ip := f.target()
	var before Counters
	if f.hasKbridge() {
		_, c, err := rn.bed.stats(ctx)
		if err != nil {
			return err
		}
		before = c
	}
	data := filepath.Join(rn.rawDir, f.Name+"-perf-sched.data")
	defer os.Remove(data) // tens of MB; the latency table is kept
	// perf runs until sockperf is done: SIGTERM (the context's cancel) makes
	// it write the data and exit.
	perfDone := make(chan error, 1)
	pctx, stopPerf := context.WithCancel(ctx)
	defer stopPerf()
	tTrace := time.Now()
	go func() {
		_, err := harness.Output(pctx, rn.d.PP+2*time.Minute, nil, "perf", "sched", "record", "-a", "-o", data)
		perfDone <- err
	}()
	if err := sleepCtx(ctx, 700*time.Millisecond); err != nil {
		return err
	}
	tRun := time.Now()
	full := filepath.Join(rn.rawDir, f.Name+"-budget-pp.csv")
	sctx, cancel := context.WithTimeout(ctx, rn.d.PP+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(sctx, "ip", rn.bed.pin(ns, "sockperf", "pp", "--tcp", "-i", ip, "-p", "11111",
		"-t", fmt.Sprint(int(rn.d.PP.Seconds())), "--full-log", full)...)
	out, err := cmd.Output()
	b.RunSec = time.Since(tRun).Seconds()
	stopPerf()
	perr := <-perfDone
	b.Traced = time.Since(tTrace).Seconds()
	clientPID := 0
	if cmd.Process != nil {
		clientPID = cmd.Process.Pid // ip netns exec and taskset exec: the same pid is sockperf's
	}
	_ = os.WriteFile(strings.TrimSuffix(full, ".csv")+".out", out, 0o644)
	if err != nil {
		return fmt.Errorf("sockperf: %v", err)
	}
	if fi, err := os.Stat(data); err != nil || fi.Size() == 0 {
		return fmt.Errorf("perf sched record wrote no data: %v", perr) // stopped by us, its own exit status is no error
	}
	text, err := os.ReadFile(full)
	if err != nil {
		return err
	}
	lat, err := parseFullLog(string(text))
	if err != nil {
		return err
	}
	rt := make([]float64, len(lat))
	for i, v := range lat {
		rt[i] = 2 * v
		b.Mean += rt[i] / float64(len(lat))
	}
	b.RTT = Latency{P50: quantile(rt, 0.5), P99: quantile(rt, 0.99), P999: quantile(rt, 0.999), N: len(rt)}
	if f.hasKbridge() {
		if _, c, err := rn.bed.stats(ctx); err == nil {
			d := c.sub(before)
			b.Counters = &d
		}
	}
	// Threads of the client, the server and the forwarder, then the delays.
	sched, err := harness.Output(ctx, 2*time.Minute, nil, "perf", "sched", "latency", "-p", "-i", data)
	_ = os.WriteFile(filepath.Join(rn.rawDir, f.Name+"-perf-sched-latency.txt"), sched, 0o644)
	if err != nil {
		return err
	}
	rows, err := parsePerfSchedLatency(string(sched))
	if err != nil {
		return err
	}
	b.Client = aggregate(rows, map[int]bool{clientPID: true})
	if pid, err := readPID("sockperf"); err == nil {
		b.Server = aggregate(rows, tidsOf(pid))
	}
	if f.Kind != "direct" && rn.bed.fwdPID != 0 {
		b.Fwd = aggregate(rows, tidsOf(rn.bed.fwdPID))
	}
	if f.hasKbridge() && rn.bed.appPID != 0 {
		b.App = aggregate(rows, tidsOf(rn.bed.appPID))
	}
	return nil
}

// tidsOf lists a process's threads.
func tidsOf(pid int) map[int]bool {
	out := map[int]bool{pid: true}
	dirs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, d := range dirs {
		if t, err := strconv.Atoi(filepath.Base(d)); err == nil {
			out[t] = true
		}
	}
	return out
}

// renderBudget writes the budget report: one column per forwarder.
func renderBudget(m Machine, bs []*Budget) string {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("# kbridge latency budget, %s\n\n", m.Started)
	if m.Interrupted {
		w("**Interrupted: the figures below are incomplete.**\n\n")
	}
	w("- machine: %d CPUs, %s; kernel %s, HZ=%s; DPDK %s; kbridge %s\n", m.NCPU, m.Model, m.Kernel, m.HZ, m.DPDK, m.Kbridge)
	w("- command: `%s`\n- CPU placement (tests/testbed/README.md): %s\n", or(m.Make, m.Command), m.Placement)
	w("- load average (1/5/15 min) at start: %s; at end: %s\n- run time: %s\n\n", m.LoadStart, m.LoadEnd, m.Duration)
	w("One `sockperf pp --tcp` run per forwarder, traced system-wide with `perf sched record` (the tracing itself adds a little to every wakeup). ")
	w("Round trip = twice sockperf's one-way figure. Delay = time from a thread's wakeup, or its preemption, to it running again (`perf sched latency`), times how often that happened per round trip; for a busy-polling lcore (testpmd's, the reference app's) it is time the poller was kept off its CPU, counted over the sockperf run only (the trace starts a little before it). ")
	w("kbridge's counters are deltas of `kbridge stats` over the run; residence is app enqueue to TAP write, the kernel-bound half of kbridge's path, as histogram bucket bounds. ")
	w("A spinning kbridge worker yields its CPU whenever the client or the server is runnable, and perf counts every such yield as a delay; those overlap the client's and the server's work, so only the delays the round trip waits for are subtracted. `rest` is the mean round trip minus the delays on its path: both TCP stacks, the veths, AF_PACKET, the rings and poll loops, and the programs' own work. bpftrace is not used (%s).\n\n", bpftraceNote())

	w("| | %s |\n|---|%s\n", strings.Join(names2(bs), " | "), strings.Repeat("---:|", len(bs)))
	row := func(label string, f func(b *Budget) string) {
		cells := []string{}
		for _, b := range bs {
			if b.Err != "" {
				cells = append(cells, "error: "+shorten(b.Err, 60))
				continue
			}
			cells = append(cells, f(b))
		}
		w("| %s | %s |\n", label, strings.Join(cells, " | "))
	}
	var direct *Budget
	for _, b := range bs {
		if b.Kind == "direct" && b.Err == "" {
			direct = b
		}
	}
	row("round trips measured (sockperf run / traced, s)", func(b *Budget) string {
		return fmt.Sprintf("%d (%.1f / %.1f)", b.RTT.N, b.RunSec, b.Traced)
	})
	row("round trip p50 / p99 (us)", func(b *Budget) string { return fmt.Sprintf("%.1f / %.1f", b.RTT.P50, b.RTT.P99) })
	row("round trip mean (us)", func(b *Budget) string { return fmt.Sprintf("%.1f", b.Mean) })
	row("mean added over direct (us)", func(b *Budget) string {
		if direct == nil || b == direct {
			return "-"
		}
		return fmt.Sprintf("%+.1f", b.Mean-direct.Mean)
	})
	agg := func(a schedAgg, b *Budget) string {
		if a.Switches == 0 {
			return "0"
		}
		return fmt.Sprintf("%.1f (%.2f delays x %.1f us; worst %.0f us)", b.wakeups(a), perRT(a.Switches, b.RTT.N), a.AvgUs, a.MaxUs)
	}
	row("client wakeup delay per round trip (us)", func(b *Budget) string { return agg(b.Client, b) })
	row("server wakeup delay per round trip (us)", func(b *Budget) string { return agg(b.Server, b) })
	row("forwarder threads' delay per round trip (us)", func(b *Budget) string {
		if b.Kind == "direct" {
			return "-"
		}
		return agg(b.fwd(), b)
	})
	row("of which the round trip waits for (us): testpmd all; kbridge its wakeups from a park, est.", func(b *Budget) string {
		if b.Kind == "direct" {
			return "-"
		}
		return fmt.Sprintf("%.1f", b.wakeups(b.critical()))
	})
	row("reference app's threads' delay per round trip (us)", func(b *Budget) string {
		if b.Kind != "kbridge" {
			return "-"
		}
		return agg(b.poller(b.App), b)
	})
	row("kbridge: app kicks / parks / wakeups per round trip", func(b *Budget) string {
		if b.Counters == nil {
			return "-"
		}
		c := b.Counters
		return fmt.Sprintf("%.2f / %.2f / %.2f", perRT(int(c.Kicks), b.RTT.N), perRT(int(c.Parks), b.RTT.N), perRT(int(c.Wakeups), b.RTT.N))
	})
	row("kbridge: residence app enqueue to TAP write, p50 / p99", func(b *Budget) string {
		if b.Counters == nil {
			return "-"
		}
		return fmt.Sprintf("%s / %s", fmtNs(b.Counters.residenceQuantile(0.5)), fmtNs(b.Counters.residenceQuantile(0.99)))
	})
	row("kbridge: drops", func(b *Budget) string {
		if b.Counters == nil {
			return "-"
		}
		return b.Counters.dropsText()
	})
	row("rest: stacks, veths, AF_PACKET, rings, poll loops (us)", func(b *Budget) string {
		return fmt.Sprintf("%.1f", b.rest())
	})
	if direct != nil {
		row("rest minus direct's rest: the forwarder's packet work (us)", func(b *Budget) string {
			if b == direct {
				return "-"
			}
			return fmt.Sprintf("%+.1f", b.rest()-direct.rest())
		})
	}
	if m.RawDir != "" {
		w("\nRaw outputs (sockperf full logs, `perf sched latency -p` tables): `%s`\n", m.RawDir)
	}
	return sb.String()
}

func names2(bs []*Budget) []string {
	var n []string
	for _, b := range bs {
		n = append(n, b.Name)
	}
	return n
}

func bpftraceNote() string {
	if _, err := exec.LookPath("bpftrace"); err != nil {
		return "not installed"
	}
	return "perf sched covers the wakeups"
}

// budgetForwarders picks the budget's forwarders: direct, kbridge modes and
// testpmd from the -forwarders list ("all": direct, kbridge-adaptive, testpmd).
func budgetForwarders(list string) ([]Forwarder, error) {
	if list == "" || list == "all" {
		list = "direct,kbridge-adaptive,testpmd"
	}
	fws, err := selectForwarders(list)
	if err != nil {
		return nil, err
	}
	var out []Forwarder
	for _, f := range fws {
		if f.Kind == "ceiling" {
			continue
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, errors.New("-budget: no forwarder selected")
	}
	return out, nil
}

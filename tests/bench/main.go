// Command kbt-bench is `make bench`: it measures kbridge in each polling mode,
// the KNI emulation, testpmd's TAP PMD path and the direct veth floor side by
// side on the namespace test bed (tests/testbed/README.md), and writes a markdown report
// and a latency CDF picture to results/.
//
//	sudo make bench                       # or: cd tests/bench && sudo go run . -root ../..
//	sudo bin/kbt-bench -forwarders direct,kbridge-adaptive,testpmd -quick
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

func main() {
	os.Exit(mainErr())
}

func mainErr() int {
	fwList := flag.String("forwarders", "all", "comma-separated subset of: direct,kbridge-busy,kbridge-adaptive,kbridge-plain,kbridge-interrupt,kbridge-learn,kni-4ms,kni-1ms,kbridge-vhost,testpmd,bed-ceiling,direct-9000,kbridge-9000,direct-gro,kbridge-nic-offload,kbridge-no-tso,kbridge-kni-api")
	quick := flag.Bool("quick", false, "shorten every workload (a smoke test, not a measurement)")
	root := flag.String("root", ".", "repository root (holds tests/testbed and bin/)")
	outDir := flag.String("out", "results", "directory for the report, the picture and raw outputs")
	waitBed := flag.Duration("wait-bed", 15*time.Minute, "wait this long for a test bed someone else is using to go away")
	force := flag.Bool("force", false, "take the test bed over even if someone else is using it (up.sh tears it down)")
	budget := flag.Bool("budget", false, "the latency budget of issue 11 instead of the benchmark: a ping-pong per forwarder (default direct,kbridge-adaptive,testpmd), traced with perf sched, split into wakeup delays, kbridge's counters and residence, and the rest")
	profile := flag.Bool("profile", false, "the CPU 0 profile of issue 19 instead of the benchmark: perf record of CPU 0 with call graphs during iperf3 each way, the NFS read of big.bin and NFS ls -R through kbridge (default kbridge-adaptive); a table of shares and a flame graph per workload")
	rounds := flag.Int("rounds", 1, "-profile: run every workload this many times, interleaved, and report the range")
	serve := flag.String("serve-http", "", "serve the HTTP workload's keep-alive server on ADDR and nothing else (the bench starts it in kbt-peer)")
	flag.Parse()

	if *serve != "" {
		if err := serveHTTP(*serve); err != nil {
			fmt.Fprintln(os.Stderr, "kbt-bench -serve-http:", err)
			return 1
		}
		return 0
	}

	start := time.Now()
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "bench [%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "bench: error:", err); return 1 }

	fws, err := selectForwarders(*fwList)
	if *budget {
		fws, err = budgetForwarders(*fwList)
	}
	if *profile {
		fws, err = profileForwarders(*fwList)
		if *rounds < 1 {
			err = fmt.Errorf("-rounds %d: want at least 1", *rounds)
		}
	}
	if err != nil {
		return fail(err)
	}
	if os.Geteuid() != 0 {
		return fail(fmt.Errorf("must run as root (network namespaces, DPDK, hugepages): sudo make bench"))
	}
	if *root, err = filepath.Abs(*root); err != nil {
		return fail(err)
	}
	baseCfg, err := os.ReadFile(filepath.Join(*root, "tests/testbed/kbridge.yaml"))
	if err != nil {
		return fail(fmt.Errorf("%v (run from the repository root, or pass -root)", err))
	}
	for _, f := range []string{"bin/kbridge", "bin/kbridge-refapp"} {
		if _, err := os.Stat(filepath.Join(*root, f)); err != nil {
			return fail(fmt.Errorf("%s missing: run make build", f))
		}
	}
	tools := []string{"sockperf", "iperf3", "nfs-ls", "nfs-cat", "taskset", "ip", "ss", "ping"}
	if *budget {
		tools = []string{"sockperf", "taskset", "ip", "perf"}
	}
	if *profile {
		tools = []string{"iperf3", "nfs-ls", "nfs-cat", "taskset", "ip", "perf"}
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fail(fmt.Errorf("missing tool %s: run make deps", tool))
		}
	}

	stamp := start.UTC().Format("20060102T150405Z")
	raw := filepath.Join(*outDir, "raw-"+stamp)
	if err := os.MkdirAll(raw, 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp("", "kbt-bench-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)

	ncpu := runtime.NumCPU()
	bed := &Bed{root: *root, cfgPath: filepath.Join(tmp, "kbridge.yaml"), baseCfg: string(baseCfg), cpus: clientCPUs(ncpu)}
	if hasKind(fws, "vhost") {
		vh, err := os.ReadFile(filepath.Join(*root, "tests/testbed/kbridge-vhost.yaml"))
		if err != nil {
			return fail(err)
		}
		bed.vhostCfg = string(vh)
		if _, err := exec.LookPath("dpdk-testpmd"); err != nil {
			return fail(fmt.Errorf("kbridge-vhost needs dpdk-testpmd (the app of KBT_MODE=vhost): run make deps"))
		}
	}
	d := fullDurations
	if *quick {
		d = quickDurations
	}
	rn := &Runner{bed: bed, d: d, clkTck: clkTck(), rawDir: raw, log: logf}
	m := machineInfo(*root, ncpu, bed.cpus, *quick)
	m.BusyStart = busyProcesses(2*time.Second, rn.clkTck, 10)
	logf("forwarders: %s; clients on CPUs %q; load average %s; other busy processes: %s", names(fws), bed.cpus, m.LoadStart, m.BusyStart)

	// Ctrl-C / SIGTERM: the running command is stopped, the bed torn down
	// (runBed defers it), and what was measured so far is still reported.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	res, order := map[string]*Result{}, []string{}
	for _, f := range fws {
		res[f.Name] = newResult(f.Name)
		order = append(order, f.Name)
	}
	if *budget {
		rn.budget = map[string]*Budget{}
	}
	if *profile {
		rn.profile, rn.rounds = map[string]*ProfileRun{}, *rounds
	}
	rn.runAll(ctx, fws, res, *waitBed, *force)

	m.LoadEnd = harness.LoadAvg()
	if ctx.Err() == nil {
		m.BusyEnd = busyProcesses(2*time.Second, rn.clkTck, 10)
	}
	m.Duration = time.Since(start).Round(time.Second).String()
	m.Interrupted = ctx.Err() != nil
	m.RawDir = raw

	if *profile {
		return rn.reportProfiles(m, order, *outDir, stamp, logf)
	}
	if *budget {
		var bs []*Budget
		for _, n := range order {
			if b := rn.budget[n]; b != nil {
				bs = append(bs, b)
			} else {
				bs = append(bs, &Budget{Name: n, Err: or(firstErr(res[n]), "not measured")})
			}
		}
		report := renderBudget(m, bs)
		fmt.Print(report)
		path := filepath.Join(*outDir, "latency-budget-"+stamp+".md")
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			return fail(err)
		}
		logf("latency budget: %s", path)
		if m.Interrupted {
			return 130
		}
		return 0
	}

	var series []Series
	for _, n := range order {
		if len(res[n].Lat) > 0 {
			series = append(series, Series{Name: n, Lat: res[n].Lat})
		}
	}
	png := filepath.Join(*outDir, "latency-cdf-"+stamp+".png")
	if len(series) > 0 {
		title := fmt.Sprintf("kbridge test bed, %s, %d CPUs, HZ=%s: sockperf TCP ping-pong, %v continuous", m.Started, ncpu, m.HZ, d.PP)
		if err := writeCDF(png, title, series); err != nil {
			logf("latency CDF: %v", err)
		} else {
			m.PlotFile = filepath.Base(png)
		}
	}
	report := render(m, order, res, d)
	fmt.Print(report)
	mdPath := filepath.Join(*outDir, "bench-"+stamp+".md")
	if err := os.WriteFile(mdPath, []byte(report), 0o644); err != nil {
		return fail(err)
	}
	if m.PlotFile != "" {
		logf("report: %s; latency CDF: %s", mdPath, png)
	} else {
		logf("report: %s (no latency data, no CDF)", mdPath)
	}
	if m.Interrupted {
		return 130
	}
	return 0
}

func names(fs []Forwarder) string {
	var n []string
	for _, f := range fs {
		n = append(n, f.Name)
	}
	return strings.Join(n, ",")
}

// firstErr is one of a result's errors (a bed that failed to come up fails
// every workload with the same message).
func firstErr(r *Result) string {
	for _, k := range allWorkloads {
		if e := r.Errs[k]; e != "" {
			return e
		}
	}
	return ""
}

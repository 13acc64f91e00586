// Command kbt-soak is `make soak`: a long run of mixed traffic
// through kbridge on the namespace test bed (tests/testbed/README.md), with
// policy reloads every minute and, in the middle, a kbridge restart and a
// DPDK app restart. It reports per window (5 minutes by default) the NFS
// listings and big.bin reads that succeeded or failed, iperf3 and sockperf
// figures, kbridge's drops by reason and the app pool's in-use drift, and
// exits non-zero on a leak, a data mismatch or a crash.
//
// tests/soak/soak.sh builds it, claims the bed (waits while someone else
// uses it) and runs it with the lock held; it brings the bed up and down
// itself. Root only. Not part of CI.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tests/harness"
)

// The bed's names (tests/testbed/README.md, lib.sh).
const (
	nsDUT      = "kbt-dut"
	peerIP     = "198.18.0.1"
	runDir     = "/run/kbt"
	statsSock  = runDir + "/kbridge.sock"
	bigSHAFile = "/var/lib/kbt/big.bin.sha256"
	bigBytes   = 256 << 20
	nfsEntries = 6001
	dpdkPrefix = "kbt"
)

func main() {
	root := flag.String("root", ".", "repository root")
	report := flag.String("report", "", "where to write the report (default results/soak-<UTC>-<mode>.md)")
	flag.Parse()
	os.Exit(run(*root, *report))
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "soak %s: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func envMinutes(name string, def float64) float64 {
	if v := os.Getenv(name); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return f
		}
		logf("%s=%q is not a positive number of minutes: using %g", name, v, def)
	}
	return def
}

func run(rootArg, reportPath string) int {
	if os.Geteuid() != 0 {
		logf("must run as root (namespaces, DPDK): sudo make soak")
		return 2
	}
	root, err := filepath.Abs(rootArg)
	if err != nil {
		logf("%v", err)
		return 2
	}
	// soak.sh holds /run/kbt.lock on fd 9 (kbt_claim_bed): keep holding
	// it, but let no child of ours (kbridge, the app) inherit it.
	if os.Getenv("KBT_LOCK_HELD") == "1" {
		unix.CloseOnExec(9)
	}
	s := newSoak(root)
	s.reportPath = reportPath
	if s.side, err = appSideFor(os.Getenv("SOAK_MODE")); err != nil {
		logf("%v", err)
		return 2
	}
	s.total = time.Duration(envMinutes("SOAK_MINUTES", 30) * float64(time.Minute))
	s.window = time.Duration(envMinutes("SOAK_WINDOW_MINUTES", 5) * float64(time.Minute))

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	code := s.main(ctx)
	return code
}

type soak struct {
	root, bin, app, cfgPath, baseCfg string
	appCPU, otherCPUs                string
	total, window                    time.Duration
	started                          time.Time
	wantSHA                          string
	command                          string
	side                             appSide
	reportPath                       string

	gate sync.RWMutex // workloads hold it shared per iteration; quiesce takes it

	mu       sync.Mutex
	windows  []*window
	failures []string // reasons for a non-zero exit
	events   []string
	acc      counterAcc
	baseline int // the app pool's (in use - in rings) after a quiet moment
	modeIdx  int
	mode     string
	children sync.WaitGroup
}

// window is what happened in one reporting window.
type window struct {
	idx                            int
	from, to                       time.Duration
	nfsOK, nfsFail                 int
	nfsSec                         []float64
	readOK, readMismatch, readFail int
	readMBs                        []float64
	up, down                       []float64
	iperfFail                      int
	p50, p99                       []float64
	ppFail                         int
	reloadOK, reloadFail           int
	drops                          map[string]uint64
	toKernel, fromKernel, timeouts uint64
	appDropped                     uint64
	drift                          *int
	inUse, inRings                 int
	events                         []string
	failNotes                      []string
	nfsErrs, readErrs              []string
	iperfErrs, ppErrs              []string
}

func newSoak(root string) *soak {
	s := &soak{root: root, bin: filepath.Join(root, "bin/kbridge"), app: filepath.Join(root, "bin/kbridge-refapp")}
	s.appCPU, s.otherCPUs = cpuPlacement()
	s.command = os.Getenv("KBT_SOAK_COMMAND")
	if s.command == "" {
		s.command = "make soak"
	}
	return s
}

// cpuPlacement mirrors kbt_cpus in tests/testbed/lib.sh.
func cpuPlacement() (app, others string) {
	n := runtime.NumCPU()
	app = strconv.Itoa(n - 1)
	if v, ok := os.LookupEnv("KBT_APP_CPU"); ok {
		app = v
	}
	switch {
	case n <= 1:
		others = ""
	case n == 2:
		others = "0"
	default:
		others = fmt.Sprintf("0-%d", n-2)
	}
	if v, ok := os.LookupEnv("KBT_OTHER_CPUS"); ok {
		others = v
	}
	return app, others
}

// pin prefixes a command run in kbt-dut with taskset for the others CPUs.
func (s *soak) pin(args ...string) []string {
	out := []string{"ip", "netns", "exec", nsDUT}
	if s.otherCPUs != "" {
		out = append(out, "taskset", "-c", s.otherCPUs)
	}
	return append(out, args...)
}

func (s *soak) curLocked() *window {
	return s.windowLocked(int(time.Since(s.started) / s.window))
}

// windowLocked returns window idx (the last one for anything later),
// making it and those before it as needed.
func (s *soak) windowLocked(idx int) *window {
	last := int((s.total+s.window-1)/s.window) - 1
	idx = min(max(idx, 0), max(last, 0))
	for len(s.windows) <= idx {
		i := len(s.windows)
		s.windows = append(s.windows, &window{idx: i, from: time.Duration(i) * s.window,
			to: min(time.Duration(i+1)*s.window, s.total), drops: map[string]uint64{}})
	}
	return s.windows[idx]
}

func (s *soak) record(f func(w *window)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.curLocked())
}

func (s *soak) event(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	el := time.Since(s.started).Round(time.Second)
	logf("%s", msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	line := fmt.Sprintf("+%v %s", el, msg)
	s.events = append(s.events, line)
	w := s.curLocked()
	w.events = append(w.events, msg)
}

func (s *soak) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	s.event("FAILURE: %s", msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, msg)
	w := s.curLocked()
	w.failNotes = append(w.failNotes, msg)
}

func (s *soak) main(ctx context.Context) int {
	bins := []string{s.bin}
	if s.side.mode == "ring" {
		bins = append(bins, s.app)
	}
	for _, b := range bins {
		if _, err := os.Stat(b); err != nil {
			logf("%s missing: run make build (make soak does)", b)
			return 2
		}
	}
	sha, err := os.ReadFile(bigSHAFile)
	if err == nil {
		s.wantSHA = strings.TrimSpace(string(sha))
	}
	if s.baseCfg, err = s.side.baseConfig(s.root); err != nil {
		logf("%v", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "kbt-soak-")
	if err != nil {
		logf("%v", err)
		return 2
	}
	defer os.RemoveAll(dir)
	s.cfgPath = filepath.Join(dir, "kbridge.yaml")
	s.mode = "adaptive"
	if err := harness.WriteAtomic(s.cfgPath, withPolicy(s.baseCfg, s.mode)); err != nil {
		logf("%v", err)
		return 2
	}

	startUTC := time.Now().UTC()
	logf("bringing the test bed up in mode %s (tests/testbed/up.sh, KBRIDGE_CONFIG=%s)", s.side.mode, s.cfgPath)
	if out, err := runLoud(6*time.Minute, []string{"KBRIDGE_CONFIG=" + s.cfgPath, "KBT_MODE=" + s.side.mode},
		"bash", filepath.Join(s.root, "tests/testbed/up.sh")); err != nil || !bytes.Contains(out, []byte("testbed up")) {
		logf("up.sh failed: %v", err)
		s.down()
		return 2
	}
	if s.wantSHA == "" {
		if sha, err := os.ReadFile(bigSHAFile); err == nil {
			s.wantSHA = strings.TrimSpace(string(sha))
		}
	}
	if s.wantSHA == "" {
		logf("no %s after up.sh", bigSHAFile)
		s.down()
		return 2
	}
	s.started = time.Now()
	s.sample()

	// A quiet moment for the pool baseline.
	if d, err := s.quietDrift(); err != nil {
		s.fail("pool baseline: %v", err)
	} else {
		s.baseline = d
		s.event("pool baseline: in use - in rings = %d (quiet, before any traffic)", d)
	}

	fmt.Println(tableHead)
	wctx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range []func(context.Context){s.loopNFS, s.loopRead, s.loopIperf, s.loopPingPong, s.loopSampler} {
		wg.Add(1)
		go func() { defer wg.Done(); w(wctx) }()
	}

	s.control(ctx)
	stopWork()
	wg.Wait()
	s.closeWindow(len(s.windows)-1, true)

	report := s.report(startUTC)
	fmt.Print(report)
	_ = os.MkdirAll(filepath.Join(s.root, "results"), 0o755)
	path := s.reportPath
	if path == "" {
		path = filepath.Join(s.root, "results", "soak-"+startUTC.Format("20060102T150405Z")+"-"+s.side.mode+".md")
	}
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		logf("writing %s: %v", path, err)
	} else {
		logf("report written to %s", path)
	}
	s.down()
	if ctx.Err() != nil {
		logf("interrupted")
		return 130
	}
	if len(s.failures) > 0 {
		logf("FAILED: %s", strings.Join(s.failures, "; "))
		return 1
	}
	logf("passed")
	return 0
}

func (s *soak) down() {
	logf("tearing the test bed down (tests/testbed/down.sh)")
	if _, err := runLoud(3*time.Minute, nil, "bash", filepath.Join(s.root, "tests/testbed/down.sh")); err != nil {
		logf("down.sh: %v", err)
	}
	s.children.Wait()
}

// control runs the schedule: a policy reload every minute, the kbridge
// restart at 45% of the run, the app restart at 60%, a window report at
// the end of every window, a liveness check every second.
func (s *soak) control(ctx context.Context) {
	nextReload := time.Minute
	nextWindow := s.window
	kbAt, appAt := s.total*45/100, s.total*60/100
	kbDone, appDone := false, false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		el := time.Since(s.started)
		if el >= s.total {
			return
		}
		s.checkAlive()
		switch {
		case !kbDone && el >= kbAt:
			kbDone = true
			s.restartKbridge()
		case !appDone && el >= appAt:
			appDone = true
			s.restartApp()
		case el >= nextReload:
			nextReload += time.Minute
			s.reload()
		case el >= nextWindow && nextWindow < s.total:
			s.closeWindow(int(nextWindow/s.window)-1, false)
			nextWindow += s.window
		}
	}
}

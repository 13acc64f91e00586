// Command kbt-soak is `make soak` (issue 9): a long run of mixed traffic
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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
	flag.Parse()
	os.Exit(run(*root))
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

func run(rootArg string) int {
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
	s.total = time.Duration(envMinutes("SOAK_MINUTES", 30) * float64(time.Minute))
	s.window = time.Duration(envMinutes("SOAK_WINDOW_MINUTES", 5) * float64(time.Minute))

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	code := s.main(ctx)
	return code
}

// ---------------------------------------------------------------------------

type soak struct {
	root, bin, app, cfgPath, baseCfg string
	appCPU, otherCPUs                string
	total, window                    time.Duration
	started                          time.Time
	wantSHA                          string
	command                          string

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

// ---------------------------------------------------------------------------

func (s *soak) main(ctx context.Context) int {
	for _, b := range []string{s.bin, s.app} {
		if _, err := os.Stat(b); err != nil {
			logf("%s missing: run make build (make soak does)", b)
			return 2
		}
	}
	sha, err := os.ReadFile(bigSHAFile)
	if err == nil {
		s.wantSHA = strings.TrimSpace(string(sha))
	}
	base, err := os.ReadFile(filepath.Join(s.root, "tests/testbed/kbridge.yaml"))
	if err != nil {
		logf("%v", err)
		return 2
	}
	s.baseCfg = string(base)
	dir, err := os.MkdirTemp("", "kbt-soak-")
	if err != nil {
		logf("%v", err)
		return 2
	}
	defer os.RemoveAll(dir)
	s.cfgPath = filepath.Join(dir, "kbridge.yaml")
	s.mode = "adaptive"
	if err := writeAtomic(s.cfgPath, withPolicy(s.baseCfg, s.mode)); err != nil {
		logf("%v", err)
		return 2
	}

	startUTC := time.Now().UTC()
	logf("bringing the test bed up (tests/testbed/up.sh, KBRIDGE_CONFIG=%s)", s.cfgPath)
	if out, err := runLoud(6*time.Minute, []string{"KBRIDGE_CONFIG=" + s.cfgPath},
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
	path := filepath.Join(s.root, "results", "soak-"+startUTC.Format("20060102T150405Z")+".md")
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

// ---------------------------------------------------------------------------
// Workloads. Each holds the gate shared for one iteration, so that quiesce
// waits for running iterations and starts no new one.

func (s *soak) loop(ctx context.Context, pause time.Duration, f func(context.Context)) {
	for ctx.Err() == nil {
		s.gate.RLock()
		if ctx.Err() == nil {
			f(ctx)
		}
		s.gate.RUnlock()
		sleepCtx(ctx, pause)
	}
}

func (s *soak) loopNFS(ctx context.Context) {
	url := fmt.Sprintf("nfs://%s/export?version=4", peerIP)
	s.loop(ctx, time.Second, func(ctx context.Context) {
		t0 := time.Now()
		out, err := runCmd(ctx, 3*time.Minute, nil, s.pin("nfs-ls", "-R", url)...)
		sec := time.Since(t0).Seconds()
		if ctx.Err() != nil {
			return
		}
		n := countLines(out)
		s.record(func(w *window) {
			if err == nil && n == nfsEntries {
				w.nfsOK++
				w.nfsSec = append(w.nfsSec, sec)
				return
			}
			w.nfsFail++
			w.nfsErrs = append(w.nfsErrs, fmt.Sprintf("+%v: %d entries, %v", time.Since(s.started).Round(time.Second), n, err))
		})
	})
}

func (s *soak) loopRead(ctx context.Context) {
	url := fmt.Sprintf("nfs://%s/export/big.bin?version=4", peerIP)
	s.loop(ctx, time.Second, func(ctx context.Context) {
		t0 := time.Now()
		sum, n, err := hashCmd(ctx, 3*time.Minute, s.pin("nfs-cat", url)...)
		sec := time.Since(t0).Seconds()
		if ctx.Err() != nil {
			return
		}
		at := time.Since(s.started).Round(time.Second)
		switch {
		case err != nil:
			s.record(func(w *window) {
				w.readFail++
				w.readErrs = append(w.readErrs, fmt.Sprintf("+%v: %d bytes, %v", at, n, err))
			})
		case n != bigBytes || sum != s.wantSHA:
			// nfs-cat said it succeeded: what it returned is wrong.
			s.record(func(w *window) { w.readMismatch++ })
			s.fail("big.bin read at +%v: %d bytes, sha256 %s, want %d bytes, %s", at, n, sum, bigBytes, s.wantSHA)
		default:
			s.record(func(w *window) {
				w.readOK++
				w.readMBs = append(w.readMBs, float64(n)/1e6/sec)
			})
		}
	})
}

func (s *soak) loopIperf(ctx context.Context) {
	reverse := false
	s.loop(ctx, time.Second, func(ctx context.Context) {
		args := []string{"iperf3", "-c", peerIP, "-p", "5201", "-J", "--connect-timeout", "5000", "-t", "5"}
		if reverse {
			args = append(args, "-R")
		}
		rev := reverse
		reverse = !reverse
		out, err := runCmd(ctx, time.Minute, nil, s.pin(args...)...)
		if ctx.Err() != nil {
			return
		}
		var g float64
		if err == nil {
			g, err = parseIperf3(out)
		}
		s.record(func(w *window) {
			switch {
			case err != nil:
				w.iperfFail++
				w.iperfErrs = append(w.iperfErrs, fmt.Sprintf("+%v: %v", time.Since(s.started).Round(time.Second), err))
			case rev:
				w.down = append(w.down, g)
			default:
				w.up = append(w.up, g)
			}
		})
	})
}

func (s *soak) loopPingPong(ctx context.Context) {
	s.loop(ctx, time.Second, func(ctx context.Context) {
		out, err := runCmd(ctx, time.Minute, nil, s.pin("sockperf", "pp", "--tcp", "-i", peerIP, "-p", "11111", "-t", "5")...)
		if ctx.Err() != nil {
			return
		}
		var p50, p99 float64
		if err == nil {
			p50, p99, err = parseSockperf(string(out))
		}
		s.record(func(w *window) {
			if err != nil {
				w.ppFail++
				w.ppErrs = append(w.ppErrs, fmt.Sprintf("+%v: %v", time.Since(s.started).Round(time.Second), err))
				return
			}
			w.p50 = append(w.p50, p50)
			w.p99 = append(w.p99, p99)
		})
	})
}

func (s *soak) loopSampler(ctx context.Context) {
	for ctx.Err() == nil {
		sleepCtx(ctx, 5*time.Second)
		s.sample()
	}
}

// ---------------------------------------------------------------------------
// kbridge's counters: sampled every 5 s and before every stop; deltas are
// added to the window current at the sample. A new kbridge (or app) pid
// means its counters started again from zero.

type counterAcc struct {
	mu     sync.Mutex
	kbPID  int
	appPID int
	prevKb map[string]uint64
	prevAp map[string]uint64
}

type statsJSON struct {
	AppPID int `json:"app_pid"`
	Queues []struct {
		Mode       string            `json:"mode"`
		ToKernel   uint64            `json:"to_kernel_packets"`
		FromKernel uint64            `json:"from_kernel_packets"`
		Drops      map[string]uint64 `json:"drops"`
		Timeouts   uint64            `json:"timeouts"`
		App        struct {
			Dropped uint64 `json:"to_kernel_dropped"`
		} `json:"app"`
	} `json:"queues"`
}

func (s *soak) stats() (statsJSON, error) {
	var st statsJSON
	out, err := runCmd(context.Background(), 10*time.Second, nil, s.bin, "stats", "--socket", statsSock)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("kbridge stats JSON: %v", err)
	}
	if len(st.Queues) == 0 {
		return st, errors.New("kbridge stats: no queues")
	}
	return st, nil
}

func (s *soak) sample() {
	kbPID, _ := readPID("kbridge")
	st, err := s.stats()
	if err != nil {
		return // kbridge restarting; the next sample catches up
	}
	kb, ap := map[string]uint64{}, map[string]uint64{}
	for _, q := range st.Queues {
		for r, v := range q.Drops {
			kb["drop:"+r] += v
		}
		kb["to_kernel"] += q.ToKernel
		kb["from_kernel"] += q.FromKernel
		kb["timeouts"] += q.Timeouts
		ap["app_to_kernel_dropped"] += q.App.Dropped
	}
	a := &s.acc
	a.mu.Lock()
	dKb := deltas(a.prevKb, kb, a.kbPID == kbPID)
	dAp := deltas(a.prevAp, ap, a.appPID == st.AppPID)
	first := a.prevKb == nil
	a.prevKb, a.prevAp, a.kbPID, a.appPID = kb, ap, kbPID, st.AppPID
	a.mu.Unlock()
	if first {
		return
	}
	s.record(func(w *window) {
		for k, v := range dKb {
			switch {
			case strings.HasPrefix(k, "drop:"):
				w.drops[strings.TrimPrefix(k, "drop:")] += v
			case k == "to_kernel":
				w.toKernel += v
			case k == "from_kernel":
				w.fromKernel += v
			case k == "timeouts":
				w.timeouts += v
			}
		}
		w.appDropped += dAp["app_to_kernel_dropped"]
	})
}

// deltas returns cur - prev per key; when the process is new (same false)
// or a counter went backwards, cur counts whole.
func deltas(prev, cur map[string]uint64, same bool) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range cur {
		p, ok := prev[k]
		switch {
		case prev == nil:
			d[k] = 0
		case !same || !ok || v < p:
			d[k] = v
		default:
			d[k] = v - p
		}
	}
	return d
}

// ---------------------------------------------------------------------------
// The app pool's drift.

// poolReading asks the app (SIGUSR1) for in_rings and pool_in_use.
func (s *soak) poolReading() (inUse, inRings int, err error) {
	pid, err := readPID("refapp")
	if err != nil {
		return 0, 0, err
	}
	logPath := filepath.Join(runDir, "refapp.log")
	off := fileSize(logPath)
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return 0, 0, fmt.Errorf("SIGUSR1 to the app (pid %d): %v", pid, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if u, r, ok := parseRefappStats(readFrom(logPath, off)); ok {
			return u, r, nil
		}
	}
	return 0, 0, fmt.Errorf("the app (pid %d) printed no stats line within 5s of SIGUSR1", pid)
}

// quietDrift quiesces the workloads, waits a moment and returns the
// smallest (in use - in rings) of three readings a second apart: what is
// held for good, not what is in flight.
func (s *soak) quietDrift() (int, error) {
	s.gate.Lock()
	defer s.gate.Unlock()
	time.Sleep(2 * time.Second)
	best, have := 0, false
	var lastErr error
	for i := 0; i < 3; i++ {
		u, r, err := s.poolReading()
		if err != nil {
			lastErr = err
		} else if d := u - r; !have || d < best {
			best, have = d, true
			s.record(func(w *window) { w.inUse, w.inRings = u, r })
		}
		if i < 2 {
			time.Sleep(time.Second)
		}
	}
	if !have {
		return 0, lastErr
	}
	return best, nil
}

// closeWindow measures the drift at the end of the window and prints its
// line.
func (s *soak) closeWindow(idx int, final bool) {
	s.sample()
	s.mu.Lock()
	w := s.windowLocked(idx)
	s.mu.Unlock()
	d, err := s.quietDrift()
	if err != nil {
		s.fail("pool drift at the end of window %d: %v", w.idx+1, err)
	} else {
		drift := d - s.baseline
		s.mu.Lock()
		w.drift = &drift
		s.mu.Unlock()
		if drift > 0 {
			s.fail("mbuf leak: the app's pool has %d more mbufs in use (beyond those in the rings) than at the baseline", drift)
		}
	}
	s.sample()
	s.mu.Lock()
	if final {
		w.to = min(time.Since(s.started), w.to)
	}
	line := w.row()
	s.mu.Unlock()
	if !final {
		fmt.Println(line)
	}
	logf("window %d: %s", w.idx+1, line)
}

// ---------------------------------------------------------------------------
// Events.

var reloadModes = []string{"interrupt", "busy", "adaptive"}

// reload rewrites the private configuration with the next policy mode,
// sends SIGHUP to the kbridge of the pid file and waits until `kbridge
// stats` shows the mode.
func (s *soak) reload() {
	mode := reloadModes[s.modeIdx%len(reloadModes)]
	s.modeIdx++
	pid, err := readPID("kbridge")
	if err == nil {
		off := fileSize(filepath.Join(runDir, "kbridge.log"))
		if err = writeAtomic(s.cfgPath, withPolicy(s.baseCfg, mode)); err == nil {
			s.mode = mode
			err = syscall.Kill(pid, syscall.SIGHUP)
		}
		deadline := time.Now().Add(15 * time.Second)
		for err == nil {
			logged := readFrom(filepath.Join(runDir, "kbridge.log"), off)
			if strings.Contains(logged, "reload refused") {
				err = fmt.Errorf("kbridge refused it: %s", lastLine(logged))
				break
			}
			if st, e := s.stats(); e == nil && st.Queues[0].Mode == mode {
				break
			}
			if time.Now().After(deadline) {
				err = fmt.Errorf("kbridge did not show mode %s within 15s", mode)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	s.record(func(w *window) {
		if err == nil {
			w.reloadOK++
		} else {
			w.reloadFail++
		}
	})
	if err != nil {
		s.event("policy reload to %s failed: %v", mode, err)
		return
	}
	s.event("policy reload: SIGHUP to kbridge pid %d, now %s", pid, mode)
}

// startKbridge starts kbridge as up.sh does (spawn in lib.sh): its own
// session, in kbt-dut, on the others CPUs, output appended to
// /run/kbt/kbridge.log, pid in /run/kbt/kbridge.pid.
func (s *soak) startKbridge() (int, error) {
	args := []string{"ip", "netns", "exec", nsDUT}
	if s.otherCPUs != "" {
		args = append(args, "taskset", "-c", s.otherCPUs)
	}
	args = append(args, s.bin, "run", "--config", s.cfgPath)
	return s.spawn("kbridge", args)
}

// startApp starts the reference app as up.sh does.
func (s *soak) startApp() (int, error) {
	args := []string{"ip", "netns", "exec", nsDUT}
	if s.otherCPUs != "" {
		args = append(args, "taskset", "-c", s.otherCPUs+","+s.appCPU)
	}
	args = append(args, s.app, "-l", s.appCPU, "--file-prefix", dpdkPrefix, "--proc-type", "primary", "--no-pci",
		"--vdev", "net_af_packet0,iface=kbt-nic", "--", "--port", "kb0")
	return s.spawn("refapp", args)
}

func (s *soak) spawn(name string, args []string) (int, error) {
	logFile, err := os.OpenFile(filepath.Join(runDir, name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid // ip netns exec and taskset exec in place
	if err := os.WriteFile(filepath.Join(runDir, name+".pid"), []byte(fmt.Sprintln(pid)), 0o644); err != nil {
		return pid, err
	}
	s.children.Add(1)
	go func() { defer s.children.Done(); _ = cmd.Wait() }()
	return pid, nil
}

// waitServing waits until kbridge answers on its control socket and the
// peer answers a ping through kb0.
func (s *soak) waitServing(pid int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if !alive(pid) {
			return fmt.Errorf("kbridge pid %d exited (see %s/kbridge.log)", pid, runDir)
		}
		if _, err := s.stats(); err == nil {
			if _, err := runCmd(context.Background(), 5*time.Second, nil, "ip", "netns", "exec", nsDUT, "ping", "-c1", "-W1", peerIP); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kbridge pid %d not serving within %v", pid, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// restartKbridge: SIGTERM (by the pid file's pid), wait for the exit, start
// it again with up.sh's command line, under traffic.
func (s *soak) restartKbridge() {
	pid, err := readPID("kbridge")
	if err != nil {
		s.fail("kbridge restart: %v", err)
		return
	}
	s.sample()
	t0 := time.Now()
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !waitGone(pid, 15*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		s.fail("kbridge pid %d ignored SIGTERM for 15s", pid)
		waitGone(pid, 5*time.Second)
	}
	stopped := time.Since(t0)
	npid, err := s.startKbridge()
	if err == nil {
		err = s.waitServing(npid, 40*time.Second)
	}
	if err != nil {
		s.fail("kbridge restart: %v", err)
		return
	}
	s.event("kbridge restart: SIGTERM to pid %d (gone after %v), new pid %d serving %v after the SIGTERM",
		pid, stopped.Round(time.Millisecond), npid, time.Since(t0).Round(time.Millisecond))
}

// restartApp: SIGTERM to the app; kbridge exits with it (by design); the
// app's exit must leave its pool whole. Then the app, then kbridge (as
// systemd's Restart= would), and a new pool baseline.
func (s *soak) restartApp() {
	appPID, err := readPID("refapp")
	kbPID, err2 := readPID("kbridge")
	if err = errors.Join(err, err2); err != nil {
		s.fail("app restart: %v", err)
		return
	}
	s.sample()
	appLog := filepath.Join(runDir, "refapp.log")
	off := fileSize(appLog)
	t0 := time.Now()
	_ = syscall.Kill(appPID, syscall.SIGTERM)
	if !waitGone(appPID, 20*time.Second) {
		_ = syscall.Kill(appPID, syscall.SIGKILL)
		s.fail("the app pid %d ignored SIGTERM for 20s", appPID)
		waitGone(appPID, 5*time.Second)
	}
	if !waitGone(kbPID, 15*time.Second) {
		s.fail("kbridge pid %d still runs 15s after the app exited", kbPID)
		_ = syscall.Kill(kbPID, syscall.SIGTERM)
		waitGone(kbPID, 15*time.Second)
	}
	exitLog := readFrom(appLog, off)
	if m := lastMatch(exitLog, "kbridge-refapp: stopped pool_in_use="); m == "" {
		s.fail("the app's exit printed no final pool count:\n%s", exitLog)
	} else if n, _ := strconv.Atoi(m); n != 0 || !strings.Contains(exitLog, "mempool audit ok") {
		s.fail("mbuf leak: the app exited with %s mbufs in use after kbridge_port_free", m)
	} else {
		s.event("app exit: mempool audit ok, pool_in_use=0")
	}

	off = fileSize(appLog)
	npid, err := s.startApp()
	if err == nil {
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(readFrom(appLog, off), "kbridge-refapp: ready") {
			if !alive(npid) || time.Now().After(deadline) {
				err = fmt.Errorf("the app (pid %d) did not report ready within 30s:\n%s", npid, readFrom(appLog, off))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err != nil {
		s.fail("app restart: %v", err)
		return
	}
	nkb, err := s.startKbridge()
	if err == nil {
		err = s.waitServing(nkb, 40*time.Second)
	}
	if err != nil {
		s.fail("app restart: kbridge after the app: %v", err)
		return
	}
	s.event("app restart: SIGTERM to app pid %d, kbridge pid %d exited with it; new app pid %d, new kbridge pid %d serving %v after the SIGTERM",
		appPID, kbPID, npid, nkb, time.Since(t0).Round(time.Millisecond))
	// A new pool: a new baseline.
	if d, err := s.quietDrift(); err != nil {
		s.fail("pool baseline after the app restart: %v", err)
	} else {
		s.mu.Lock()
		s.baseline = d
		s.mu.Unlock()
		s.event("pool baseline of the new app: in use - in rings = %d", d)
	}
}

// checkAlive notices a kbridge or app that died outside the schedule,
// counts it as a failure and restarts it (as systemd would).
func (s *soak) checkAlive() {
	kb, err1 := readPID("kbridge")
	ap, err2 := readPID("refapp")
	if err1 == nil && err2 == nil && alive(kb) && alive(ap) {
		return
	}
	if err2 != nil || !alive(ap) {
		s.fail("the app (pid %d) died outside the schedule (see %s/refapp.log)", ap, runDir)
		if _, err := s.startApp(); err != nil {
			s.fail("restarting the app: %v", err)
		}
		time.Sleep(5 * time.Second)
	} else {
		s.fail("kbridge (pid %d) died outside the schedule (see %s/kbridge.log)", kb, runDir)
	}
	if kb, err := readPID("kbridge"); err != nil || !alive(kb) {
		npid, err := s.startKbridge()
		if err == nil {
			err = s.waitServing(npid, 40*time.Second)
		}
		if err != nil {
			s.fail("restarting kbridge: %v", err)
		}
	}
}

// ---------------------------------------------------------------------------
// Helpers.

// runCmd runs a command with a bounded time and returns its stdout; on
// timeout it gets SIGTERM, then SIGKILL 3 s later.
func runCmd(ctx context.Context, timeout time.Duration, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return stdout.Bytes(), fmt.Errorf("%s timed out after %v", filepath.Base(args[len(args)-1]), timeout)
	}
	if err != nil {
		msg := lastLine(stderr.String())
		if msg == "" {
			msg = lastLine(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%v: %s", err, msg)
	}
	return stdout.Bytes(), nil
}

// runLoud runs a bed script: its progress (stderr) goes to ours, its
// stdout is returned.
func runLoud(timeout time.Duration, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	err := cmd.Run()
	return stdout.Bytes(), err
}

// hashCmd runs a command and returns the sha256 and length of its stdout.
func hashCmd(ctx context.Context, timeout time.Duration, args ...string) (string, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, err
	}
	if err := cmd.Start(); err != nil {
		return "", 0, err
	}
	h := sha256.New()
	n, cerr := io.Copy(h, out)
	err = cmd.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		return "", n, fmt.Errorf("timed out after %v", timeout)
	}
	if err == nil {
		err = cerr
	}
	if err != nil {
		return "", n, fmt.Errorf("%v: %s", err, lastLine(stderr.String()))
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func readPID(name string) (int, error) {
	data, err := os.ReadFile(filepath.Join(runDir, name+".pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid in %s/%s.pid", runDir, name)
	}
	return pid, nil
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	st := data[i+2]
	return st != 'Z' && st != 'X'
}

func waitGone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(path string, off int64) string {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < off {
		return ""
	}
	return string(data[off:])
}

func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func countLines(b []byte) int {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 0
	}
	return bytes.Count(b, []byte("\n")) + 1
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// lastMatch returns the value (up to a space) after the last prefix in s.
func lastMatch(s, prefix string) string {
	i := strings.LastIndex(s, prefix)
	if i < 0 {
		return ""
	}
	v := s[i+len(prefix):]
	if j := strings.IndexAny(v, " \n"); j >= 0 {
		v = v[:j]
	}
	return v
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

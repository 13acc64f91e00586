package main

// The workloads, each measured against one forwarder, with the forwarder's
// CPU time and (for kbridge) its counters around it.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// Workload keys, in table order.
const (
	wIdle = "idle"
	wNFS  = "nfs"
	wPP   = "pp"
	wCold = "cold"
	wUp   = "up"
	wDown = "down"
	// the targets' workloads
	wNFSRead = "nfsread" // nfs-cat of big.bin
	wDown4   = "down4"   // iperf3 -P 4 -R
	wHTTP    = "http"    // wrk keep-alive round trips
)

var workloadNames = map[string]string{
	wIdle: "idle", wNFS: "NFS ls -R", wPP: "ping-pong", wCold: "cold ping-pong",
	wUp: "iperf3 to peer", wDown: "iperf3 from peer",
	wNFSRead: "NFS read big.bin", wDown4: "iperf3 -P 4 from peer", wHTTP: "HTTP keep-alive",
}

// bigBytes is the size of the export's big.bin (tests/testbed/README.md).
const bigBytes = 256 << 20

// Durations of one run; -quick shortens them all.
type Durations struct {
	Idle, PP, Cold, Iperf, HTTP time.Duration
	NFSRuns, NFSReadRuns        int
}

var (
	fullDurations = Durations{Idle: 5 * time.Second, PP: 5 * time.Second, Cold: 10 * time.Second, Iperf: 5 * time.Second,
		HTTP: 5 * time.Second, NFSRuns: 3, NFSReadRuns: 2}
	quickDurations = Durations{Idle: 2 * time.Second, PP: 2 * time.Second, Cold: 3 * time.Second, Iperf: 2 * time.Second,
		HTTP: 2 * time.Second, NFSRuns: 1, NFSReadRuns: 1}
)

// Result is everything measured for one forwarder.
type Result struct {
	Name     string
	NFS      float64 // seconds, best of NFSRuns
	NFSRuns  int
	PP, Cold Latency
	Up, Down float64            // Gbit/s
	Down4    float64            // Gbit/s, iperf3 -P 4 -R
	NFSRead  float64            // MB/s, best of NFSReadRuns
	ReadRuns int                // NFS read runs
	HTTP     HTTPStats          // wrk
	Skipped  map[string]string  // workload -> why it did not run (a missing tool)
	Place    Placement          // where its threads ran
	Ceiling  *Ceiling           // bed-ceiling only
	CPU      map[string]float64 // workload -> % of one core used by the forwarder process
	AppCPU   float64            // the DPDK app at idle (kbridge beds: the reference app, or testpmd for kbridge-vhost), -1 if n/a
	Features string             // kbridge-vhost: the virtio features kbridge negotiated with testpmd's port
	Counters map[string]Counters
	Errs     map[string]string // workload -> error
	Lat      []float64         // continuous ping-pong observations, for the CDF
	Foreign  string            // other load while this forwarder was measured
}

func newResult(name string) *Result {
	return &Result{Name: name, CPU: map[string]float64{}, Counters: map[string]Counters{},
		Errs: map[string]string{}, Skipped: map[string]string{}, AppCPU: -1}
}

// procTicks returns utime+stime of a process (all its threads), 0 for pid 0.
func procTicks(pid int) (uint64, error) {
	if pid == 0 {
		return 0, nil
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	p, err := parseProcStat(string(data))
	return p.Ticks, err
}

// idle waits 1 s without traffic, then measures the CPU of the forwarder
// (and of the reference app's lcore) over d.Idle.
func (rn *Runner) idle(ctx context.Context, f Forwarder, r *Result) error {
	if err := sleepCtx(ctx, time.Second); err != nil {
		return err
	}
	pids := []int{rn.bed.fwdPID}
	if f.hasKbridge() && rn.bed.appPID != 0 {
		pids = append(pids, rn.bed.appPID)
	}
	t0 := time.Now()
	var before []uint64
	for _, p := range pids {
		t, _ := procTicks(p)
		before = append(before, t)
	}
	if err := sleepCtx(ctx, rn.d.Idle); err != nil {
		return err
	}
	wall := time.Since(t0).Seconds()
	for i, p := range pids {
		t, err := procTicks(p)
		if err != nil {
			return err
		}
		pct := cpuPercent(t-before[i], rn.clkTck, wall)
		if i == 0 {
			r.CPU[wIdle] = pct
		} else {
			r.AppCPU = pct
		}
	}
	return nil
}

func (rn *Runner) pingPong(ctx context.Context, f Forwarder, ns, ip string, cold bool, r *Result) error {
	d, kind := rn.d.PP, "pp"
	args := []string{"sockperf", "pp", "--tcp", "-i", ip, "-p", "11111"}
	if cold {
		d, kind = rn.d.Cold, "cold"
		args = append(args, "--mps", "10")
	}
	full := filepath.Join(rn.rawDir, fmt.Sprintf("%s-%s.csv", f.Name, kind))
	args = append(args, "-t", fmt.Sprint(int(d.Seconds())), "--full-log", full)
	out, err := harness.Output(ctx, d+30*time.Second, nil, "ip", rn.bed.pin(ns, args...)...)
	_ = os.WriteFile(strings.TrimSuffix(full, ".csv")+".out", out, 0o644)
	if err != nil {
		return err
	}
	l, err := parseSockperf(string(out))
	if err != nil {
		return err
	}
	if cold {
		r.Cold = l
		return nil
	}
	r.PP = l
	text, err := os.ReadFile(full)
	if err != nil {
		return fmt.Errorf("full log: %v", err)
	}
	r.Lat, err = parseFullLog(string(text))
	return err
}

// nfs lists the whole export, best of NFSRuns; the KNI emulations run it once
// with a generous timeout (4 ms per poll).
func (rn *Runner) nfs(ctx context.Context, f Forwarder, ns, ip string, r *Result) error {
	runs, timeout := rn.d.NFSRuns, 2*time.Minute
	if strings.HasPrefix(f.Name, "kni-") {
		runs, timeout = 1, 10*time.Minute
	}
	url := fmt.Sprintf("nfs://%s/export?version=4", ip)
	best := 0.0
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		out, err := harness.Output(ctx, timeout, nil, "ip", rn.bed.pin(ns, "nfs-ls", "-R", url)...)
		sec := time.Since(t0).Seconds()
		if err != nil {
			return err
		}
		if n := countLines(out); n != nfsEntries {
			return fmt.Errorf("nfs-ls listed %d entries, want %d", n, nfsEntries)
		}
		rn.log("%s: NFS run %d/%d: %.2fs", f.Name, i+1, runs, sec)
		if best == 0 || sec < best {
			best = sec
		}
	}
	r.NFS, r.NFSRuns = best, runs
	return nil
}

func (rn *Runner) iperf(ctx context.Context, ns, ip string, reverse bool, r *Result) error {
	return rn.iperfP(ctx, ns, ip, reverse, 1, r)
}

// iperfP runs iperf3 with `streams` parallel streams (-P).
func (rn *Runner) iperfP(ctx context.Context, ns, ip string, reverse bool, streams int, r *Result) error {
	args := []string{"iperf3", "-c", ip, "-p", "5201", "-J", "--connect-timeout", "5000",
		"-t", fmt.Sprint(int(rn.d.Iperf.Seconds()))}
	if reverse {
		args = append(args, "-R")
	}
	if streams > 1 {
		args = append(args, "-P", fmt.Sprint(streams))
	}
	out, err := harness.Output(ctx, rn.d.Iperf+30*time.Second, nil, "ip", rn.bed.pin(ns, args...)...)
	gbps, perr := harness.Iperf3Gbps(out)
	if perr != nil {
		if err != nil {
			return err
		}
		return perr
	}
	switch {
	case streams > 1:
		r.Down4 = gbps
	case reverse:
		r.Down = gbps
	default:
		r.Up = gbps
	}
	return nil
}

// nfsRead reads big.bin with nfs-cat, best of NFSReadRuns (KNI: once), and
// checks the byte count. The client and `wc -c` run on the client CPUs.
func (rn *Runner) nfsRead(ctx context.Context, f Forwarder, ns, ip string, r *Result) error {
	runs, timeout := rn.d.NFSReadRuns, 2*time.Minute
	if strings.HasPrefix(f.Name, "kni-") {
		runs, timeout = 1, 10*time.Minute
	}
	url := fmt.Sprintf("nfs://%s/export/big.bin?version=4", ip)
	best := 0.0
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		out, err := harness.Output(ctx, timeout, nil, "ip", rn.bed.pin(ns, "sh", "-c", `nfs-cat "$1" | wc -c`, "sh", url)...)
		sec := time.Since(t0).Seconds()
		if err != nil {
			return err
		}
		n, perr := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if perr != nil || n != bigBytes {
			return fmt.Errorf("nfs-cat read %q bytes of big.bin, want %d", strings.TrimSpace(string(out)), bigBytes)
		}
		mbs := mbPerSec(n, sec)
		rn.log("%s: NFS read %d/%d: %.2fs, %.0f MB/s", f.Name, i+1, runs, sec, mbs)
		if mbs > best {
			best = mbs
		}
	}
	r.NFSRead, r.ReadRuns = best, runs
	return nil
}

// errSkipped marks a workload that could not run for a reason the report
// shows as is (a missing tool), not as an error.
type errSkipped struct{ why string }

func (e errSkipped) Error() string { return e.why }

// http runs wrk against the bench's HTTP server in kbt-peer: one thread, one
// keep-alive connection, back-to-back requests.
func (rn *Runner) http(ctx context.Context, f Forwarder, ns, ip string, r *Result) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return errSkipped{"wrk not installed: apt-get install wrk"}
	}
	d := fmt.Sprintf("%ds", int(rn.d.HTTP.Seconds()))
	out, err := harness.Output(ctx, rn.d.HTTP+30*time.Second, nil, "ip", rn.bed.pin(ns, "wrk", "-t1", "-c1", "-d"+d, "--latency",
		fmt.Sprintf("http://%s:%s/", ip, httpPort))...)
	_ = os.WriteFile(filepath.Join(rn.rawDir, f.Name+"-wrk.out"), out, 0o644)
	if err != nil {
		return err
	}
	h, err := parseWrk(string(out))
	if err != nil {
		return err
	}
	r.HTTP = h
	return nil
}

// summary is the one-line result shown in the progress log.
func (r *Result) summary(key string) string {
	switch key {
	case wIdle:
		if v, ok := r.CPU[wIdle]; ok {
			return fmt.Sprintf(": forwarder %.2f%% of a core", v)
		}
	case wPP:
		return fmt.Sprintf(": p50 %.1f us, p99 %.1f us", r.PP.P50, r.PP.P99)
	case wCold:
		return fmt.Sprintf(": p50 %.1f us, p99 %.1f us", r.Cold.P50, r.Cold.P99)
	case wNFS:
		return fmt.Sprintf(": best %.2fs", r.NFS)
	case wUp:
		return fmt.Sprintf(": %.2f Gbit/s", r.Up)
	case wDown:
		return fmt.Sprintf(": %.2f Gbit/s", r.Down)
	case wDown4:
		return fmt.Sprintf(": %.2f Gbit/s", r.Down4)
	case wNFSRead:
		return fmt.Sprintf(": best %.0f MB/s", r.NFSRead)
	case wHTTP:
		return fmt.Sprintf(": p50 %.1f us, p99 %.1f us, %.0f req/s", r.HTTP.P50, r.HTTP.P99, r.HTTP.RPS)
	}
	return ""
}

func countLines(b []byte) int {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

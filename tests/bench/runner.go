package main

// The runner: bring up a bed per kind of forwarder, switch kbridge's policy
// between forwarders, run every workload with the forwarder's CPU time and
// counters around it, tear the bed down whatever happens.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

var allWorkloads = []string{wIdle, wPP, wCold, wHTTP, wNFS, wNFSRead, wUp, wDown, wDown4}

// Runner measures forwarders on a bed.
type Runner struct {
	bed    *Bed
	d      Durations
	clkTck int
	rawDir string             // raw outputs (full logs, stats) kept for post-mortems
	budget map[string]*Budget // -budget: the traced ping-pong instead of the workloads
	// -profile: CPU 0's profile per workload instead of the workloads' figures
	profile map[string]*ProfileRun
	rounds  int
	log     func(format string, a ...any)
}

// runAll measures the forwarders: kbridge's ring bed first (direct is
// measured there too, before any kbridge mode), then the vhost bed, then
// testpmd's (groupForwarders). Errors end up in the results, never abort the
// run.
func (rn *Runner) runAll(ctx context.Context, fws []Forwarder, res map[string]*Result, waitBed time.Duration, force bool) {
	for _, group := range groupForwarders(fws) {
		if ctx.Err() == nil {
			rn.runBed(ctx, group, res, waitBed, force)
		}
	}
	if ctx.Err() != nil {
		for _, f := range fws {
			for _, k := range allWorkloads {
				if _, done := res[f.Name].Errs[k]; !done && f.Kind != "ceiling" && !measured(res[f.Name], k) &&
					res[f.Name].Skipped[k] == "" && !(f.Kind == "direct" && k == wIdle) {
					res[f.Name].Errs[k] = "interrupted"
				}
			}
		}
	}
}

// runBed brings one bed up, measures its forwarders and tears it down.
func (rn *Runner) runBed(ctx context.Context, group []Forwarder, res map[string]*Result, waitBed time.Duration, force bool) {
	bed := rn.bed
	failAll := func(fs []Forwarder, msg string) {
		if ctx.Err() != nil {
			msg = "interrupted"
		}
		for _, f := range fs {
			for _, k := range allWorkloads {
				res[f.Name].Errs[k] = msg
			}
		}
	}
	// kbridge starts adaptive (parked when idle), so that direct, measured
	// first on this bed, does not share CPU 0 with a spinning kbridge.
	kind, policy := "kbridge", "policy:\n  mode: adaptive\n"
	for _, f := range group {
		if f.Kind != "direct" || f.MTU != 0 || f.NICOffload || f.NoTSO {
			kind = f.bedKind()
		}
		if f.Kind == "vhost" {
			policy = f.Policy
		}
	}
	if !force {
		if err := bed.claim(ctx, waitBed, rn.log); err != nil {
			rn.log("%v", err)
			failAll(group, "test bed: "+err.Error())
			return
		}
		defer bed.release() // after the teardown below: defers run last first
	}
	rn.log("bringing the test bed up for %s", kind)
	t0 := time.Now()
	defer func() {
		switch kind {
		case "kbridge":
			_ = copyFile(filepath.Join(runDir, "kbridge.log"), filepath.Join(rn.rawDir, "kbridge.log"))
		case "jumbo":
			_ = copyFile(filepath.Join(runDir, "kbridge.log"), filepath.Join(rn.rawDir, "kbridge-9000.log"))
		case "offload":
			_ = copyFile(filepath.Join(runDir, "kbridge.log"), filepath.Join(rn.rawDir, "kbridge-nic-offload.log"))
			_ = copyFile(filepath.Join(runDir, "refapp.log"), filepath.Join(rn.rawDir, "refapp-nic-offload.log"))
		case "notso":
			_ = copyFile(filepath.Join(runDir, "kbridge.log"), filepath.Join(rn.rawDir, "kbridge-no-tso.log"))
			_ = copyFile(filepath.Join(runDir, "refapp.log"), filepath.Join(rn.rawDir, "refapp-no-tso.log"))
		case "kni":
			_ = copyFile(filepath.Join(runDir, "kniapp.log"), filepath.Join(rn.rawDir, "kniapp.log"))
		case "vhost":
			_ = copyFile(filepath.Join(runDir, "kbridge.log"), filepath.Join(rn.rawDir, "kbridge-vhost.log"))
			_ = copyFile(filepath.Join(runDir, vhostAppName+".log"), filepath.Join(rn.rawDir, vhostAppName+".log"))
		}
		rn.log("tearing the %s bed down", kind)
		if err := bed.down(); err != nil {
			rn.log("teardown: %v", err)
		}
	}()
	if err := bed.up(ctx, kind, policy); err != nil {
		rn.log("test bed for %s failed: %v", kind, err)
		failAll(group, "test bed: "+err.Error())
		return
	}
	rn.log("test bed up in %.1fs (forwarder pid %d)", time.Since(t0).Seconds(), bed.fwdPID)
	if rn.budget == nil && rn.profile == nil {
		stopHTTP, err := rn.startHTTP(ctx)
		if err != nil {
			rn.log("HTTP server in kbt-peer: %v", err)
		}
		defer stopHTTP()
	}
	servers := rn.servers()
	for _, f := range group {
		if ctx.Err() != nil {
			return
		}
		if f.Kind == "ceiling" {
			res[f.Name].Place = Placement{Clients: "ping in kbt-peer: taskset -c " + or(bed.cpus, "(none)"), Servers: "-"}
			rn.ceiling(ctx, f, res[f.Name])
			continue
		}
		if f.Kind == "kbridge" {
			if err := bed.setPolicy(ctx, f); err != nil {
				rn.log("%s: %v", f.Name, err)
				failAll([]Forwarder{f}, "policy switch: "+err.Error())
				continue
			}
			rn.log("%s: kbridge switched to %q", f.Name, strings.ReplaceAll(strings.TrimSpace(f.Policy), "\n", " "))
		}
		if rn.budget != nil {
			rn.budget[f.Name] = rn.measureBudget(ctx, f)
			continue
		}
		if rn.profile != nil {
			rn.profile[f.Name] = rn.profileAll(ctx, f, rn.rounds)
			continue
		}
		r := res[f.Name]
		r.Place = Placement{Forwarder: "-", App: "-", Clients: "taskset -c " + or(bed.cpus, "(none)"), Servers: servers}
		if f.Kind != "direct" {
			r.Place.Forwarder = placementOf(bed.fwdPID)
		}
		if f.hasKbridge() {
			r.Place.App = placementOf(bed.appPID)
		}
		if f.Kind == "vhost" {
			if data, err := os.ReadFile(filepath.Join(runDir, "kbridge.log")); err == nil {
				r.Features = vhostFeatures(string(data))
			}
		}
		procs0, cpus0, t1 := allProcs(), readCPUTimes(), time.Now()
		rn.measure(ctx, f, res[f.Name])
		res[f.Name].Foreign = strings.Join(busyList(procs0, outsideBed(allProcs()), rn.clkTck, time.Since(t1).Seconds(), 5), ", ")
		if c := cpuBusyText(cpus0, readCPUTimes()); c != "" {
			res[f.Name].Foreign += "; " + c
		}
		if f.hasKbridge() {
			if out, err := harness.Output(ctx, 5*time.Second, nil, filepath.Join(bed.root, "bin/kbridge"), "stats", "--socket", statsSock); err == nil {
				_ = os.WriteFile(filepath.Join(rn.rawDir, f.Name+"-stats.json"), out, 0o644)
			}
		}
	}
}

// measure runs every workload against f. A failing workload is recorded in
// r.Errs and the next one runs.
func (rn *Runner) measure(ctx context.Context, f Forwarder, r *Result) {
	ns, ip := f.target()
	steps := []struct {
		key string
		fn  func(context.Context) error
	}{
		{wIdle, func(ctx context.Context) error { return rn.idle(ctx, f, r) }},
		{wPP, func(ctx context.Context) error { return rn.pingPong(ctx, f, ns, ip, false, r) }},
		{wCold, func(ctx context.Context) error { return rn.pingPong(ctx, f, ns, ip, true, r) }},
		{wHTTP, func(ctx context.Context) error { return rn.http(ctx, f, ns, ip, r) }},
		{wNFS, func(ctx context.Context) error { return rn.nfs(ctx, f, ns, ip, r) }},
		{wNFSRead, func(ctx context.Context) error { return rn.nfsRead(ctx, f, ns, ip, r) }},
		{wUp, func(ctx context.Context) error { return rn.iperf(ctx, ns, ip, false, r) }},
		{wDown, func(ctx context.Context) error { return rn.iperf(ctx, ns, ip, true, r) }},
		{wDown4, func(ctx context.Context) error { return rn.iperfP(ctx, ns, ip, true, 4, r) }},
	}
	for _, s := range steps {
		if s.key == wIdle && f.Kind == "direct" {
			continue // no forwarder to watch
		}
		if ctx.Err() != nil {
			r.Errs[s.key] = "interrupted"
			continue
		}
		if err := rn.bed.alive(); f.Kind != "direct" && err != nil {
			r.Errs[s.key] = err.Error()
			rn.log("%s: %s: skipped: %v", f.Name, workloadNames[s.key], err)
			continue
		}
		rn.log("%s: %s ...", f.Name, workloadNames[s.key])
		t0 := time.Now()
		err := rn.withCPU(ctx, f, s.key, r, s.fn)
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("interrupted")
		}
		var skip errSkipped
		if errors.As(err, &skip) {
			r.Skipped[s.key] = skip.why
			delete(r.CPU, s.key)
			delete(r.Counters, s.key)
			rn.log("%s: %s: %s", f.Name, workloadNames[s.key], skip.why)
			continue
		}
		if err != nil {
			r.Errs[s.key] = err.Error()
			rn.log("%s: %s: error after %.1fs: %v", f.Name, workloadNames[s.key], time.Since(t0).Seconds(), err)
		} else {
			rn.log("%s: %s done in %.1fs%s", f.Name, workloadNames[s.key], time.Since(t0).Seconds(), r.summary(s.key))
		}
	}
}

// withCPU runs fn and records the forwarder's CPU use and kbridge's counters
// over it.
func (rn *Runner) withCPU(ctx context.Context, f Forwarder, key string, r *Result, fn func(context.Context) error) error {
	pid := rn.bed.fwdPID
	if f.Kind == "direct" {
		pid = 0
	}
	var before Counters
	haveStats := false
	if f.hasKbridge() {
		if _, c, err := rn.bed.stats(ctx); err == nil {
			before, haveStats = c, true
		}
	}
	t0 := time.Now()
	ticks0, cpuErr := procTicks(pid)
	err := fn(ctx)
	ticks1, cpuErr1 := procTicks(pid)
	wall := time.Since(t0).Seconds()
	if pid != 0 && key != wIdle && cpuErr == nil && cpuErr1 == nil { // idle measures its own window
		r.CPU[key] = cpuPercent(ticks1-ticks0, rn.clkTck, wall)
	}
	if haveStats {
		if _, c, err := rn.bed.stats(ctx); err == nil {
			r.Counters[key] = c.sub(before)
		}
	}
	return err
}

// measured reports whether a workload produced a figure.
func measured(r *Result, key string) bool {
	switch key {
	case wIdle:
		_, ok := r.CPU[wIdle]
		return ok
	case wNFS:
		return r.NFS > 0
	case wPP:
		return r.PP.N > 0
	case wCold:
		return r.Cold.N > 0
	case wUp:
		return r.Up > 0
	case wDown:
		return r.Down > 0
	case wDown4:
		return r.Down4 > 0
	case wNFSRead:
		return r.NFSRead > 0
	case wHTTP:
		return r.HTTP.Requests > 0
	}
	return false
}

func hasKind(fs []Forwarder, kind string) bool {
	for _, f := range fs {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// startHTTP starts `kbt-bench -serve-http` in kbt-peer, pinned like the other
// servers, and waits until it listens. The returned func stops it.
func (rn *Runner) startHTTP(ctx context.Context) (func(), error) {
	nop := func() {}
	exe, err := os.Executable()
	if err != nil {
		return nop, err
	}
	logf, err := os.Create(filepath.Join(rn.rawDir, "http-server.log"))
	if err != nil {
		return nop, err
	}
	cmd := exec.Command("ip", rn.bed.pin("kbt-peer", exe, "-serve-http", "0.0.0.0:"+httpPort)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nop, err
	}
	rn.bed.httpPID = cmd.Process.Pid
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		rn.bed.httpPID = 0
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, _ := harness.Output(ctx, 5*time.Second, nil, "ip", "netns", "exec", "kbt-peer", "ss", "-Hltn", "sport = :"+httpPort)
		if len(strings.TrimSpace(string(out))) > 0 {
			return stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nop, fmt.Errorf("not listening on :%s after 10s (see %s)", httpPort, logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// servers lists the peer's servers with their CPUs, from the bed's pid files.
func (rn *Runner) servers() string {
	pids := map[string]int{}
	for _, n := range []string{"sockperf", "iperf3", "ganesha"} {
		if pid, err := readPID(n); err == nil {
			pids[n] = pid
		}
	}
	if rn.bed.httpPID != 0 {
		pids["http"] = rn.bed.httpPID
	}
	return serverPlacement(pids)
}

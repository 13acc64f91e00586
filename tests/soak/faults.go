package main

// The faults the soak injects: policy reloads every minute, a kbridge
// restart and a DPDK app restart under traffic.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

var reloadModes = []string{"interrupt", "busy", "adaptive"}

// reload rewrites the private configuration with the next policy mode,
// sends SIGHUP to the kbridge of the pid file and waits until `kbridge
// stats` shows the mode.
func (s *soak) reload() {
	mode := reloadModes[s.modeIdx%len(reloadModes)]
	s.modeIdx++
	pid, err := harness.ReadPID("kbridge")
	if err == nil {
		off := fileSize(filepath.Join(runDir, "kbridge.log"))
		if err = harness.WriteAtomic(s.cfgPath, withPolicy(s.baseCfg, mode)); err == nil {
			s.mode = mode
			err = syscall.Kill(pid, syscall.SIGHUP)
		}
		deadline := time.Now().Add(15 * time.Second)
		for err == nil {
			logged := readFrom(filepath.Join(runDir, "kbridge.log"), off)
			if strings.Contains(logged, "reload refused") {
				err = fmt.Errorf("kbridge refused it: %s", harness.LastLine(logged))
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

// startApp starts the app as up.sh does: in mode vhost with the script
// up.sh wrote for it (testpmd-vhost.start), in mode ring the reference app.
func (s *soak) startApp() (int, error) {
	if s.side.mode == "vhost" {
		if _, err := runLoud(30*time.Second, nil, "bash", filepath.Join(runDir, "testpmd-vhost.start")); err != nil {
			return 0, fmt.Errorf("%s/testpmd-vhost.start: %w", runDir, err)
		}
		return harness.ReadPID(s.side.name)
	}
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
		if !harness.Alive(pid) {
			return fmt.Errorf("kbridge pid %d exited (see %s/kbridge.log)", pid, runDir)
		}
		if _, err := s.stats(); err == nil {
			if _, err := harness.Output(context.Background(), 5*time.Second, nil, "ip", "netns", "exec", nsDUT, "ping", "-c1", "-W1", peerIP); err == nil {
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
	pid, err := harness.ReadPID("kbridge")
	if err != nil {
		s.fail("kbridge restart: %v", err)
		return
	}
	s.sample()
	t0 := time.Now()
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !harness.WaitGone(pid, 15*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		s.fail("kbridge pid %d ignored SIGTERM for 15s", pid)
		harness.WaitGone(pid, 5*time.Second)
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

// restartApp: SIGTERM to the app under traffic, then the app again.
// Mode ring: kbridge exits with it (by design); the app's exit must leave
// its pool whole; the app, then kbridge (as systemd's Restart= would), and
// a new pool baseline. Mode vhost: kbridge serves on, sees the frontend go,
// and takes the restarted app's port; its pool keeps its baseline.
func (s *soak) restartApp() {
	appPID, err := harness.ReadPID(s.side.name)
	kbPID, err2 := harness.ReadPID("kbridge")
	if err = errors.Join(err, err2); err != nil {
		s.fail("app restart: %v", err)
		return
	}
	s.sample()
	appLog := filepath.Join(runDir, s.side.name+".log")
	kbLog := filepath.Join(runDir, "kbridge.log")
	off, kbOff := fileSize(appLog), fileSize(kbLog)
	t0 := time.Now()
	_ = syscall.Kill(appPID, syscall.SIGTERM)
	if !harness.WaitGone(appPID, 20*time.Second) {
		_ = syscall.Kill(appPID, syscall.SIGKILL)
		s.fail("the app pid %d ignored SIGTERM for 20s", appPID)
		harness.WaitGone(appPID, 5*time.Second)
	}
	if s.side.kbridgeFollows {
		if !harness.WaitGone(kbPID, 15*time.Second) {
			s.fail("kbridge pid %d still runs 15s after the app exited", kbPID)
			_ = syscall.Kill(kbPID, syscall.SIGTERM)
			harness.WaitGone(kbPID, 15*time.Second)
		}
		exitLog := readFrom(appLog, off)
		if m := lastMatch(exitLog, "kbridge-refapp: stopped pool_in_use="); m == "" {
			s.fail("the app's exit printed no final pool count:\n%s", exitLog)
		} else if n, _ := strconv.Atoi(m); n != 0 || !strings.Contains(exitLog, "mempool audit ok") {
			s.fail("mbuf leak: the app exited with %s mbufs in use after kbridge_port_free", m)
		} else {
			s.event("app exit: mempool audit ok, pool_in_use=0")
		}
	} else {
		if err := waitText(kbLog, kbOff, "vhost-user frontend gone", 15*time.Second); err != nil {
			s.fail("app restart: kbridge pid %d: %v", kbPID, err)
		}
		if !harness.Alive(kbPID) {
			s.fail("kbridge pid %d exited with the app in mode vhost (see %s)", kbPID, kbLog)
		}
	}

	off, kbOff = fileSize(appLog), fileSize(kbLog)
	ready := "kbridge-refapp: ready"
	if s.side.mode == "vhost" {
		ready = "Press enter to exit" // testpmd forwards
	}
	npid, err := s.startApp()
	if err == nil {
		err = waitText(appLog, off, ready, 30*time.Second)
	}
	if err != nil {
		s.fail("app restart: the new app (pid %d): %v", npid, err)
		return
	}
	nkb := kbPID
	if s.side.kbridgeFollows {
		nkb, err = s.startKbridge()
	} else {
		err = waitText(kbLog, kbOff, "vhost-user frontend connected", 20*time.Second)
	}
	if err == nil {
		err = s.waitServing(nkb, 40*time.Second)
	}
	if err != nil {
		s.fail("app restart: kbridge after the app: %v", err)
		return
	}
	if !s.side.kbridgeFollows {
		s.event("app restart: SIGTERM to testpmd pid %d; kbridge pid %d served on and took the new testpmd's (pid %d) port, serving %v after the SIGTERM",
			appPID, kbPID, npid, time.Since(t0).Round(time.Millisecond))
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

// waitText waits until the file at path, read from offset off, holds text.
func waitText(path string, off int64, text string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for !strings.Contains(readFrom(path, off), text) {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q in %s within %v", text, path, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

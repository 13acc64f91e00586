package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The reference app stopped (SIGTERM) while kbridge serves its port:
// kbridge_port_free() has kbridge let go before it drains, kbridge exits
// non-zero naming the cause, and the app's mempool audit is clean.
func TestRefappStopsUnderKbridge(t *testing.T) {
	needRoot(t)
	refapp, _ := filepath.Abs("../../bin/kbridge-refapp")
	if _, err := os.Stat(refapp); err != nil {
		t.Skip("bin/kbridge-refapp missing: run make build (make test does)")
	}
	appPrefix := prefix + "app"
	appOut := &syncBuffer{}
	app := exec.Command(refapp, "-l", "0", "--file-prefix", appPrefix, "--proc-type", "primary",
		"--no-pci", "--vdev", "net_ring0", "-m", "64", "--", "--port", "kbftapp")
	app.Stdout, app.Stderr = appOut, appOut
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	appDone := make(chan error, 1)
	go func() { appDone <- app.Wait() }()
	appExited := false
	t.Cleanup(func() {
		if !appExited {
			_ = app.Process.Kill() // by pid
			<-appDone
		}
		_ = os.RemoveAll(filepath.Join("/var/run/dpdk", appPrefix))
	})
	waitUntil(t, "the app to start", 20*time.Second, func() bool {
		return strings.Contains(appOut.String(), "kbridge-refapp: ready")
	})

	k := &kbridge{t: t, ifname: "kbftapp"}
	dir := t.TempDir()
	k.sock = filepath.Join(dir, "kbridge.sock")
	k.cfg = filepath.Join(dir, "kbridge.yaml")
	yaml := fmt.Sprintf("dpdk:\n  file_prefix: %s\nport: kbftapp\ninterface:\n  name: kbftapp\nstats:\n  socket: %s\n  metrics: \"\"\n", appPrefix, k.sock)
	if err := os.WriteFile(k.cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	k.out = &syncBuffer{}
	k.cmd = exec.Command("ip", "netns", "exec", nsName, kbridgeBin, "run", "--config", k.cfg)
	k.cmd.Stdout, k.cmd.Stderr = k.out, k.out
	if err := k.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k.exited = make(chan error, 1)
	go func() { k.exited <- k.cmd.Wait() }()
	t.Cleanup(func() { k.stop(false) })
	k.ready()
	k.send(20) // through kbridge into the app, which sends them out of net_ring0

	if err := app.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-appDone:
		appExited = true
		if err != nil {
			t.Errorf("the app exited with %v:\n%s", err, appOut)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the app did not stop within 15s:\n%s", appOut)
	}
	if !strings.Contains(appOut.String(), "kbridge-refapp: mempool audit ok pool_in_use=0") {
		t.Errorf("the app's mempool is not whole after kbridge_port_free:\n%s", appOut)
	}
	if strings.Contains(appOut.String(), "did not let go") {
		t.Errorf("kbridge_port_free timed out waiting for kbridge:\n%s", appOut)
	}
	if !k.exitedWithin(5 * time.Second) {
		t.Fatalf("kbridge still runs 5s after the app stopped:\n%s", k.out)
	}
	if code := k.exitCode(); code <= 0 {
		t.Errorf("kbridge exited with %v, want a non-zero status", k.err)
	}
	if !strings.Contains(k.out.String(), "the DPDK app is freeing port kbftapp") {
		t.Errorf("kbridge did not name the cause:\n%s", k.out)
	}
}

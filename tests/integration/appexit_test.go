package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kbridge notices when its DPDK app exits (pidfd), stops, removes its TAP and
// exits 1 with a message that says why.
func TestStopsWhenTheAppExits(t *testing.T) {
	needRoot(t)
	refapp, _ := filepath.Abs("../../bin/kbridge-refapp")
	if _, err := os.Stat(refapp); err != nil {
		t.Skip("bin/kbridge-refapp missing: run make build (make test does)")
	}
	appPrefix := env.Prefix + "app"
	var appOut bytes.Buffer
	app := exec.Command(refapp, "-l", "0", "--file-prefix", appPrefix, "--proc-type", "primary",
		"--no-pci", "--vdev", "net_ring0", "-m", "64", "--", "--port", "kbitapp")
	app.Stdout, app.Stderr = &appOut, &appOut
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	appDone := make(chan error, 1)
	go func() { appDone <- app.Wait() }()
	t.Cleanup(func() {
		_ = app.Process.Kill() // by PID; a no-op once it has exited
		<-appDone
		_ = os.RemoveAll(filepath.Join("/var/run/dpdk", appPrefix))
	})
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(appOut.String(), "kbridge-refapp: ready") {
		if time.Now().After(deadline) {
			t.Fatalf("the app did not start:\n%s", &appOut)
		}
		time.Sleep(20 * time.Millisecond)
	}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "kbridge.yaml")
	sock := filepath.Join(dir, "kbridge.sock")
	yaml := fmt.Sprintf("dpdk:\n  file_prefix: %s\nport: kbitapp\ninterface:\n  name: kbitapp\nstats:\n  socket: %s\n  metrics: \"\"\n", appPrefix, sock)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var kbOut bytes.Buffer
	kb := exec.Command("ip", "netns", "exec", env.NS, env.Bin, "run", "--config", cfg)
	kb.Stdout, kb.Stderr = &kbOut, &kbOut
	if err := kb.Start(); err != nil {
		t.Fatal(err)
	}
	kbDone := make(chan error, 1)
	go func() { kbDone <- kb.Wait() }()
	t.Cleanup(func() { _ = kb.Process.Kill() })
	for !strings.Contains(kbOut.String(), "bridge running") {
		select {
		case err := <-kbDone:
			t.Fatalf("kbridge exited at start-up: %v\n%s", err, &kbOut)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("kbridge did not attach:\n%s", &kbOut)
		}
	}

	if err := app.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-kbDone:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("kbridge exited with %v, want exit status 1", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("kbridge kept running after its app died:\n%s", &kbOut)
	}
	if !strings.Contains(kbOut.String(), "exited: kbridge stops with it") {
		t.Errorf("kbridge did not say why it stopped:\n%s", &kbOut)
	}
	if out, _ := exec.Command("ip", "-n", env.NS, "link", "show", "kbitapp").CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("TAP left behind: %s", out)
	}
}

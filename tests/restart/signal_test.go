package restart

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// Signals before the main loop: kbridge subscribes
// first thing, so a SIGTERM during start-up ends it cleanly with the port
// released and no TAP left, and a SIGHUP is remembered, never fatal.
func TestSignalsDuringStartup(t *testing.T) {
	p := env.NewPort(t)

	t.Run("SIGHUP at the EAL's init", func(t *testing.T) {
		k := env.NewKbridge(t, p)
		k.WaitLog("EAL: Detected", 20*time.Second)
		if err := k.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		k.Ready()
		if !dpdkbed.WaitLogCount(k.Log.String, "reloaded", 1) {
			t.Errorf("the SIGHUP during start-up was not remembered (no reload):\n%s", k.Log)
		}
		k.Stop(true)
		if got := p.Port.OwnerPID(); got != 0 {
			t.Errorf("owner pid %d after the stop, want 0", got)
		}
	})

	t.Run("SIGTERM at the EAL's init", func(t *testing.T) {
		k := env.NewKbridge(t, p)
		k.WaitLog("EAL: Detected", 20*time.Second)
		if err := k.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !k.ExitedWithin(15 * time.Second) {
			t.Fatalf("kbridge still runs 15s after a SIGTERM during start-up:\n%s", k.Log)
		}
		if code := k.ExitCode(); code != 0 {
			t.Errorf("exit %v after a SIGTERM during start-up, want a clean exit:\n%s", k.Err(), k.Log)
		}
		if got := p.Port.OwnerPID(); got != 0 {
			t.Errorf("owner pid %d after a SIGTERM during start-up, want 0 (released)", got)
		}
		if _, err := env.Link(k.Ifname); err == nil {
			t.Errorf("interface %s left after a SIGTERM during start-up", k.Ifname)
		}
		t.Logf("kbridge's log:\n%s", k.Log)
		next := env.NewKbridge(t, p)
		next.Ready()
		if strings.Contains(next.Log.String(), "taking the port over") {
			t.Errorf("the port was taken over as if its owner had died, not released:\n%s", next.Log)
		}
		next.Stop(true)
	})

	t.Run("SIGTERM while waiting for the port", func(t *testing.T) {
		k := env.StartKbridgeConfig(t, dpdkbed.Config{Prefix: env.Prefix, Port: "kbftnone", Ifname: fmt.Sprintf("kbftw%d", os.Getpid()%1000),
			DPDK: "  wait: 1m\n", Iface: "  mtu: 1500\n"})
		k.WaitLog("waiting for kbridge port kbftnone", 20*time.Second)
		if err := k.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if !k.Running() {
			t.Fatalf("a SIGHUP while waiting for the port ended kbridge (%v):\n%s", k.Err(), k.Log)
		}
		sent := time.Now()
		if err := k.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !k.ExitedWithin(5 * time.Second) {
			t.Fatalf("kbridge still waits for the port 5s after a SIGTERM (dpdk.wait is 1m):\n%s", k.Log)
		}
		t.Logf("exited %v after the SIGTERM", time.Since(sent).Round(time.Millisecond))
		if code := k.ExitCode(); code != 0 {
			t.Errorf("exit %v after a SIGTERM while waiting for the port, want a clean exit:\n%s", k.Err(), k.Log)
		}
		if !strings.Contains(k.Log.String(), "stopped during start-up") {
			t.Errorf("no log line says kbridge stopped during start-up:\n%s", k.Log)
		}
	})
}

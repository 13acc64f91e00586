package vhost

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// TestVhostKernelSide: the TAP side in mode vhost is the one ring mode has
// (daemon's tapPath): interface.offload switches live on SIGHUP, and an
// interface deleted under a running kbridge is made again, with traffic
// crossing both ways through testpmd afterwards. tests/ring and
// tests/kernel test the same in ring mode.
func TestVhostKernelSide(t *testing.T) {
	b := newBed(t, false)
	kb := b.kbridge()
	tp := b.testpmd(false)
	tp.WaitLog("Press enter to exit", 30*time.Second)
	kb.WaitLog("vhost-user frontend connected", 10*time.Second)
	ping(t, peer, kbAddr)

	t.Run("interface.offload switches live", func(t *testing.T) {
		if got := harness.TSO(t, dut, ifname, kb.Log); got != "on" {
			t.Fatalf("TSO %s on %s at start, want on (offload: true)", got, ifname)
		}
		cfg, err := os.ReadFile(b.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"off", "on"} {
			text := strings.Replace(string(cfg), "  offload: true\n", "  offload: "+map[string]string{"off": "false", "on": "true"}[want]+"\n", 1)
			if err := os.WriteFile(b.cfg, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := kb.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			if got := harness.WaitTSO(t, dut, ifname, want, 5*time.Second, kb.Log); got != want {
				t.Fatalf("TSO %s after reloading with offload %s\n%s", got, want, kb.Log)
			}
			ping(t, peer, kbAddr)
		}
		if !strings.Contains(kb.Log.String(), "interface offloads switched") {
			t.Errorf("kbridge did not log the switch:\n%s", kb.Log)
		}
		if strings.Contains(kb.Log.String(), "need_restart") {
			t.Errorf("the reload asked for a restart:\n%s", kb.Log)
		}
	})

	t.Run("a deleted interface is made again", func(t *testing.T) {
		old := linkIndex(t)
		if old == "" {
			t.Fatalf("no %s to delete:\n%s", ifname, kb.Log)
		}
		harness.Run(t, "ip", "-n", dut, "link", "del", ifname)
		deadline := time.Now().Add(5 * time.Second)
		for {
			if i := linkIndex(t); i != "" && i != old && addrOn(t) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not made again within 5 s:\n%s", ifname, kb.Log)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(kb.Log.String(), "deleted and made again") {
			t.Errorf("no log line says the interface was made again:\n%s", kb.Log)
		}
		ping(t, peer, kbAddr)
		ping(t, dut, peerAddr)
		if s := b.stats(); !s.Connected || s.Queues[0].ToKernel == 0 || s.Queues[0].FromKernel == 0 {
			t.Errorf("status after the repair: %+v", s)
		}
	})

	stopKbridge(t, kb)
	gone(t, b.sock)
	tp.Stop(false)
}

// linkIndex returns the TAP's ifindex, or "" while it does not exist.
func linkIndex(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", dut, "-o", "link", "show", ifname).Output()
	if err != nil {
		return ""
	}
	idx, _, _ := strings.Cut(string(out), ":")
	return idx
}

// addrOn reports whether the TAP is up with its address.
func addrOn(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("ip", "-n", dut, "-o", "addr", "show", "dev", ifname, "up").Output()
	return err == nil && strings.Contains(string(out), kbAddr+"/24")
}

package xdp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// kb0 is a veth in mode xdp: nothing holds it, so it outlives a kbridge
// killed (kill -9) and, with interface.on_stop: keep, one stopped; the next
// kbridge keeps it as it is (its ifindex, a hand-added address and route)
// and the exception path reaches it again. Between the two nothing steers
// frames into it. A stop with on_stop: remove takes it away with the pins.
func TestKb0OutlivesAKbridgeRestartInModeXDP(t *testing.T) {
	harness.NeedRoot(t, "mode xdp needs root (namespaces, XDP)")
	harness.Wire{DUT: dut, Peer: remote, NIC: "kbq-nic", PeerIf: "kbq-wire", PeerAddr: "198.19.50.1", GRO: true}.Up(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kbridge.yaml")
	sock := filepath.Join(dir, "kbridge.sock")
	write := func(onStop string) {
		y := "mode: xdp\ninterface:\n  name: kb0\n  on_stop: " + onStop + "\n  addresses: [" + kbAddr + "/24]\nxdp:\n  nic: kbq-nic\n" +
			"  pin_path: /sys/fs/bpf/kbq\nstats:\n  socket: " + sock + "\n  metrics: \"\"\n"
		if err := harness.WriteAtomic(cfg, y); err != nil {
			t.Fatal(err)
		}
	}
	start := func() *harness.Proc {
		kb := harness.Start(t, "kbridge", "ip", "netns", "exec", dut, harness.Kbridge(t), "run", "--config", cfg)
		kb.WaitReady(t, "come up", 15*time.Second, func() bool { return harness.KbridgeAnswers(t, sock) })
		return kb
	}
	ping := func(what string) {
		t.Helper()
		out := harness.Run(t, "ip", "netns", "exec", remote, "ping", "-c", "3", "-i", "0.2", "-W", "2", kbAddr)
		if !strings.Contains(out, " 0% packet loss") {
			t.Errorf("%s: ping:\n%s", what, out)
		}
	}
	ifindex := func() string {
		out, _ := exec.Command("ip", "-n", dut, "-o", "link", "show", "kb0").Output()
		idx, _, _ := strings.Cut(string(out), ":")
		return idx
	}
	const addr, route = "198.19.50.77/32", "198.19.77.0/24"
	unchanged := func(what, was string) {
		t.Helper()
		if got := ifindex(); got != was {
			t.Errorf("%s: kb0's ifindex %q, was %q", what, got, was)
		}
		if out := harness.Run(t, "ip", "-n", dut, "addr", "show", "dev", "kb0"); !strings.Contains(out, addr) {
			t.Errorf("%s: the hand-added address is gone:\n%s", what, out)
		}
		if out := harness.Run(t, "ip", "-n", dut, "route", "show", "dev", "kb0"); !strings.Contains(out, route) {
			t.Errorf("%s: the hand-added route is gone:\n%s", what, out)
		}
	}

	write("keep")
	kb := start()
	ping("the first kbridge")
	harness.Run(t, "ip", "-n", dut, "addr", "add", addr, "dev", "kb0")
	harness.Run(t, "ip", "-n", dut, "route", "add", route, "dev", "kb0")
	was := ifindex()

	kb.Kill()
	unchanged("after kill -9", was)
	kb = start()
	if !strings.Contains(kb.Log.String(), "keeping the exception veth") {
		t.Errorf("the kbridge after the kill did not keep the veth:\n%s", kb.Log)
	}
	unchanged("the kbridge after the kill", was)
	ping("the kbridge after the kill")

	kb.Stop(true)
	unchanged("after a stop with on_stop: keep", was)
	if out := harness.Run(t, "ip", "-n", dut, "-d", "link", "show", "kbq-nic"); strings.Contains(out, "prog/xdp") {
		t.Errorf("a program left on the NIC after the stop:\n%s", out)
	}
	write("remove")
	kb = start()
	unchanged("the kbridge after the stop", was)
	ping("the kbridge after the stop")

	kb.Stop(true)
	if gone, out := harness.LinkGone(dut, "kb0"); !gone {
		t.Errorf("kb0 left after a stop with on_stop: remove: %s", out)
	}
	if _, err := os.Stat("/sys/fs/bpf/kbq"); err == nil {
		t.Error("pins left in /sys/fs/bpf/kbq")
	}
}

package xdp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// The loader-pmd bed: kbxu-pdut holds the "NIC", kbxu-prem the remote host.
const (
	pDUT, pRemote = "kbxu-pdut", "kbxu-prem"
	pNIC, pWire   = "kbxu-pnic", "kbxu-pwire"
	pAddr         = "198.18.4.2"
	pinRoot       = "/sys/fs/bpf" // loader pmd: libbpf only reuses pins here
)

var pins = []string{"xsks_map", "steer_config", "stats"}

// TestPMDRestartKeepsExceptionPath: with loader pmd the DPDK app's
// kbridge_steer uses kbridge's pinned maps and redirects into kb0-x. A
// kbridge restart (SIGTERM, start) while the app runs must leave the pins
// and the veth to the app's program and adopt them again, so that the
// exception path still works afterwards and a rule change (SIGHUP) reaches
// the app's program.
func TestPMDRestartKeepsExceptionPath(t *testing.T) {
	harness.NeedRoot(t, "needs root (namespaces, XDP, DPDK)")
	if _, err := exec.LookPath("dpdk-testpmd"); err != nil {
		t.Skip("needs dpdk-testpmd")
	}
	for _, p := range pins {
		if _, err := os.Stat(filepath.Join(pinRoot, p)); err == nil {
			t.Skipf("%s/%s exists: another loader-pmd path is running on this host", pinRoot, p)
		}
	}
	t.Cleanup(func() {
		for _, p := range pins {
			os.Remove(filepath.Join(pinRoot, p))
		}
	})
	harness.Wire{DUT: pDUT, Peer: pRemote, NIC: pNIC, PeerIf: pWire, PeerAddr: "198.18.4.1", GRO: true}.Up(t)

	dir := t.TempDir()
	bin := harness.Kbridge(t)
	cfg := filepath.Join(dir, "kbridge.yaml")
	sock := filepath.Join(dir, "kbridge.sock")
	obj := filepath.Join(dir, "xdp.o")
	write := func(ports string) {
		y := "mode: xdp\ninterface:\n  name: kb0\n  addresses: [" + pAddr + "/24]\nxdp:\n  nic: " + pNIC +
			"\n  loader: pmd\n  object_file: " + obj + "\n  xsk_fallback: drop\n  fast_path:\n    - {proto: udp, ports: \"" + ports +
			"\"}\nstats:\n  socket: " + sock + "\n  metrics: \"\"\n"
		if err := harness.WriteAtomic(cfg, y); err != nil {
			t.Fatal(err)
		}
	}
	write("4789")

	// nsenter, not "ip netns exec": that mounts a fresh /sys, which hides
	// the host's bpffs, and the app's libbpf must find kbridge's pins.
	start := func() *harness.Proc {
		kb := harness.Start(t, "kbridge", "nsenter", "--net=/var/run/netns/"+pDUT, bin, "run", "--config", cfg)
		kb.WaitReady(t, "come up", 15*time.Second, func() bool { return harness.KbridgeAnswers(t, sock) })
		return kb
	}
	stop := func(kb *harness.Proc) { kb.Stop(true) }

	kb := start()
	t.Cleanup(func() { stop(kb) })

	// The DPDK app: testpmd through net_af_xdp with kbridge's object.
	vdev := fmt.Sprintf("net_af_xdp0,iface=%s,start_queue=0,queue_count=1,xdp_prog=%s", pNIC, obj)
	// testpmd exits when its stdin closes: Quit.
	pmd := harness.StartSpec(t, "testpmd", harness.Spec{Stdin: true}, "nsenter", "--net=/var/run/netns/"+pDUT, "dpdk-testpmd",
		"-l", fmt.Sprintf("0,%d", runtime.NumCPU()-1), "--no-huge", "-m", "256", "--no-pci", "--file-prefix", "kbxu-pmd",
		"--vdev", vdev, "--", "--forward-mode=rxonly", "--total-num-mbufs=4096")
	pmd.StopWait = 20 * time.Second
	app := pmd.Log
	stopApp := func() { _ = pmd.Quit() }
	t.Cleanup(stopApp)
	nicProg := func() bool {
		out, _ := exec.Command("ip", "-n", pDUT, "-d", "link", "show", pNIC).CombinedOutput()
		return strings.Contains(string(out), "prog/xdp")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !nicProg() {
		if time.Now().After(deadline) {
			t.Fatalf("the app attached no program to %s\n%s", pNIC, app)
		}
		time.Sleep(100 * time.Millisecond)
	}

	ping := func(what string) {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", pRemote, "ping", "-c", "3", "-i", "0.2", "-W", "2", pAddr).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " 0% packet loss") {
			t.Fatalf("%s: ping %s: %v\n%s\nkbridge:\n%s", what, pAddr, err, out, kb.Log)
		}
	}
	noPorts := func() int { // UDP datagrams the DUT's kernel got for a closed port
		out := harness.Run(t, "ip", "netns", "exec", pDUT, "cat", "/proc/net/snmp")
		var head []string
		for _, l := range strings.Split(out, "\n") {
			if !strings.HasPrefix(l, "Udp: ") {
				continue
			}
			f := strings.Fields(l)
			if head == nil {
				head = f
				continue
			}
			for i, h := range head {
				if h == "NoPorts" {
					n, _ := strconv.Atoi(f[i])
					return n
				}
			}
		}
		t.Fatalf("no Udp NoPorts in /proc/net/snmp:\n%s", out)
		return 0
	}
	sendUDP := func(port, n int) int {
		before := noPorts()
		for i := 0; i < n; i++ {
			harness.Run(t, "ip", "netns", "exec", pRemote, "bash", "-c", fmt.Sprintf("echo x > /dev/udp/%s/%d", pAddr, port))
		}
		time.Sleep(300 * time.Millisecond)
		return noPorts() - before
	}

	ping("exception path with the app's program")
	if got := sendUDP(4790, 10); got != 10 {
		t.Errorf("before the restart: the kernel got %d of 10 datagrams to 4790 (exception)", got)
	}

	// Restart kbridge while the app runs.
	stop(kb)
	for _, p := range pins {
		if _, err := os.Stat(filepath.Join(pinRoot, p)); err != nil {
			t.Errorf("kbridge stopped with the app running and removed the pin %s: %v", p, err)
		}
	}
	if out, err := exec.Command("ip", "-n", pDUT, "link", "show", "kb0").CombinedOutput(); err != nil {
		t.Errorf("kbridge stopped with the app running and removed kb0: %s", out)
	}
	if !nicProg() {
		t.Error("the app's program left the NIC")
	}
	kb = start()
	if !strings.Contains(kb.Log.String(), "keeping the exception veth") {
		t.Errorf("the new kbridge did not keep the veth:\n%s", kb.Log)
	}
	ping("exception path after the restart")
	if got := sendUDP(4790, 10); got != 10 {
		t.Errorf("after the restart: the kernel got %d of 10 datagrams to 4790 (exception)", got)
	}

	// A rule change after the restart reaches the app's program.
	write("4789-4790")
	_ = kb.Signal(syscall.SIGHUP)
	kb.WaitLog("msg=reloaded", 5*time.Second)
	if got := sendUDP(4790, 10); got != 0 {
		t.Errorf("after SIGHUP made 4790 fast path: the kernel still got %d of 10 datagrams", got)
	}
	ping("exception path after the rule change")

	// The app goes first, then kbridge: now everything is removed.
	stopApp()
	stop(kb)
	for _, p := range pins {
		if _, err := os.Stat(filepath.Join(pinRoot, p)); err == nil {
			t.Errorf("pin %s left after the app and kbridge stopped", p)
		}
	}
	if gone, out := harness.LinkGone(pDUT, "kb0"); !gone {
		t.Errorf("kb0 left after the app and kbridge stopped: %s", out)
	}
	if rx := regexpRX(app.String()); rx < 10 {
		t.Errorf("testpmd received %d packets, want >= 10 (the fast-path datagrams)\n%s", rx, app)
	}
}

func regexpRX(out string) int {
	rx := 0
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "RX-packets:"); i >= 0 {
			f := strings.Fields(l[i+len("RX-packets:"):])
			if len(f) > 0 {
				if n, _ := strconv.Atoi(f[0]); n > rx {
					rx = n
				}
			}
		}
	}
	return rx
}

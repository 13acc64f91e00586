package xdpmode

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The loader-pmd bed: kbxu-pdut holds the "NIC", kbxu-prem the remote host.
const (
	pDUT, pRemote = "kbxu-pdut", "kbxu-prem"
	pNIC, pWire   = "kbxu-pnic", "kbxu-pwire"
	pAddr         = "198.18.4.2"
	pinRoot       = "/sys/fs/bpf" // loader pmd: libbpf only reuses pins here
)

var pins = []string{"xsks_map", "steer_config", "stats"}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPMDRestartKeepsExceptionPath: with loader pmd the DPDK app's
// kbridge_steer uses kbridge's pinned maps and redirects into kb0-x. A
// kbridge restart (SIGTERM, start) while the app runs must leave the pins
// and the veth to the app's program and adopt them again, so that the
// exception path still works afterwards and a rule change (SIGHUP) reaches
// the app's program.
func TestPMDRestartKeepsExceptionPath(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, XDP, DPDK)")
	}
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
	for _, ns := range []string{pDUT, pRemote} {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	t.Cleanup(func() {
		for _, ns := range []string{pDUT, pRemote} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	run(t, "ip", "netns", "add", pDUT)
	run(t, "ip", "netns", "add", pRemote)
	run(t, "ip", "link", "add", pNIC, "netns", pDUT, "type", "veth", "peer", "name", pWire, "netns", pRemote)
	run(t, "ip", "-n", pRemote, "addr", "add", "198.18.4.1/24", "dev", pWire)
	for _, c := range [][]string{{pRemote, pWire}, {pDUT, pNIC}, {pDUT, "lo"}, {pRemote, "lo"}} {
		run(t, "ip", "-n", c[0], "link", "set", c[1], "up")
	}
	run(t, "ip", "netns", "exec", pRemote, "ethtool", "-K", pWire, "gro", "on", "tx", "off")

	dir := t.TempDir()
	bin := filepath.Join(dir, "kbridge")
	run(t, "go", "build", "-o", bin, "github.com/kbridge/kbridge/cmd/kbridge")
	cfg := filepath.Join(dir, "kbridge.yaml")
	sock := filepath.Join(dir, "kbridge.sock")
	obj := filepath.Join(dir, "xdp.o")
	write := func(ports string) {
		y := "mode: xdp\ninterface:\n  name: kb0\n  addresses: [" + pAddr + "/24]\nxdp:\n  nic: " + pNIC +
			"\n  loader: pmd\n  object_file: " + obj + "\n  xsk_fallback: drop\n  fast_path:\n    - {proto: udp, ports: \"" + ports +
			"\"}\nstats:\n  socket: " + sock + "\n  metrics: \"\"\n"
		if err := os.WriteFile(cfg+".new", []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg+".new", cfg); err != nil {
			t.Fatal(err)
		}
	}
	write("4789")

	// nsenter, not "ip netns exec": that mounts a fresh /sys, which hides
	// the host's bpffs, and the app's libbpf must find kbridge's pins.
	type daemon struct {
		cmd    *exec.Cmd
		log    *lockedBuf
		exited chan error
	}
	start := func() *daemon {
		d := &daemon{log: &lockedBuf{}, exited: make(chan error, 1)}
		d.cmd = exec.Command("nsenter", "--net=/var/run/netns/"+pDUT, bin, "run", "--config", cfg)
		d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
		if err := d.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { d.exited <- d.cmd.Wait() }()
		deadline := time.Now().Add(15 * time.Second)
		for exec.Command(bin, "stats", "--socket", sock).Run() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("kbridge did not come up:\n%s", d.log)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return d
	}
	stop := func(d *daemon) {
		if d.cmd.ProcessState != nil {
			return
		}
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-d.exited:
			if err != nil {
				t.Errorf("kbridge exited with %v\n%s", err, d.log)
			}
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
			t.Errorf("kbridge ignored SIGTERM\n%s", d.log)
		}
	}

	kb := start()
	t.Cleanup(func() { stop(kb) })

	// The DPDK app: testpmd through net_af_xdp with kbridge's object.
	app := &lockedBuf{}
	vdev := fmt.Sprintf("net_af_xdp0,iface=%s,start_queue=0,queue_count=1,xdp_prog=%s", pNIC, obj)
	pmd := exec.Command("nsenter", "--net=/var/run/netns/"+pDUT, "dpdk-testpmd",
		"-l", fmt.Sprintf("0,%d", runtime.NumCPU()-1), "--no-huge", "-m", "256", "--no-pci", "--file-prefix", "kbxu-pmd",
		"--vdev", vdev, "--", "--forward-mode=rxonly", "--total-num-mbufs=4096")
	pmd.Stdout, pmd.Stderr = app, app
	stdin, err := pmd.StdinPipe() // testpmd exits when stdin closes
	if err != nil {
		t.Fatal(err)
	}
	if err := pmd.Start(); err != nil {
		t.Fatal(err)
	}
	pmdDone := make(chan error, 1)
	go func() { pmdDone <- pmd.Wait() }()
	stopApp := func() {
		if pmd.ProcessState != nil {
			return
		}
		stdin.Close()
		select {
		case <-pmdDone:
		case <-time.After(20 * time.Second):
			_ = pmd.Process.Kill()
			<-pmdDone
		}
	}
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
			t.Fatalf("%s: ping %s: %v\n%s\nkbridge:\n%s", what, pAddr, err, out, kb.log)
		}
	}
	noPorts := func() int { // UDP datagrams the DUT's kernel got for a closed port
		out := run(t, "ip", "netns", "exec", pDUT, "cat", "/proc/net/snmp")
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
			run(t, "ip", "netns", "exec", pRemote, "bash", "-c", fmt.Sprintf("echo x > /dev/udp/%s/%d", pAddr, port))
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
	if !strings.Contains(kb.log.String(), "keeping the exception veth") {
		t.Errorf("the new kbridge did not keep the veth:\n%s", kb.log)
	}
	ping("exception path after the restart")
	if got := sendUDP(4790, 10); got != 10 {
		t.Errorf("after the restart: the kernel got %d of 10 datagrams to 4790 (exception)", got)
	}

	// A rule change after the restart reaches the app's program.
	write("4789-4790")
	_ = kb.cmd.Process.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(5 * time.Second)
	for !strings.Contains(kb.log.String(), "msg=reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload in the log:\n%s", kb.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	if out, _ := exec.Command("ip", "-n", pDUT, "link", "show", "kb0").CombinedOutput(); !strings.Contains(string(out), "does not exist") {
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

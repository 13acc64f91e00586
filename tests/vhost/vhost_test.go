// Package vhost runs `kbridge run` in mode vhost with dpdk-testpmd as the
// unmodified DPDK app: testpmd forwards (io) between a net_virtio_user port
// on kbridge's vhost-user socket and a net_af_packet port on a veth whose
// other end is a peer namespace. Traffic crosses app -> kbridge -> TAP and
// back; stopping kbridge removes its socket and TAP; in client mode a
// restarted kbridge reconnects to testpmd's virtio-user server.
//
// Root only; run with go test -p 1 -count=1 ./tests/vhost/.
package vhost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	dut, peer = "kbvh-dut", "kbvh-peer"
	nic, wire = "kbvh-nic", "kbvh-wire"
	ifname    = "kbvh0"
	kbAddr    = "198.18.2.2"
	peerAddr  = "198.18.2.1"
	kbMAC     = "02:6b:76:68:00:02"
	prefix    = "kbvh-testpmd"
)

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// syncBuf is a log buffer written by a child process and read by the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func requirements(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mode vhost needs root (namespaces, hugepages, TAP): run it as root (make test)")
	}
	for _, tool := range []string{"dpdk-testpmd", "iperf3", "ethtool", "taskset", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	b, _ := os.ReadFile("/proc/meminfo")
	var free int
	if m := regexp.MustCompile(`HugePages_Free:\s+(\d+)`).FindSubmatch(b); m != nil {
		fmt.Sscan(string(m[1]), &free)
	}
	if free < 96 {
		t.Skipf("%d free hugepages: tests/testbed/hugepages.sh reserves more", free)
	}
}

// setup makes the two namespaces and the veth between them.
func setup(t *testing.T) {
	for _, ns := range []string{dut, peer} {
		_ = exec.Command("ip", "netns", "del", ns).Run() // a crashed run's leftovers
	}
	t.Cleanup(func() {
		for _, ns := range []string{dut, peer} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	run(t, "ip", "netns", "add", dut)
	run(t, "ip", "netns", "add", peer)
	run(t, "ip", "link", "add", nic, "netns", dut, "type", "veth", "peer", "name", wire, "netns", peer)
	run(t, "ip", "-n", dut, "link", "set", "lo", "up")
	run(t, "ip", "-n", dut, "link", "set", nic, "up")
	run(t, "ip", "-n", peer, "link", "set", "lo", "up")
	run(t, "ip", "-n", peer, "addr", "add", peerAddr+"/24", "dev", wire)
	run(t, "ip", "-n", peer, "link", "set", wire, "up")
	// testpmd's af_packet port sends what it gets as it is: the peer must
	// not hand it partial checksums.
	run(t, "ip", "netns", "exec", peer, "ethtool", "-K", wire, "tx", "off")
}

var buildOnce sync.Once
var binPath string

func kbridgeBin(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kbvh-bin")
		if err != nil {
			t.Fatal(err)
		}
		binPath = filepath.Join(dir, "kbridge")
		if out, err := exec.Command("go", "build", "-o", binPath, "github.com/kbridge/kbridge/cmd/kbridge").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	})
	return binPath
}

// proc is a child process, stopped by its pid.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	log    *syncBuf
	exited chan error
	stdin  io.Closer
	once   sync.Once
}

func start(t *testing.T, name string, stdin bool, args ...string) *proc {
	p := &proc{t: t, name: name, log: &syncBuf{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if stdin {
		// testpmd without -i exits when its stdin ends: hold it open.
		w, err := p.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdin = w
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(false) })
	return p
}

// stop sends SIGTERM to the process (its pid; `ip netns exec` execs it),
// waits up to 10 s, then kills it. With check, a non-zero exit fails.
func (p *proc) stop(check bool) {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.exited:
			if err != nil && check {
				p.t.Errorf("%s exited with %v\n%s", p.name, err, p.log)
			}
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			p.t.Errorf("%s ignored SIGTERM", p.name)
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
	})
}

func (p *proc) waitLog(what string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.log.String(), what) {
		select {
		case err := <-p.exited:
			p.exited <- err
			p.t.Fatalf("%s exited (%v) before %q:\n%s", p.name, err, what, p.log)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no %q after %v:\n%s", p.name, what, timeout, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type bed struct {
	t    *testing.T
	dir  string
	sock string // vhost-user socket
	ctl  string // kbridge's control socket
	cfg  string
}

func newBed(t *testing.T, client bool) *bed {
	requirements(t)
	setup(t)
	dir := t.TempDir()
	b := &bed{t: t, dir: dir, sock: filepath.Join("/run/kbridge", ifname+".sock"),
		ctl: filepath.Join(dir, "ctl.sock"), cfg: filepath.Join(dir, "kbridge.yaml")}
	_ = os.Remove(b.sock)
	t.Cleanup(func() {
		if client {
			_ = os.Remove(b.sock) // testpmd's, in client mode
		}
	})
	y := fmt.Sprintf(`mode: vhost
interface:
  name: %s
  mac: "%s"
  addresses: [%s/24]
  up: true
  offload: true
workers:
  cpus: [0]
stats:
  socket: %s
  metrics: ""
vhost:
  queues: 1
  client: %v
`, ifname, kbMAC, kbAddr, b.ctl, client)
	if err := os.WriteFile(b.cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bed) kbridge() *proc {
	b.t.Helper()
	p := start(b.t, "kbridge", false, "ip", "netns", "exec", dut, kbridgeBin(b.t), "run", "--config", b.cfg)
	p.waitLog("bridge running", 20*time.Second)
	return p
}

func (b *bed) testpmd(server bool) *proc {
	b.t.Helper()
	_ = exec.Command("rm", "-rf", "/var/run/dpdk/"+prefix).Run()
	vdev := "net_virtio_user0,path=" + b.sock + ",queues=1"
	if server {
		vdev += ",server=1"
	}
	p := start(b.t, "testpmd", true, "ip", "netns", "exec", dut, "taskset", "-c", "0,1",
		"stdbuf", "-oL", "-eL", "dpdk-testpmd",
		"--lcores", "0@0,1@1", "--main-lcore", "0", "--file-prefix", prefix, "--proc-type", "primary",
		"--no-pci", "--single-file-segments", "-m", "256",
		"--vdev", vdev, "--vdev", "net_af_packet0,iface="+nic,
		"--", "--forward-mode=io", "--auto-start", "--nb-cores=1", "--rxq=1", "--txq=1",
		"--total-num-mbufs=16384", "--disable-link-check")
	b.t.Cleanup(func() { _ = exec.Command("rm", "-rf", "/var/run/dpdk/"+prefix).Run() })
	return p
}

// ping pings from ns to addr until one answers (up to 10 s), then 5 more.
func ping(t *testing.T, ns, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for exec.Command("ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "1", addr).Run() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no answer from %s in %s", addr, ns)
		}
	}
	run(t, "ip", "netns", "exec", ns, "ping", "-c", "5", "-i", "0.1", "-W", "2", addr)
}

var receiver = regexp.MustCompile(`([\d.]+ [KMG]?bits/sec)\s+receiver`)

// iperf runs a 3 s TCP transfer from client's namespace to srvAddr in
// server's, both pinned to CPU 0, and returns the receiver's rate.
func iperf(t *testing.T, server, client, srvAddr string, port int) string {
	t.Helper()
	p := fmt.Sprint(port)
	srv := start(t, "iperf3 server", false, "ip", "netns", "exec", server, "taskset", "-c", "0",
		"iperf3", "-s", "-1", "--forceflush", "-B", srvAddr, "-p", p)
	srv.waitLog("Server listening", 5*time.Second)
	out := run(t, "ip", "netns", "exec", client, "taskset", "-c", "0", "iperf3", "-c", srvAddr, "-p", p, "-t", "3")
	m := receiver.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("iperf3 gave no receiver line:\n%s", out)
	}
	return m[1]
}

type status struct {
	PoolInUse int      `json:"pool_in_use"`
	Connected bool     `json:"connected"`
	Features  []string `json:"features"`
	Connects  uint64   `json:"connects"`
	Queues    []struct {
		ToKernel   uint64 `json:"to_kernel_packets"`
		FromKernel uint64 `json:"from_kernel_packets"`
		Parks      uint64 `json:"parks"`
		Wakeups    uint64 `json:"wakeups"`
		CanKick    bool   `json:"can_kick"`
	} `json:"queues"`
}

func (b *bed) stats() status {
	b.t.Helper()
	var s status
	out, err := exec.Command(kbridgeBin(b.t), "stats", "--socket", b.ctl).Output()
	if err == nil {
		err = json.Unmarshal(out, &s)
	}
	if err != nil {
		b.t.Fatalf("kbridge stats: %v\n%s", err, out)
	}
	return s
}

func gone(t *testing.T, sock string) {
	t.Helper()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket %s still there after stop (%v)", sock, err)
	}
	if out, _ := exec.Command("ip", "-n", dut, "link", "show", ifname).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("%s still there after stop: %s", ifname, out)
	}
}

// TestVhostServer: kbridge serves the socket, testpmd's virtio-user port
// connects to it.
func TestVhostServer(t *testing.T) {
	b := newBed(t, false)
	kb := b.kbridge()

	t.Run("hostile frontend: garbage on the socket is refused, kbridge survives", func(t *testing.T) {
		for _, junk := range [][]byte{
			bytes.Repeat([]byte{0xff}, 64),
			{1, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}, // GET_FEATURES with a huge size
			{},
		} {
			c, err := net.Dial("unix", b.sock)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(junk)
			time.Sleep(100 * time.Millisecond)
			c.Close()
		}
		time.Sleep(200 * time.Millisecond)
		if s := b.stats(); s.Connected {
			t.Fatalf("a garbage client counts as a frontend: %+v", s)
		}
	})

	tp := b.testpmd(false)
	tp.waitLog("Press enter to exit", 30*time.Second)
	kb.waitLog("vhost-user frontend connected", 10*time.Second)
	if !strings.Contains(kb.log.String(), "MRG_RXBUF") {
		t.Errorf("the negotiated features are not logged:\n%s", kb.log)
	}

	t.Run("ping both ways", func(t *testing.T) {
		ping(t, peer, kbAddr)
		ping(t, dut, peerAddr)
	})
	t.Run("TCP both ways", func(t *testing.T) {
		up := iperf(t, dut, peer, kbAddr, 5311)     // peer -> app -> kbridge -> TAP
		down := iperf(t, peer, dut, peerAddr, 5312) // TAP -> kbridge -> app -> peer
		t.Logf("iperf3 peer->kbvh0 %s, kbvh0->peer %s", up, down)
	})
	s := b.stats()
	t.Logf("status: %+v", s)
	if !s.Connected || len(s.Queues) != 1 || s.Queues[0].ToKernel == 0 || s.Queues[0].FromKernel == 0 || !s.Queues[0].CanKick {
		t.Errorf("status after traffic: %+v", s)
	}
	if s.Queues[0].Wakeups == 0 {
		t.Errorf("no park ended by a kick or TAP data: %+v", s.Queues[0])
	}

	t.Run("idle: parks, does not spin", func(t *testing.T) {
		before := b.stats().Queues[0]
		time.Sleep(time.Second)
		ping(t, dut, peerAddr) // woken by the TAP fd and by the app's kick
		after := b.stats().Queues[0]
		if after.Parks == before.Parks {
			t.Errorf("no park in an idle second: %+v -> %+v", before, after)
		}
	})

	kb.stop(true)
	if !strings.Contains(kb.log.String(), "pool_in_use=0") {
		t.Errorf("mbufs still in use after stop:\n%s", kb.log)
	}
	gone(t, b.sock)
	tp.stop(false)
}

// TestVhostClientReconnect: testpmd's virtio-user port is the server
// (server=1) and kbridge connects; a restarted kbridge reconnects while
// testpmd runs on. (A virtio-user client does not reconnect to a restarted
// server in DPDK 22.11, so this is the mode for restarts.)
func TestVhostClientReconnect(t *testing.T) {
	b := newBed(t, true)
	tp := b.testpmd(true)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(b.sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("testpmd did not create %s:\n%s", b.sock, tp.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 2 {
		kb := b.kbridge()
		kb.waitLog("vhost-user frontend connected", 15*time.Second)
		tp.waitLog("Press enter to exit", 30*time.Second)
		ping(t, dut, peerAddr)
		ping(t, peer, kbAddr)
		s := b.stats()
		if !s.Connected {
			t.Errorf("run %d: not connected: %+v", i, s)
		}
		kb.stop(true)
		if _, err := os.Stat(b.sock); err != nil {
			t.Errorf("run %d: kbridge removed the socket of testpmd, the server: %v", i, err)
		}
		if out, _ := exec.Command("ip", "-n", dut, "link", "show", ifname).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
			t.Errorf("run %d: %s still there after stop", i, ifname)
		}
	}
	tp.stop(false)
}

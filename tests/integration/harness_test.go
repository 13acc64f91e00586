// Package integration runs the real kbridge binary as a DPDK secondary
// against this test process as the DPDK primary (package ringtest), with a
// real TAP interface inside a network namespace the tests create. Root only.
package integration

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
)

const (
	nsName     = "kbit-dut"
	testEthTyp = 0x88b5 // IEEE local experimental: the kernel ignores it
)

var (
	skipReason string
	kbridgeBin string
	prefix     = fmt.Sprintf("kbit%d", os.Getpid())
	seq        int
	seqMu      sync.Mutex
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if reason := setup(); reason != "" {
			skipReason = reason
			return m.Run()
		}
		defer teardown()
		return m.Run()
	}()
	os.Exit(code)
}

func setup() string {
	switch {
	case testing.Short():
		return "integration tests skipped in -short mode"
	case os.Geteuid() != 0:
		return "integration tests need root (DPDK, TAP devices, namespaces): run them as root (make test)"
	}
	if free := hugepagesFree(); free < 64 {
		return fmt.Sprintf("only %d free 2 MB hugepages: run `make deps` (tests/testbed/hugepages.sh) first", free)
	}
	dir, err := os.MkdirTemp("", "kbit-bin")
	if err != nil {
		return "tempdir: " + err.Error()
	}
	kbridgeBin = filepath.Join(dir, "kbridge")
	build := exec.Command("go", "build", "-o", kbridgeBin, "github.com/kbridge/kbridge/cmd/kbridge")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building kbridge: %v\n%s", err, out)
		os.Exit(1)
	}
	// Leftovers of a crashed run first.
	_ = exec.Command("ip", "netns", "del", nsName).Run()
	if out, err := exec.Command("ip", "netns", "add", nsName).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "ip netns add: %v: %s\n", err, out)
		os.Exit(1)
	}
	_ = exec.Command("ip", "-n", nsName, "link", "set", "lo", "up").Run()
	// No IPv6 chatter (router solicitations, MLD) in what the tests count.
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		_ = exec.Command("ip", "netns", "exec", nsName, "sysctl", "-qw", k+"=1").Run()
	}
	if err := ringtest.InitPrimary(prefix, 256); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return ""
}

func teardown() {
	_ = exec.Command("ip", "netns", "del", nsName).Run()
	_ = os.RemoveAll(filepath.Dir(kbridgeBin))
	_ = os.RemoveAll(filepath.Join("/var/run/dpdk", prefix))
}

func hugepagesFree() int {
	b, err := os.ReadFile("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscan(string(b), &n)
	return n
}

func needRoot(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// bed is one kbridge daemon bridging a fresh exception port to a TAP
// interface in the test namespace.
type bed struct {
	t      *testing.T
	pool   *ringtest.Pool
	port   *ringtest.Port
	name   string
	ifname string
	sock   string
	cfg    string
	cmd    *exec.Cmd
	out    *bytes.Buffer
	exited chan error
}

type bedOpts struct {
	queues   int
	ringSize int
	poolSize int
	yaml     string // appended to the generated configuration
	noStart  bool
}

func newBed(t *testing.T, o bedOpts) *bed {
	t.Helper()
	needRoot(t)
	if o.ringSize == 0 {
		o.ringSize = 1024
	}
	if o.queues == 0 {
		o.queues = 1
	}
	if o.poolSize == 0 {
		o.poolSize = 4095
	}
	seqMu.Lock()
	seq++
	n := seq
	seqMu.Unlock()
	b := &bed{t: t, name: fmt.Sprintf("kbit%d", n), ifname: fmt.Sprintf("kbit%d", n)}
	var err error
	if b.pool, err = ringtest.NewPool(fmt.Sprintf("kbit_pool%d", n), o.poolSize); err != nil {
		t.Fatal(err)
	}
	if b.port, err = ringtest.NewPort(b.name, o.queues, o.ringSize, b.pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.port.Free()
		if n := b.pool.InUse(); n != 0 {
			t.Errorf("mbuf leak: %d mbufs of the pool still in use after kbridge stopped and the port was freed", n)
		}
	})
	dir := t.TempDir()
	b.sock = filepath.Join(dir, "kbridge.sock")
	b.cfg = filepath.Join(dir, "kbridge.yaml")
	yaml := fmt.Sprintf(`dpdk:
  file_prefix: %s
port: %s
interface:
  name: %s
  mtu: 1500
stats:
  socket: %s
  metrics: ""
`, prefix, b.name, b.ifname, b.sock) + o.yaml
	if err := os.WriteFile(b.cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if !o.noStart {
		b.start()
	}
	return b
}

// start runs kbridge and waits until its control socket answers.
func (b *bed) start() {
	b.t.Helper()
	b.out = &bytes.Buffer{}
	b.cmd = exec.Command("ip", "netns", "exec", nsName, kbridgeBin, "run", "--config", b.cfg)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.exited = make(chan error, 1)
	go func() { b.exited <- b.cmd.Wait() }()
	b.t.Cleanup(func() { b.stop(true) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := daemon.ReadStatus(b.sock); err == nil {
			return
		}
		select {
		case err := <-b.exited:
			b.exited <- err
			b.t.Fatalf("kbridge exited at start-up: %v\n%s", err, b.out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("kbridge did not answer on %s within 20s\n%s", b.sock, b.out)
		}
	}
}

// stop sends SIGTERM (to the PID this test started) and checks a clean exit.
func (b *bed) stop(check bool) {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	cmd := b.cmd
	b.cmd = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-b.exited:
		if check && err != nil {
			b.t.Errorf("kbridge exited with %v after SIGTERM\n%s", err, b.out)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		b.t.Errorf("kbridge ignored SIGTERM for 15s\n%s", b.out)
	}
	if check {
		if _, err := b.link(); err == nil {
			b.t.Errorf("interface %s still exists after kbridge stopped", b.ifname)
		}
	}
}

func (b *bed) status() daemon.Queue {
	b.t.Helper()
	st, err := daemon.ReadStatus(b.sock)
	if err != nil {
		b.t.Fatal(err)
	}
	return st.Queues[0]
}

// inNS runs f on a thread inside the test namespace.
func inNS(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked: the thread's namespace is changed, so it must die.
		ns, err := netns.GetFromName(nsName)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

func (b *bed) link() (netlink.Link, error) {
	var l netlink.Link
	err := inNS(func() (err error) {
		l, err = netlink.LinkByName(b.ifname)
		return err
	})
	return l, err
}

func (b *bed) setUp(up bool) {
	b.t.Helper()
	err := inNS(func() error {
		l, err := netlink.LinkByName(b.ifname)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	})
	if err != nil {
		b.t.Fatal(err)
	}
}

// packetSocket is an AF_PACKET socket on the bed's interface: it sees what
// kbridge writes to the TAP and sends what the kernel transmits on it.
type packetSocket struct {
	fd      int
	ifindex int
}

func (b *bed) packetSocket() *packetSocket {
	b.t.Helper()
	var ps packetSocket
	err := inNS(func() error {
		l, err := netlink.LinkByName(b.ifname)
		if err != nil {
			return err
		}
		ps.ifindex = l.Attrs().Index
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(testEthTyp)))
		if err != nil {
			return err
		}
		ps.fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(testEthTyp), Ifindex: ps.ifindex})
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { unix.Close(ps.fd) })
	return &ps
}

// receive returns the test frames that arrive within timeout, stopping early
// once want have arrived.
func (ps *packetSocket) receive(want int, timeout time.Duration) [][]byte {
	var got [][]byte
	buf := make([]byte, 65536)
	deadline := time.Now().Add(timeout)
	for len(got) < want {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		tv := unix.NsecToTimeval(int64(min(left, 100*time.Millisecond)))
		_ = unix.SetsockoptTimeval(ps.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		n, from, err := unix.Recvfrom(ps.fd, buf, 0)
		if err != nil {
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		got = append(got, append([]byte(nil), buf[:n]...))
	}
	return got
}

// send transmits frames on the interface: they leave through the TAP to
// kbridge, which hands them to the app.
func (ps *packetSocket) send(t *testing.T, frames [][]byte) {
	t.Helper()
	for _, f := range frames {
		to := &unix.SockaddrLinklayer{Ifindex: ps.ifindex, Protocol: htons(testEthTyp), Halen: 6}
		copy(to.Addr[:], f[:6])
		for {
			err := unix.Sendto(ps.fd, f, 0, to)
			if errors.Is(err, unix.ENOBUFS) {
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// testFrame builds an Ethernet frame of n bytes of the test ethertype whose
// payload starts with seq, so every frame is recognisable.
func testFrame(n int, seq uint32) []byte {
	f := make([]byte, max(n, 18))
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 0x01})
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0x02})
	binary.BigEndian.PutUint16(f[12:14], testEthTyp)
	if n >= 18 {
		binary.BigEndian.PutUint32(f[14:18], seq)
	}
	for i := 18; i < n; i++ {
		f[i] = byte(i*31) ^ byte(seq)
	}
	return f[:n]
}

func onlyTest(frames [][]byte) [][]byte {
	var out [][]byte
	for _, f := range frames {
		if len(f) >= 14 && binary.BigEndian.Uint16(f[12:14]) == testEthTyp {
			out = append(out, f)
		}
	}
	return out
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

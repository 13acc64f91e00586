// Package dpdkbed is the harness of kbridge's root-only tests on real DPDK:
// the test process is the DPDK primary (package ring/ringtest), and each Bed
// is one real kbridge binary, a DPDK secondary, bridging a fresh exception
// port to a TAP interface in a network namespace the harness creates. It
// also sends and receives test frames on that TAP with an AF_PACKET socket.
// tests/integration and tests/faults share it.
package dpdkbed

import (
	"bytes"
	"encoding/binary"
	"errors"
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

// EthType is the test frames' ethertype: IEEE local experimental, which the
// kernel ignores.
const EthType = 0x88b5

// Env is what Setup made for one test binary: the namespace, the DPDK
// primary's file prefix and the kbridge binary. With Skip set, the tests
// cannot run here, and it says why.
type Env struct {
	NS     string // the network namespace the TAPs live in
	Prefix string // the primary's --file-prefix
	Bin    string // the kbridge binary built for this run
	Skip   string // why the tests skip; "" when they run

	base string
	mu   sync.Mutex
	seq  int
}

// Setup makes the test binary a DPDK primary with a namespace of its own;
// name tells test binaries apart (namespace, file prefix, port names). It
// exits the process on errors that are no reason to skip.
func Setup(name string) *Env {
	e := &Env{NS: name + "-dut", Prefix: fmt.Sprintf("%s%d", name, os.Getpid()), base: name}
	switch {
	case testing.Short():
		e.Skip = "root tests skipped in -short mode"
		return e
	case os.Geteuid() != 0:
		e.Skip = "these tests need root (DPDK, TAP devices, namespaces): run them as root (make test)"
		return e
	}
	if free := HugepagesFree(); free < 64 {
		e.Skip = fmt.Sprintf("only %d free 2 MB hugepages: run `make deps` (tests/testbed/hugepages.sh) first", free)
		return e
	}
	dir, err := os.MkdirTemp("", name+"-bin")
	if err != nil {
		e.Skip = "tempdir: " + err.Error()
		return e
	}
	e.Bin = filepath.Join(dir, "kbridge")
	build := exec.Command("go", "build", "-o", e.Bin, "github.com/kbridge/kbridge/cmd/kbridge")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building kbridge: %v\n%s", err, out)
		os.Exit(1)
	}
	// Leftovers of a crashed run first.
	_ = exec.Command("ip", "netns", "del", e.NS).Run()
	if out, err := exec.Command("ip", "netns", "add", e.NS).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "ip netns add: %v: %s\n", err, out)
		os.Exit(1)
	}
	_ = exec.Command("ip", "-n", e.NS, "link", "set", "lo", "up").Run()
	// No IPv6 chatter (router solicitations, MLD) in what the tests count.
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		_ = exec.Command("ip", "netns", "exec", e.NS, "sysctl", "-qw", k+"=1").Run()
	}
	if err := ringtest.InitPrimary(e.Prefix, 256); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return e
}

// Teardown removes what Setup made.
func (e *Env) Teardown() {
	if e.Skip != "" {
		return
	}
	_ = exec.Command("ip", "netns", "del", e.NS).Run()
	_ = os.RemoveAll(filepath.Dir(e.Bin))
	_ = os.RemoveAll(filepath.Join("/var/run/dpdk", e.Prefix))
}

// NeedRoot skips t when the tests cannot run here.
func (e *Env) NeedRoot(t *testing.T) {
	t.Helper()
	if e.Skip != "" {
		t.Skip(e.Skip)
	}
}

// Next returns a number unique in this test binary, for names.
func (e *Env) Next() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	return e.seq
}

// HugepagesFree returns the free 2 MB hugepages.
func HugepagesFree() int {
	b, err := os.ReadFile("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscan(string(b), &n)
	return n
}

// Bed is one kbridge daemon bridging a fresh exception port to a TAP
// interface in the Env's namespace.
type Bed struct {
	T      *testing.T
	Env    *Env
	Pool   *ringtest.Pool
	Port   *ringtest.Port
	Name   string // the port's name
	Ifname string // the TAP's name
	Sock   string // the control socket
	Cfg    string // the configuration file
	Cmd    *exec.Cmd
	Out    *SyncBuffer // kbridge's stdout and stderr
	Exited chan error
}

// Opts shape a Bed.
type Opts struct {
	Queues   int
	RingSize int
	PoolSize int
	Iface    string // more keys of the interface: section, each line indented by two spaces
	YAML     string // appended to the generated configuration
	NoStart  bool
}

// NewBed makes a pool and a port as the app would, writes kbridge's
// configuration and, unless o.NoStart, starts kbridge. Cleanup frees the
// port and checks that no mbuf of the pool is left in use.
func (e *Env) NewBed(t *testing.T, o Opts) *Bed {
	t.Helper()
	e.NeedRoot(t)
	if o.RingSize == 0 {
		o.RingSize = 1024
	}
	if o.Queues == 0 {
		o.Queues = 1
	}
	if o.PoolSize == 0 {
		o.PoolSize = 4095
	}
	n := e.Next()
	b := &Bed{T: t, Env: e, Name: fmt.Sprintf("%s%d", e.base, n), Ifname: fmt.Sprintf("%s%d", e.base, n)}
	var err error
	if b.Pool, err = ringtest.NewPool(fmt.Sprintf("%s_pool%d", e.base, n), o.PoolSize); err != nil {
		t.Fatal(err)
	}
	if b.Port, err = ringtest.NewPort(b.Name, o.Queues, o.RingSize, b.Pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Port.Free()
		if n := b.Pool.InUse(); n != 0 {
			t.Errorf("mbuf leak: %d mbufs of the pool still in use after kbridge stopped and the port was freed", n)
		}
	})
	dir := t.TempDir()
	b.Sock = filepath.Join(dir, "kbridge.sock")
	b.Cfg = filepath.Join(dir, "kbridge.yaml")
	iface := o.Iface
	if !strings.Contains(iface, "  mtu:") {
		iface = "  mtu: 1500\n" + iface
	}
	yaml := fmt.Sprintf(`dpdk:
  file_prefix: %s
port: %s
interface:
  name: %s
%sstats:
  socket: %s
  metrics: ""
`, e.Prefix, b.Name, b.Ifname, iface, b.Sock) + o.YAML
	if err := os.WriteFile(b.Cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if !o.NoStart {
		b.Start()
	}
	return b
}

// Start runs kbridge and waits until its control socket answers.
func (b *Bed) Start() {
	b.T.Helper()
	b.Out = &SyncBuffer{}
	b.Cmd = exec.Command("ip", "netns", "exec", b.Env.NS, b.Env.Bin, "run", "--config", b.Cfg)
	b.Cmd.Stdout, b.Cmd.Stderr = b.Out, b.Out
	if err := b.Cmd.Start(); err != nil {
		b.T.Fatal(err)
	}
	b.Exited = make(chan error, 1)
	go func() { b.Exited <- b.Cmd.Wait() }()
	b.T.Cleanup(func() { b.Stop(true) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := daemon.ReadStatus(b.Sock); err == nil {
			return
		}
		select {
		case err := <-b.Exited:
			b.Exited <- err
			b.T.Fatalf("kbridge exited at start-up: %v\n%s", err, b.Out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.T.Fatalf("kbridge did not answer on %s within 20s\n%s", b.Sock, b.Out)
		}
	}
}

// Stop sends SIGTERM (to the PID this test started) and checks a clean exit.
func (b *Bed) Stop(check bool) {
	if b.Cmd == nil || b.Cmd.Process == nil {
		return
	}
	cmd := b.Cmd
	b.Cmd = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-b.Exited:
		if check && err != nil {
			b.T.Errorf("kbridge exited with %v after SIGTERM\n%s", err, b.Out)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		b.T.Errorf("kbridge ignored SIGTERM for 15s\n%s", b.Out)
	}
	if check {
		if _, err := b.Link(); err == nil {
			b.T.Errorf("interface %s still exists after kbridge stopped", b.Ifname)
		}
	}
}

// Status reads queue 0's counters from the control socket.
func (b *Bed) Status() daemon.Queue {
	b.T.Helper()
	st, err := daemon.ReadStatus(b.Sock)
	if err != nil {
		b.T.Fatal(err)
	}
	return st.Queues[0]
}

// InNS runs f on a thread inside namespace ns.
func InNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked: the thread's namespace is changed, so it must die.
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Link finds the TAP in the namespace.
func (b *Bed) Link() (netlink.Link, error) {
	var l netlink.Link
	err := InNS(b.Env.NS, func() (err error) {
		l, err = netlink.LinkByName(b.Ifname)
		return err
	})
	return l, err
}

// SetUp sets the TAP up or down.
func (b *Bed) SetUp(up bool) {
	b.T.Helper()
	err := InNS(b.Env.NS, func() error {
		l, err := netlink.LinkByName(b.Ifname)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	})
	if err != nil {
		b.T.Fatal(err)
	}
}

// PacketSocket is an AF_PACKET socket on the bed's interface: it sees what
// kbridge writes to the TAP and sends what the kernel transmits on it.
type PacketSocket struct {
	Fd      int // the socket, for tests that tune it
	ifindex int
}

// PacketSocket opens one on the bed's TAP; Cleanup closes it.
func (b *Bed) PacketSocket() *PacketSocket {
	b.T.Helper()
	var ps PacketSocket
	err := InNS(b.Env.NS, func() error {
		l, err := netlink.LinkByName(b.Ifname)
		if err != nil {
			return err
		}
		ps.ifindex = l.Attrs().Index
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(Htons(EthType)))
		if err != nil {
			return err
		}
		ps.Fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: Htons(EthType), Ifindex: ps.ifindex})
	})
	if err != nil {
		b.T.Fatal(err)
	}
	b.T.Cleanup(func() { unix.Close(ps.Fd) })
	return &ps
}

// Receive returns the test frames that arrive within timeout, stopping early
// once want have arrived.
func (ps *PacketSocket) Receive(want int, timeout time.Duration) [][]byte {
	var got [][]byte
	buf := make([]byte, 65536)
	deadline := time.Now().Add(timeout)
	for len(got) < want {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		tv := unix.NsecToTimeval(int64(min(left, 100*time.Millisecond)))
		_ = unix.SetsockoptTimeval(ps.Fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		n, from, err := unix.Recvfrom(ps.Fd, buf, 0)
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

// Send transmits frames on the interface: they leave through the TAP to
// kbridge, which hands them to the app.
func (ps *PacketSocket) Send(t *testing.T, frames [][]byte) {
	t.Helper()
	for _, f := range frames {
		to := &unix.SockaddrLinklayer{Ifindex: ps.ifindex, Protocol: Htons(EthType), Halen: 6}
		copy(to.Addr[:], f[:6])
		for {
			err := unix.Sendto(ps.Fd, f, 0, to)
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

// Htons swaps a 16-bit value to network order.
func Htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestFrame builds an Ethernet frame of n bytes of the test ethertype whose
// payload starts with seq, so every frame is recognisable.
func TestFrame(n int, seq uint32) []byte {
	f := make([]byte, max(n, 18))
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 0x01})
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0x02})
	binary.BigEndian.PutUint16(f[12:14], EthType)
	if n >= 18 {
		binary.BigEndian.PutUint32(f[14:18], seq)
	}
	for i := 18; i < n; i++ {
		f[i] = byte(i*31) ^ byte(seq)
	}
	return f[:n]
}

// OnlyTest keeps the frames of the test ethertype.
func OnlyTest(frames [][]byte) [][]byte {
	var out [][]byte
	for _, f := range frames {
		if len(f) >= 14 && binary.BigEndian.Uint16(f[12:14]) == EthType {
			out = append(out, f)
		}
	}
	return out
}

// WaitUntil polls cond until it holds, failing t after 10 s.
func WaitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer that a process may write while a test reads
// it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

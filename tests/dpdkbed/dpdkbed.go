// Package dpdkbed is the harness of kbridge's root-only tests on real DPDK:
// the test process is the DPDK primary (package ring/ringtest), and each Bed
// is one real kbridge binary, a DPDK secondary, bridging a fresh exception
// port to a TAP interface in a network namespace the harness creates. It
// also sends and receives test frames on that TAP with an AF_PACKET socket.
// The DPDK root test packages of tests/ share it (tests/README.md); the
// processes, buffers, namespace and kbridge build under it are package
// tests/harness's.
package dpdkbed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/harness"
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
	Bin    string // the kbridge binary built for this run (harness.BuildKbridge)
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
	bin, err := harness.BuildKbridge()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e.Bin = bin
	if err := harness.AddNS(e.NS); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// No IPv6 chatter (router solicitations, MLD) in what the tests count.
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		_ = exec.Command("ip", "netns", "exec", e.NS, "sysctl", "-qw", k+"=1").Run()
	}
	removeDeadPrimariesFiles(name)
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
	harness.DelNS(e.NS)
	harness.Teardown()
	_ = os.RemoveAll(filepath.Join("/var/run/dpdk", e.Prefix))
	removePrefixFiles(e.Prefix)
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
	Name   string          // the port's name
	Ifname string          // the TAP's name
	Sock   string          // the control socket
	Cfg    string          // the configuration file
	Kb     *harness.Proc   // the running kbridge; nil once stopped
	Out    *harness.Buffer // kbridge's stdout and stderr (Kb.Log)
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
		if err := b.Port.Free(); err != nil {
			t.Error(err)
			return // a kbridge may still use the pool
		}
		if n := b.Pool.InUse(); n != 0 {
			t.Errorf("mbuf leak: %d mbufs of the pool still in use after kbridge stopped and the port was freed", n)
		}
		b.Pool.Free()
	})
	dir := t.TempDir()
	b.Sock = filepath.Join(dir, "kbridge.sock")
	b.Cfg = filepath.Join(dir, "kbridge.yaml")
	iface := o.Iface
	if !strings.Contains(iface, "  mtu:") {
		iface = "  mtu: 1500\n" + iface
	}
	yaml := Config{Prefix: e.Prefix, Port: b.Name, Ifname: b.Ifname, Iface: iface, Sock: b.Sock}.YAML() + o.YAML
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
	b.StartBin(b.Env.Bin)
}

// StartBin is Start with kbridge binary bin (a test build, say) and env
// added to its environment.
func (b *Bed) StartBin(bin string, env ...string) {
	b.T.Helper()
	b.Kb = b.Env.StartKbridgeBin(b.T, bin, b.Cfg, env...)
	b.Out = b.Kb.Log
	b.T.Cleanup(func() { b.Stop(true) })
	WaitServing(b.T, b.Kb, b.Sock)
}

// Stop sends SIGTERM (to the PID this test started) and, with check, wants
// a clean exit that removed the TAP.
func (b *Bed) Stop(check bool) {
	if b.Kb == nil {
		return
	}
	kb := b.Kb
	b.Kb = nil
	kb.Stop(check)
	if check {
		if _, err := b.Link(); err == nil {
			b.T.Errorf("interface %s still exists after kbridge stopped", b.Ifname)
		}
	}
}

// Config is the configuration of a kbridge on this harness: the port of
// primary Prefix, its TAP Ifname, the control socket Sock.
type Config struct {
	Prefix, Port, Ifname, Sock string
	DPDK                       string // more keys of the dpdk: section, each line indented by two spaces
	Iface                      string // more keys of the interface: section, likewise
	More                       string // more sections, unindented
}

// YAML renders c.
func (c Config) YAML() string {
	return fmt.Sprintf("dpdk:\n  file_prefix: %s\n%sport: %s\ninterface:\n  name: %s\n%sstats:\n  socket: %s\n  metrics: \"\"\n%s",
		c.Prefix, c.DPDK, c.Port, c.Ifname, c.Iface, c.Sock, c.More)
}

// Write renders c into path.
func (c Config) Write(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(c.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// StartKbridge runs `kbridge run --config cfg` in the Env's namespace, with
// env added to its environment; it is stopped when t ends.
func (e *Env) StartKbridge(t *testing.T, cfg string, env ...string) *harness.Proc {
	t.Helper()
	return e.StartKbridgeBin(t, e.Bin, cfg, env...)
}

// StartKbridgeBin is StartKbridge with kbridge binary bin.
func (e *Env) StartKbridgeBin(t *testing.T, bin, cfg string, env ...string) *harness.Proc {
	t.Helper()
	p := harness.StartSpec(t, "kbridge", harness.Spec{Env: env}, "ip", "netns", "exec", e.NS, bin, "run", "--config", cfg)
	p.StopWait = 15 * time.Second
	return p
}

// WaitServing waits until kbridge answers on its control socket sock; it
// fails t when kbridge exits first or after 20 s.
func WaitServing(t *testing.T, kb *harness.Proc, sock string) {
	t.Helper()
	kb.WaitReady(t, "answer on "+sock, 20*time.Second, func() bool {
		_, err := daemon.ReadStatus(sock)
		return err == nil
	})
}

// StartRefapp starts the reference DPDK app (bin/kbridge-refapp, skipping t
// when it is not built) as a primary of its own, file prefix prefix, on an
// ethdev without traffic (net_ring0) with exception port port, and waits
// until it is ready; extra are more of its own arguments (after --port).
// It is stopped, and its runtime files removed, when t ends.
func StartRefapp(t *testing.T, prefix, port string, extra ...string) *harness.Proc {
	t.Helper()
	refapp := filepath.Join(harness.RepoRoot(t), "bin/kbridge-refapp")
	if _, err := os.Stat(refapp); err != nil {
		t.Skip("bin/kbridge-refapp missing: run make build (make test does)")
	}
	t.Cleanup(func() {
		_ = os.RemoveAll(filepath.Join("/var/run/dpdk", prefix))
		removePrefixFiles(prefix) // the app stopped: harness.Start's cleanup ran first
	})
	args := append([]string{refapp, "-l", "0", "--file-prefix", prefix, "--proc-type", "primary",
		"--no-pci", "--vdev", "net_ring0", "-m", "64", "--", "--port", port}, extra...)
	app := harness.Start(t, "kbridge-refapp", args...)
	app.WaitLog("kbridge-refapp: ready", 20*time.Second)
	return app
}

// Status reads queue 0's counters from the control socket.
func (b *Bed) Status() daemon.Queue {
	b.T.Helper()
	return queue0(b.T, b.Sock, "")
}

// queue0 reads queue 0's counters from control socket sock; an error fails
// t, with log after it.
func queue0(t *testing.T, sock, log string) daemon.Queue {
	t.Helper()
	st, err := daemon.ReadStatus(sock)
	if err != nil {
		if log != "" {
			t.Fatalf("%v\n%s", err, log)
		}
		t.Fatal(err)
	}
	return st.Queues[0]
}

// InNS runs f on a thread inside namespace ns.
var InNS = harness.InNS

// Link finds the TAP in the namespace.
func (b *Bed) Link() (netlink.Link, error) { return b.Env.Link(b.Ifname) }

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
	harness.WaitUntil(t, what, 10*time.Second, cond)
}

// Package faults checks what happens around a crash or a misuse of the
// exception port: a second kbridge on a served port, a kbridge killed with
// mbufs in flight, the app freeing the port under a running kbridge. Like
// tests/integration it runs the real kbridge binary as a DPDK secondary of
// this test process (package ringtest), with its TAP in a network namespace
// the tests create. Root only.
package faults

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

const testEthTyp = 0x88b5 // IEEE local experimental: the kernel ignores it

var (
	skipReason string
	kbridgeBin string
	// Unique per run: other DPDK tests may run beside these.
	prefix = fmt.Sprintf("kbft%d", os.Getpid())
	nsName = fmt.Sprintf("kbft%d", os.Getpid())
	seq    int
	seqMu  sync.Mutex
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if reason := setup(); reason != "" {
			skipReason = reason
			fmt.Fprintln(os.Stderr, "faults: skipped:", reason)
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
		return "fault tests skipped in -short mode"
	case os.Geteuid() != 0:
		return "fault tests need root (DPDK, TAP devices, namespaces): run them as root (make test)"
	}
	if free := hugepagesFree(); free < 64 {
		return fmt.Sprintf("only %d free 2 MB hugepages: run `make deps` (tests/testbed/hugepages.sh) first, or retry when other DPDK tests are done", free)
	}
	dir, err := os.MkdirTemp("", "kbft-bin")
	if err != nil {
		return "tempdir: " + err.Error()
	}
	kbridgeBin = filepath.Join(dir, "kbridge")
	build := exec.Command("go", "build", "-o", kbridgeBin, "github.com/kbridge/kbridge/cmd/kbridge")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building kbridge: %v\n%s", err, out)
		os.Exit(1)
	}
	if out, err := exec.Command("ip", "netns", "add", nsName).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "ip netns add: %v: %s\n", err, out)
		os.Exit(1)
	}
	_ = exec.Command("ip", "-n", nsName, "link", "set", "lo", "up").Run()
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		_ = exec.Command("ip", "netns", "exec", nsName, "sysctl", "-qw", k+"=1").Run()
	}
	if err := ringtest.InitPrimary(prefix, 256); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = exec.Command("ip", "netns", "del", nsName).Run()
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

// port is an exception port this test process created, as an app would.
type port struct {
	t     *testing.T
	name  string
	pool  *ringtest.Pool
	port  *ringtest.Port
	freed bool
}

func newPort(t *testing.T) *port {
	t.Helper()
	needRoot(t)
	seqMu.Lock()
	seq++
	n := seq
	seqMu.Unlock()
	p := &port{t: t, name: fmt.Sprintf("kbft%d", n)}
	var err error
	if p.pool, err = ringtest.NewPool(fmt.Sprintf("kbft_pool%d", n), 2047); err != nil {
		t.Fatal(err)
	}
	if p.port, err = ringtest.NewPort(p.name, 1, 1024, p.pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.freed {
			p.free()
		}
		if n := p.pool.InUse(); n != 0 {
			t.Errorf("mbuf leak: %d mbufs of the pool still in use after the port was freed", n)
		}
	})
	return p
}

// free frees the port as the app's kbridge_port_free() does and returns how
// long it took (it waits for a running kbridge to let go).
func (p *port) free() time.Duration {
	start := time.Now()
	p.port.Free()
	p.freed = true
	return time.Since(start)
}

// kbridge is one kbridge process serving a port, its TAP in the namespace.
type kbridge struct {
	t      *testing.T
	ifname string
	sock   string
	cfg    string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan error
	err    error
	done   bool
}

var kbSeq int

// newKbridge writes a configuration for port p with its own interface and
// control socket, and starts kbridge with env added to its environment.
func newKbridge(t *testing.T, p *port, env ...string) *kbridge {
	t.Helper()
	seqMu.Lock()
	kbSeq++
	n := kbSeq
	seqMu.Unlock()
	k := &kbridge{t: t, ifname: fmt.Sprintf("kbft%dk%d", n, os.Getpid()%1000)}
	dir := t.TempDir()
	k.sock = filepath.Join(dir, "kbridge.sock")
	k.cfg = filepath.Join(dir, "kbridge.yaml")
	yaml := fmt.Sprintf("dpdk:\n  file_prefix: %s\n  wait: 2s\nport: %s\ninterface:\n  name: %s\n  mtu: 1500\nstats:\n  socket: %s\n  metrics: \"\"\n",
		prefix, p.name, k.ifname, k.sock)
	if err := os.WriteFile(k.cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	k.out = &syncBuffer{}
	k.cmd = exec.Command("ip", "netns", "exec", nsName, kbridgeBin, "run", "--config", k.cfg)
	k.cmd.Env = append(os.Environ(), env...)
	k.cmd.Stdout, k.cmd.Stderr = k.out, k.out
	if err := k.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k.exited = make(chan error, 1)
	go func() { k.exited <- k.cmd.Wait() }()
	t.Cleanup(func() { k.stop(false) })
	return k
}

// pid is kbridge's pid: `ip netns exec` execs it in place.
func (k *kbridge) pid() int { return k.cmd.Process.Pid }

// ready waits until kbridge's control socket answers.
func (k *kbridge) ready() {
	k.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := daemon.ReadStatus(k.sock); err == nil {
			return
		}
		if k.exitedWithin(20 * time.Millisecond) {
			k.t.Fatalf("kbridge exited at start-up: %v\n%s", k.err, k.out)
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("kbridge did not answer on %s within 20s\n%s", k.sock, k.out)
		}
	}
}

// exitedWithin reports whether kbridge exited, waiting at most d.
func (k *kbridge) exitedWithin(d time.Duration) bool {
	if k.done {
		return true
	}
	select {
	case k.err = <-k.exited:
		k.done = true
		return true
	case <-time.After(d):
		return false
	}
}

// exitCode is kbridge's exit status once it exited; -1 when a signal
// ended it.
func (k *kbridge) exitCode() int {
	var exit *exec.ExitError
	if k.err == nil {
		return 0
	}
	if errors.As(k.err, &exit) {
		return exit.ExitCode()
	}
	return -2
}

// stop sends SIGTERM (to the pid this test started) and, with check, wants
// a clean exit.
func (k *kbridge) stop(check bool) {
	if k.done {
		return
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	if !k.exitedWithin(15 * time.Second) {
		_ = k.cmd.Process.Kill()
		k.exitedWithin(5 * time.Second)
		k.t.Errorf("kbridge ignored SIGTERM for 15s\n%s", k.out)
		return
	}
	if check && k.err != nil {
		k.t.Errorf("kbridge exited with %v after SIGTERM\n%s", k.err, k.out)
	}
}

// kill sends SIGKILL and waits for the exit.
func (k *kbridge) kill() {
	k.t.Helper()
	if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		k.t.Fatal(err)
	}
	if !k.exitedWithin(10 * time.Second) {
		k.t.Fatal("kbridge survived SIGKILL for 10s")
	}
}

func (k *kbridge) status() daemon.Queue {
	k.t.Helper()
	st, err := daemon.ReadStatus(k.sock)
	if err != nil {
		k.t.Fatalf("%v\n%s", err, k.out)
	}
	return st.Queues[0]
}

// waitLog waits until kbridge's output holds s.
func (k *kbridge) waitLog(s string, timeout time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(k.out.String(), s) {
		if time.Now().After(deadline) {
			k.t.Fatalf("kbridge did not say %q within %v:\n%s", s, timeout, k.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// send transmits n test frames on kbridge's interface (as the kernel would):
// they leave through the TAP to kbridge, which hands them to the app.
func (k *kbridge) send(n int) {
	k.t.Helper()
	err := inNS(func() error {
		l, err := netlink.LinkByName(k.ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(testEthTyp)))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Protocol: htons(testEthTyp), Halen: 6}
		for i := 0; i < n; i++ {
			f := testFrame(100, uint32(i))
			copy(to.Addr[:], f[:6])
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		k.t.Fatal(err)
	}
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

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// testFrame builds an Ethernet frame of n bytes of the test ethertype.
func testFrame(n int, seq uint32) []byte {
	f := make([]byte, max(n, 18))
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 0x01})
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0x02})
	binary.BigEndian.PutUint16(f[12:14], testEthTyp)
	binary.BigEndian.PutUint32(f[14:18], seq)
	return f[:n]
}

func frames(n int) [][]byte {
	var fs [][]byte
	for i := 0; i < n; i++ {
		fs = append(fs, testFrame(100, uint32(i)))
	}
	return fs
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for the writer (exec's copier) and the
// test reading it at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

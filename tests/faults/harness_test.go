// Package faults checks what happens around a crash or a misuse of the
// exception port: a second kbridge on a served port, a kbridge killed with
// mbufs in flight, the app freeing the port under a running kbridge. Like
// tests/integration it runs the real kbridge binary as a DPDK secondary of
// this test process (package ringtest), with its TAP in a network namespace
// the tests create. Root only.
package faults

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
)

const testEthTyp = dpdkbed.EthType

// env is this test binary's DPDK primary, namespace and kbridge binary
// (tests/dpdkbed); the names below are its parts, as the tests use them.
var (
	env        *dpdkbed.Env
	skipReason string
	kbridgeBin string
	prefix     string
	nsName     string
)

func TestMain(m *testing.M) {
	flag.Parse()
	env = dpdkbed.Setup("kbft")
	skipReason, kbridgeBin, prefix, nsName = env.Skip, env.Bin, env.Prefix, env.NS
	if skipReason != "" {
		fmt.Fprintln(os.Stderr, "faults: skipped:", skipReason)
	}
	code := m.Run()
	env.Teardown()
	os.Exit(code)
}

func needRoot(t *testing.T) { t.Helper(); env.NeedRoot(t) }

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
	n := env.Next()
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

var (
	kbSeq   int
	kbSeqMu sync.Mutex
)

// newKbridge writes a configuration for port p with its own interface and
// control socket, and starts kbridge with env added to its environment.
func newKbridge(t *testing.T, p *port, env ...string) *kbridge {
	t.Helper()
	kbSeqMu.Lock()
	kbSeq++
	n := kbSeq
	kbSeqMu.Unlock()
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

func inNS(f func() error) error { return dpdkbed.InNS(nsName, f) }

var (
	htons     = dpdkbed.Htons
	testFrame = dpdkbed.TestFrame
)

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

type syncBuffer = dpdkbed.SyncBuffer

// Package faults checks what happens around a crash or a misuse of the
// exception port: a second kbridge on a served port, a kbridge killed with
// mbufs in flight, the app freeing the port under a running kbridge. Like
// tests/integration it runs the real kbridge binary as a DPDK secondary of
// this test process (package ringtest), with its TAP in a network namespace
// the tests create. Root only.
package faults

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
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
	return newPortPool(t, func(name string) (*ringtest.Pool, error) { return ringtest.NewPool(name, 2047) })
}

// newPortPool is newPort with the app's pool made by pool.
func newPortPool(t *testing.T, pool func(name string) (*ringtest.Pool, error)) *port {
	t.Helper()
	needRoot(t)
	n := env.Next()
	p := &port{t: t, name: fmt.Sprintf("kbft%d", n)}
	var err error
	if p.pool, err = pool(fmt.Sprintf("kbft_pool%d", n)); err != nil {
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
	*harness.Proc
	t      *testing.T
	ifname string
	sock   string
	cfg    string
}

var (
	kbSeq   int
	kbSeqMu sync.Mutex
)

// newKbridge writes a configuration for port p with its own interface and
// control socket, and starts kbridge with extra added to its environment.
func newKbridge(t *testing.T, p *port, extra ...string) *kbridge {
	t.Helper()
	kbSeqMu.Lock()
	kbSeq++
	n := kbSeq
	kbSeqMu.Unlock()
	return startKbridge(t, dpdkbed.Config{Prefix: prefix, Port: p.name, Ifname: fmt.Sprintf("kbft%dk%d", n, os.Getpid()%1000),
		DPDK: "  wait: 2s\n", Iface: "  mtu: 1500\n"}, extra...)
}

// startKbridge writes c (its socket in a directory of the test's) and starts
// kbridge on it with extra added to its environment.
func startKbridge(t *testing.T, c dpdkbed.Config, extra ...string) *kbridge {
	t.Helper()
	dir := t.TempDir()
	c.Sock = filepath.Join(dir, "kbridge.sock")
	k := &kbridge{t: t, ifname: c.Ifname, sock: c.Sock, cfg: filepath.Join(dir, "kbridge.yaml")}
	c.Write(t, k.cfg)
	k.Proc = env.StartKbridge(t, k.cfg, extra...)
	return k
}

// ready waits until kbridge's control socket answers.
func (k *kbridge) ready() {
	k.t.Helper()
	dpdkbed.WaitServing(k.t, k.Proc, k.sock)
}

func (k *kbridge) status() daemon.Queue {
	k.t.Helper()
	st, err := daemon.ReadStatus(k.sock)
	if err != nil {
		k.t.Fatalf("%v\n%s", err, k.Log)
	}
	return st.Queues[0]
}

// send transmits n test frames on kbridge's interface (as the kernel would):
// they leave through the TAP to kbridge, which hands them to the app.
func (k *kbridge) send(n int) { k.t.Helper(); k.sendSized(n, 100) }

// sendSized is send with test frames of size bytes.
func (k *kbridge) sendSized(n, size int) {
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
			f := testFrame(size, uint32(i))
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

func inNS(f func() error) error { return harness.InNS(nsName, f) }

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
	harness.WaitUntil(t, what, timeout, cond)
}

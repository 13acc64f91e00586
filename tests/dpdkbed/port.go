package dpdkbed

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tap/taptest"
	"github.com/kbridge/kbridge/tests/harness"
)

// The pieces below are for tests that drive a port and its kbridge apart,
// unlike a Bed: kill one kbridge and start the next on the same port, free
// the port under a running kbridge, serve a port the app made elsewhere.

// Main is a DPDK test package's TestMain after flag parsing: Setup(name)
// into *env, the tests, Teardown. It returns the exit code.
func Main(m *testing.M, name string, env **Env) int {
	taptest.Main() // this binary started again as taptest's attacker
	flag.Parse()
	e := Setup(name)
	*env = e
	if e.Skip != "" {
		fmt.Fprintf(os.Stderr, "%s: skipped: %s\n", name, e.Skip)
	}
	code := m.Run()
	e.Teardown()
	return code
}

// Port is an exception port the test process created, as an app would.
type Port struct {
	T     *testing.T
	Name  string
	Pool  *ringtest.Pool
	Port  *ringtest.Port
	freed bool
}

// NewPort makes a pool of 2047 mbufs and a port on it. Cleanup frees the
// port unless the test did, and checks that no mbuf of the pool is in use.
func (e *Env) NewPort(t *testing.T) *Port {
	t.Helper()
	return e.NewPortPool(t, func(name string) (*ringtest.Pool, error) { return ringtest.NewPool(name, 2047) })
}

// NewPortPool is NewPort with the app's pool made by pool.
func (e *Env) NewPortPool(t *testing.T, pool func(name string) (*ringtest.Pool, error)) *Port {
	t.Helper()
	e.NeedRoot(t)
	n := e.Next()
	p := &Port{T: t, Name: fmt.Sprintf("%s%d", e.base, n)}
	var err error
	if p.Pool, err = pool(fmt.Sprintf("%s_pool%d", e.base, n)); err != nil {
		t.Fatal(err)
	}
	if p.Port, err = ringtest.NewPort(p.Name, 1, 1024, p.Pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.freed {
			p.Free()
		}
		if n := p.Pool.InUse(); n != 0 {
			t.Errorf("mbuf leak: %d mbufs of the pool still in use after the port was freed", n)
		}
		if p.freed {
			p.Pool.Free()
		}
	})
	return p
}

// Free frees the port as the app's kbridge_port_free() does and returns how
// long it took (it waits for a running kbridge to let go); a refusal fails
// the test.
func (p *Port) Free() time.Duration {
	p.T.Helper()
	took, err := p.TryFree()
	if err != nil {
		p.T.Errorf("after %v: %v", took, err)
	}
	return took
}

// TryFree is Free that returns kbridge_port_free's refusal (an error
// matching unix.EBUSY while the owning kbridge runs) instead of failing.
func (p *Port) TryFree() (time.Duration, error) {
	start := time.Now()
	err := p.Port.Free()
	if err == nil {
		p.freed = true
	}
	return time.Since(start), err
}

// Kbridge is one kbridge process serving a port, its TAP in the Env's
// namespace.
type Kbridge struct {
	*harness.Proc
	T      *testing.T
	Env    *Env
	Ifname string
	Sock   string
	Cfg    string
}

// PortConfig is the configuration of a kbridge for port p with an
// interface of its own (Sock is the caller's to set).
func (e *Env) PortConfig(p *Port) Config {
	return Config{Prefix: e.Prefix, Port: p.Name, Ifname: fmt.Sprintf("%s%dk%d", e.base, e.Next(), os.Getpid()%1000),
		DPDK: "  wait: 2s\n", Iface: "  mtu: 1500\n"}
}

// NewKbridge starts kbridge on PortConfig(p) with extra added to its
// environment.
func (e *Env) NewKbridge(t *testing.T, p *Port, extra ...string) *Kbridge {
	t.Helper()
	return e.StartKbridgeConfig(t, e.PortConfig(p), extra...)
}

// StartKbridgeConfig writes c (its socket in a directory of the test's) and
// starts kbridge on it with extra added to its environment.
func (e *Env) StartKbridgeConfig(t *testing.T, c Config, extra ...string) *Kbridge {
	t.Helper()
	return e.StartKbridgeConfigBin(t, e.Bin, c, extra...)
}

// StartKbridgeConfigBin is StartKbridgeConfig with kbridge binary bin (a
// test build, say).
func (e *Env) StartKbridgeConfigBin(t *testing.T, bin string, c Config, extra ...string) *Kbridge {
	t.Helper()
	dir := t.TempDir()
	c.Sock = filepath.Join(dir, "kbridge.sock")
	k := &Kbridge{T: t, Env: e, Ifname: c.Ifname, Sock: c.Sock, Cfg: filepath.Join(dir, "kbridge.yaml")}
	c.Write(t, k.Cfg)
	k.Proc = e.StartKbridgeBin(t, bin, k.Cfg, extra...)
	return k
}

// Ready waits until kbridge's control socket answers.
func (k *Kbridge) Ready() {
	k.T.Helper()
	WaitServing(k.T, k.Proc, k.Sock)
}

// Status reads queue 0's counters from the control socket.
func (k *Kbridge) Status() daemon.Queue {
	k.T.Helper()
	return queue0(k.T, k.Sock, k.Log.String())
}

// Send transmits n test frames on kbridge's interface (as the kernel would):
// they leave through the TAP to kbridge, which hands them to the app.
func (k *Kbridge) Send(n int) { k.T.Helper(); k.SendSized(n, 100) }

// SendSized is Send with test frames of size bytes.
func (k *Kbridge) SendSized(n, size int) {
	k.T.Helper()
	err := InNS(k.Env.NS, func() error {
		l, err := netlink.LinkByName(k.Ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(Htons(EthType)))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Protocol: Htons(EthType), Halen: 6}
		for i := 0; i < n; i++ {
			f := TestFrame(size, uint32(i))
			copy(to.Addr[:], f[:6])
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		k.T.Fatal(err)
	}
}

// Link looks interface name up in the Env's namespace.
func (e *Env) Link(name string) (netlink.Link, error) {
	var link netlink.Link
	err := InNS(e.NS, func() (err error) {
		link, err = netlink.LinkByName(name)
		return err
	})
	return link, err
}

// Frames returns n 100-byte test frames numbered from 0.
func Frames(n int) [][]byte {
	var fs [][]byte
	for i := 0; i < n; i++ {
		fs = append(fs, TestFrame(100, uint32(i)))
	}
	return fs
}

// Package faults puts a running kbridge through faults from outside: this
// test process is the DPDK primary (package ringtest) and the real kbridge
// binary its secondary, with its TAP in a network namespace of its own.
// Root only; the tests skip otherwise.
package faults

// The kernel-interface faults' harness. Every identifier here starts with
// kf, and every namespace, port and interface with kbkf, so that other
// files of this package can bring their own.

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

const kfEthType = 0x88b5 // IEEE local experimental: the kernel ignores it

var (
	kfOnce       sync.Once
	kfSkipReason string
	kfBin        string
	kfPrefix     string // TestMain's file prefix
	kfSeq        int
	kfSeqMu      sync.Mutex
)

// kfNeedRoot skips the test unless this process can be a DPDK primary, and
// makes it one (once): builds kbridge and starts EAL.
func kfNeedRoot(t *testing.T) {
	t.Helper()
	kfOnce.Do(func() { kfSkipReason = kfSetup() })
	if kfSkipReason != "" {
		t.Skip(kfSkipReason)
	}
}

// kfSetup reuses the DPDK primary TestMain started (one process can be only
// one primary): these tests need what the others need.
func kfSetup() string {
	if skipReason != "" {
		return skipReason
	}
	kfPrefix = prefix
	return ""
}

// kfBed is one kbridge bridging a fresh port to a TAP in a namespace of
// its own.
type kfBed struct {
	t      *testing.T
	pool   *ringtest.Pool
	port   *ringtest.Port
	ns     string
	ifname string
	sock   string
	cfg    string
	cmd    *exec.Cmd
	out    *kfSyncBuffer
	exited chan error
}

type kfSyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *kfSyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *kfSyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// kfNewBed starts kbridge with the generated configuration plus yaml (an
// interface: section's keys, indented by two spaces, go in ifaceYAML).
func kfNewBed(t *testing.T, ifaceYAML, yaml string) *kfBed {
	t.Helper()
	kfNeedRoot(t)
	kfBin = filepath.Join(t.TempDir(), "kbridge") // go build's cache makes this quick
	if out, err := exec.Command("go", "build", "-o", kfBin, "github.com/kbridge/kbridge/cmd/kbridge").CombinedOutput(); err != nil {
		t.Fatalf("building kbridge: %v\n%s", err, out)
	}
	kfSeqMu.Lock()
	kfSeq++
	n := kfSeq
	kfSeqMu.Unlock()
	b := &kfBed{t: t, ns: fmt.Sprintf("kbkf-%d-%d", os.Getpid(), n), ifname: fmt.Sprintf("kbkf%d", n)}
	_ = exec.Command("ip", "netns", "del", b.ns).Run()
	if out, err := exec.Command("ip", "netns", "add", b.ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", b.ns).Run() })
	_ = exec.Command("ip", "-n", b.ns, "link", "set", "lo", "up").Run()
	for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		_ = exec.Command("ip", "netns", "exec", b.ns, "sysctl", "-qw", k+"=1").Run()
	}
	var err error
	if b.pool, err = ringtest.NewPool(fmt.Sprintf("kbkf_pool%d", n), 4095); err != nil {
		t.Fatal(err)
	}
	if b.port, err = ringtest.NewPort(fmt.Sprintf("kbkf%d", n), 1, 1024, b.pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.port.Free()
		if n := b.pool.InUse(); n != 0 {
			t.Errorf("mbuf leak: %d mbufs of the pool still in use after kbridge stopped", n)
		}
	})
	dir := t.TempDir()
	b.sock = filepath.Join(dir, "kbridge.sock")
	b.cfg = filepath.Join(dir, "kbridge.yaml")
	cfg := fmt.Sprintf(`dpdk:
  file_prefix: %s
port: kbkf%d
interface:
  name: %s
%sstats:
  socket: %s
  metrics: ""
`, kfPrefix, n, b.ifname, ifaceYAML, b.sock) + yaml
	if err := os.WriteFile(b.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	b.start()
	return b
}

func (b *kfBed) start() {
	b.t.Helper()
	b.out = &kfSyncBuffer{}
	b.cmd = exec.Command("ip", "netns", "exec", b.ns, kfBin, "run", "--config", b.cfg)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.exited = make(chan error, 1)
	go func() { b.exited <- b.cmd.Wait() }()
	b.t.Cleanup(func() { b.stop() })
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

// stop sends SIGTERM and checks a clean exit that leaves no interface.
func (b *kfBed) stop() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	cmd := b.cmd
	b.cmd = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-b.exited:
		if err != nil {
			b.t.Errorf("kbridge exited with %v after SIGTERM\n%s", err, b.out)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		b.t.Errorf("kbridge ignored SIGTERM for 15s\n%s", b.out)
	}
	if _, err := b.link(); err == nil {
		b.t.Errorf("interface %s still exists after kbridge stopped", b.ifname)
	}
}

func (b *kfBed) status() daemon.Queue {
	b.t.Helper()
	st, err := daemon.ReadStatus(b.sock)
	if err != nil {
		b.t.Fatalf("%v\n%s", err, b.out)
	}
	return st.Queues[0]
}

// ip runs ip(8) in the bed's namespace.
func (b *kfBed) ip(args ...string) {
	b.t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", b.ns}, args...)...).CombinedOutput(); err != nil {
		b.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// inNS runs f on a thread inside the bed's namespace; the thread dies after.
func (b *kfBed) inNS(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.GetFromName(b.ns)
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

func (b *kfBed) link() (netlink.Link, error) {
	var l netlink.Link
	err := b.inNS(func() (err error) {
		l, err = netlink.LinkByName(b.ifname)
		return err
	})
	return l, err
}

// routes lists the IPv4 routes through the interface as "dst via gw".
func (b *kfBed) routes() []string {
	var out []string
	_ = b.inNS(func() error {
		l, err := netlink.LinkByName(b.ifname)
		if err != nil {
			return err
		}
		rs, err := netlink.RouteList(l, netlink.FAMILY_V4)
		for _, r := range rs {
			if r.Dst == nil {
				continue
			}
			s := r.Dst.String()
			if r.Gw != nil {
				s += " via " + r.Gw.String()
			}
			out = append(out, s)
		}
		return err
	})
	return out
}

// addrs lists the interface's IPv4 addresses with prefix length.
func (b *kfBed) addrs() []string {
	var out []string
	_ = b.inNS(func() error {
		l, err := netlink.LinkByName(b.ifname)
		if err != nil {
			return err
		}
		as, err := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range as {
			out = append(out, a.IPNet.String())
		}
		return err
	})
	return out
}

// kfPacketSocket is an AF_PACKET socket on the bed's interface: it sees what
// kbridge writes to the TAP and sends what the kernel transmits on it.
type kfPacketSocket struct {
	fd      int
	ifindex int
}

func (b *kfBed) packetSocket() *kfPacketSocket {
	b.t.Helper()
	var ps kfPacketSocket
	err := b.inNS(func() error {
		l, err := netlink.LinkByName(b.ifname)
		if err != nil {
			return err
		}
		ps.ifindex = l.Attrs().Index
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(kfHtons(kfEthType)))
		if err != nil {
			return err
		}
		ps.fd = fd
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: kfHtons(kfEthType), Ifindex: ps.ifindex})
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { unix.Close(ps.fd) })
	return &ps
}

// receive returns the test frames that arrive within timeout, stopping
// once want have arrived.
func (ps *kfPacketSocket) receive(want int, timeout time.Duration) [][]byte {
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
		if n >= 14 && binary.BigEndian.Uint16(buf[12:14]) == kfEthType {
			got = append(got, append([]byte(nil), buf[:n]...))
		}
	}
	return got
}

// send transmits frames on the interface: they leave through the TAP to
// kbridge, which hands them to the app.
func (ps *kfPacketSocket) send(t *testing.T, frames [][]byte) {
	t.Helper()
	for _, f := range frames {
		to := &unix.SockaddrLinklayer{Ifindex: ps.ifindex, Protocol: kfHtons(kfEthType), Halen: 6}
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

func kfHtons(v uint16) uint16 { return v<<8 | v>>8 }

// kfFrame is an Ethernet frame of n bytes of the test ethertype whose
// payload starts with seq.
func kfFrame(n int, seq uint32) []byte {
	f := make([]byte, max(n, 18))
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 0x01})
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0x02})
	binary.BigEndian.PutUint16(f[12:14], kfEthType)
	binary.BigEndian.PutUint32(f[14:18], seq)
	for i := 18; i < n; i++ {
		f[i] = byte(i*31) ^ byte(seq)
	}
	return f[:n]
}

// kfOnlyTest keeps the frames of the test ethertype.
func kfOnlyTest(frames [][]byte) [][]byte {
	var out [][]byte
	for _, f := range frames {
		if len(f) >= 14 && binary.BigEndian.Uint16(f[12:14]) == kfEthType {
			out = append(out, f)
		}
	}
	return out
}

func kfWaitUntil(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

package xdp

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestExceptionPath: ping and TCP from the remote host reach kb0 through the
// NIC's redirect, and the replies leave through the NIC again.
func TestExceptionPath(t *testing.T) {
	newBed(t)
	p := attachBed(t, bedConfig())
	if p.Mode() != ModeNative || p.ReturnMode() != ModeNative {
		t.Errorf("modes %q/%q, want native on veth", p.Mode(), p.ReturnMode())
	}
	if err := pingFromRemote(5, kb0IP); err != nil {
		t.Fatal(err)
	}
	tcpEcho(t, 8<<20)

	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", s)
	// 5 echo requests plus ARP plus the TCP segments each way.
	if s.Exception.Packets < 5+1000 || s.Returned.Packets < 5+100 {
		t.Errorf("exception %d, returned %d: too few for 5 pings and 8 MiB of TCP", s.Exception.Packets, s.Returned.Packets)
	}
	if s.FastPath.Packets+s.XSKMiss.Packets+s.Drop.Packets+s.ParseError.Packets != 0 {
		t.Errorf("unexpected counters: %+v", s)
	}
}

// TestExceptionPathGeneric: the same through generic (SKB) XDP.
func TestExceptionPathGeneric(t *testing.T) {
	newBed(t)
	cfg := bedConfig()
	cfg.Mode = ModeGeneric
	p := attachBed(t, cfg)
	if p.Mode() != ModeGeneric || p.ReturnMode() != ModeGeneric {
		t.Errorf("modes %q/%q, want generic", p.Mode(), p.ReturnMode())
	}
	if err := pingFromRemote(3, kb0IP); err != nil {
		t.Fatal(err)
	}
	tcpEcho(t, 4<<20)
}

// TestNAPIByXDP: kb0 given NAPI by an XDP_PASS program instead of GRO.
func TestNAPIByXDP(t *testing.T) {
	newBed(t)
	cfg := bedConfig()
	cfg.NAPI = NAPIXDP
	attachBed(t, cfg)
	if err := pingFromRemote(3, kb0IP); err != nil {
		t.Fatal(err)
	}
	tcpEcho(t, 4<<20)
}

// TestFastPathNotSeenByKernel: UDP to the fast-path port never reaches kb0
// (no socket is bound, xsk_fallback is drop); UDP to the next port does.
func TestFastPathNotSeenByKernel(t *testing.T) {
	newBed(t)
	p := attachBed(t, bedConfig())
	fast, slow := udpListen(t, 4789), udpListen(t, 4790)
	if err := pingFromRemote(1, kb0IP); err != nil { // resolve ARP first
		t.Fatal(err)
	}
	before, _ := p.Stats()
	udpSend(t, kb0IP, 4789, 20)
	udpSend(t, kb0IP, 4790, 20)
	if n := udpCount(slow, 500*time.Millisecond); n != 20 {
		t.Errorf("exception UDP: kb0 got %d of 20", n)
	}
	if n := udpCount(fast, 200*time.Millisecond); n != 0 {
		t.Errorf("fast-path UDP: kb0 got %d datagrams, want 0", n)
	}
	after, _ := p.Stats()
	if d := after.XSKMiss.Packets - before.XSKMiss.Packets; d != 20 {
		t.Errorf("xsk_miss grew by %d, want 20", d)
	}
	if d := after.Drop.Packets - before.Drop.Packets; d != 20 {
		t.Errorf("drop grew by %d, want 20", d)
	}
	if d := after.Exception.Packets - before.Exception.Packets; d < 20 {
		t.Errorf("exception grew by %d, want >= 20", d)
	}

	// Rules change at run time: now 4790 is fast path too.
	if err := p.SetRules([]Rule{{Proto: "udp", Ports: "4789-4790"}}, FallbackDrop); err != nil {
		t.Fatal(err)
	}
	udpSend(t, kb0IP, 4790, 10)
	if n := udpCount(slow, 300*time.Millisecond); n != 0 {
		t.Errorf("after SetRules: kb0 got %d datagrams on 4790, want 0", n)
	}
}

// TestAFXDPDelivery binds a real AF_XDP socket to the NIC's queue 0 and
// checks that fast-path frames arrive in it, and only those.
func TestAFXDPDelivery(t *testing.T) {
	newBed(t)
	p := attachBed(t, bedConfig())
	nic, err := linkIn(nsDUT, nicName)
	if err != nil {
		t.Fatal(err)
	}
	var xs *xskSocket
	if err := inNS(nsDUT, func() (err error) {
		xs, err = openXSK(nic.Attrs().Index, 0)
		return err
	}); err != nil {
		t.Fatalf("AF_XDP socket: %v", err)
	}
	defer xs.Close()
	if err := p.XSKMap().Put(uint32(0), uint32(xs.fd)); err != nil {
		t.Fatalf("xsks_map[0] = socket: %v", err)
	}
	slow := udpListen(t, 4790)
	if err := pingFromRemote(1, kb0IP); err != nil {
		t.Fatal(err)
	}
	before, _ := p.Stats()
	udpSend(t, kb0IP, 4789, 10)
	udpSend(t, kb0IP, 4790, 5)

	frames := xs.receive(500 * time.Millisecond)
	var ours int
	for _, f := range frames {
		if bytes.Contains(f, []byte("kbx 4789 ")) {
			ours++
		}
		if bytes.Contains(f, []byte("kbx 4790 ")) {
			t.Errorf("exception frame in the AF_XDP socket: %q", f)
		}
	}
	if ours != 10 {
		t.Errorf("AF_XDP socket got %d of 10 fast-path datagrams (%d frames)", ours, len(frames))
	}
	if n := udpCount(slow, 300*time.Millisecond); n != 5 {
		t.Errorf("kb0 got %d of 5 exception datagrams", n)
	}
	after, _ := p.Stats()
	if d := after.FastPath.Packets - before.FastPath.Packets; d != 10 {
		t.Errorf("fast_path grew by %d, want 10", d)
	}
	if d := after.XSKMiss.Packets - before.XSKMiss.Packets; d != 0 {
		t.Errorf("xsk_miss grew by %d, want 0", d)
	}
}

// TestIPv6 uses link-local addresses (the only IPv6 addresses the bed may
// use): ping6 takes the exception path, UDP to the fast port does not reach
// the kernel.
func TestIPv6(t *testing.T) {
	newBed(t)
	attachBed(t, bedConfig())
	kb0LL := waitLinkLocal(t, nsDUT, "kb0")
	waitLinkLocal(t, nsRemote, wireName)
	if err := pingFromRemote(3, "-6", kb0LL+"%"+wireName); err != nil {
		t.Fatal(err)
	}
	fast := udpListen(t, 4789)
	udpSend(t, kb0LL+"%"+wireName, 4789, 5)
	if n := udpCount(fast, 300*time.Millisecond); n != 0 {
		t.Errorf("fast-path UDP over IPv6 reached kb0: %d datagrams", n)
	}
}

// waitLinkLocal waits until the interface's link-local address has passed
// duplicate address detection and returns it.
func waitLinkLocal(t *testing.T, ns, ifname string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var addrs []netlink.Addr
		inNS(ns, func() error {
			l, err := netlink.LinkByName(ifname)
			if err != nil {
				return err
			}
			addrs, err = netlink.AddrList(l, netlink.FAMILY_V6)
			return err
		})
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&0x40 == 0 { // IFA_F_TENTATIVE
				return a.IP.String()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s in %s: no usable link-local address", ifname, ns)
	return ""
}

// TestCloseLeavesNothing: no program on the NIC, no pins, no veth,
// promiscuous mode back off.
func TestCloseLeavesNothing(t *testing.T) {
	newBed(t)
	cfg := bedConfig()
	cfg.Promisc = true
	var p *Path
	if err := inNS(nsDUT, func() (err error) {
		p, err = Attach(cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	nic, _ := linkIn(nsDUT, nicName)
	if x := nic.Attrs().Xdp; x == nil || !x.Attached {
		t.Error("no XDP program on the NIC after Attach")
	}
	if nic.Attrs().Promisc == 0 {
		t.Error("NIC not promiscuous after Attach with promisc: true")
	}
	if _, err := os.Stat(bedPins + "/xsks_map"); err != nil {
		t.Errorf("xsks_map not pinned: %v", err)
	}
	if _, err := linkIn(nsDUT, "kb0"); err != nil {
		t.Errorf("kb0: %v", err)
	}

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	nic, _ = linkIn(nsDUT, nicName)
	if x := nic.Attrs().Xdp; x != nil && x.Attached {
		t.Errorf("XDP program id %d still on the NIC", x.ProgId)
	}
	if nic.Attrs().Promisc != 0 {
		t.Error("NIC still promiscuous")
	}
	if err := pinsGone(bedPins); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"kb0", "kb0-x"} {
		if err := linkGone(nsDUT, name); err != nil {
			t.Error(err)
		}
	}
	if _, err := p.Stats(); !errors.Is(err, ErrClosed) {
		t.Errorf("Stats after Close: %v, want ErrClosed", err)
	}
}

// TestBusy: a second Attach on the same NIC is refused and does not disturb
// the first.
func TestBusy(t *testing.T) {
	newBed(t)
	attachBed(t, bedConfig())
	cfg := bedConfig()
	cfg.Exception = "kb1"
	err := inNS(nsDUT, func() error {
		p, err := Attach(cfg)
		if err == nil {
			p.Close()
		}
		return err
	})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("second Attach: %v, want ErrBusy", err)
	}
	t.Log(err)
	if _, err := os.Stat(bedPins + "/stats"); err != nil {
		t.Errorf("first path's pins disturbed: %v", err)
	}
	if err := pingFromRemote(2, kb0IP); err != nil {
		t.Fatalf("first path broken: %v", err)
	}
}

// TestExistingInterfaceRefused: a kb0 that kbridge did not create is left
// alone.
func TestExistingInterfaceRefused(t *testing.T) {
	newBed(t)
	sh(t, "ip", "-n", nsDUT, "link", "add", "kb0", "type", "bridge")
	err := inNS(nsDUT, func() error {
		p, err := Attach(bedConfig())
		if err == nil {
			p.Close()
		}
		return err
	})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("Attach with a foreign kb0: %v, want ErrExists", err)
	}
	if _, err := linkIn(nsDUT, "kb0"); err != nil {
		t.Errorf("foreign kb0 removed: %v", err)
	}
	nic, _ := linkIn(nsDUT, nicName)
	if x := nic.Attrs().Xdp; x != nil && x.Attached {
		t.Error("program left on the NIC after a failed Attach")
	}
	if err := pinsGone(bedPins); err != nil {
		t.Error(err)
	}
}

// TestLeftoversRemoved simulates a crash: the links die with the process,
// the pins and the veth stay. The next Attach removes the pins, keeps the
// veth and works.
func TestLeftoversRemoved(t *testing.T) {
	newBed(t)
	var p *Path
	if err := inNS(nsDUT, func() (err error) {
		p, err = Attach(bedConfig())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	p.nicLink.Close()
	p.returnLink.Close()
	p.objs.Close()
	s, _ := os.ReadDir(bedPins)
	if len(s) == 0 {
		t.Fatal("crash simulation: no pins left to clean up")
	}
	p2 := attachBed(t, bedConfig())
	if err := pingFromRemote(2, kb0IP); err != nil {
		t.Fatal(err)
	}
	st, _ := p2.Stats()
	if st.Exception.Packets > 100 {
		t.Errorf("counters carried over from the crashed run: %+v", st)
	}
}

// TestAutoFallsBackToGeneric: a bridge device has no native XDP (and this
// kernel has no dummy module). Mode auto
// attaches generic with a warning; mode native fails with ErrNotSupported
// and leaves nothing behind.
func TestAutoFallsBackToGeneric(t *testing.T) {
	newBed(t)
	sh(t, "ip", "-n", nsDUT, "link", "add", "kbx-nonxdp", "type", "bridge")
	sh(t, "ip", "-n", nsDUT, "link", "set", "kbx-nonxdp", "up")
	cfg := Config{NIC: "kbx-nonxdp", PinPath: DefaultPinRoot + "/kbridge/kbx-nonxdp"}
	t.Cleanup(func() { removePins(cfg.PinPath); os.Remove(cfg.PinPath) })

	cfg.Mode = ModeNative
	err := inNS(nsDUT, func() error {
		p, err := Attach(cfg)
		if err == nil {
			p.Close()
		}
		return err
	})
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("native on a bridge: %v, want ErrNotSupported", err)
	}
	t.Log(err)
	if err := linkGone(nsDUT, "kb0"); err != nil {
		t.Errorf("after failed Attach: %v", err)
	}
	if err := pinsGone(cfg.PinPath); err != nil {
		t.Errorf("after failed Attach: %v", err)
	}

	cfg.Mode = ModeAuto
	p := attachBed(t, cfg)
	if p.Mode() != ModeGeneric || p.ReturnMode() != ModeGeneric {
		t.Errorf("auto on a bridge: modes %q/%q, want generic", p.Mode(), p.ReturnMode())
	}
	if w := p.Warnings(); len(w) == 0 || !strings.Contains(w[0], "generic") {
		t.Errorf("no generic-mode warning: %q", w)
	}
}

// TestBadRulesRefused: Attach refuses an invalid rule with an error that
// names the field and the value, before touching anything.
func TestBadRulesRefused(t *testing.T) {
	newBed(t)
	cfg := bedConfig()
	cfg.FastPath = []Rule{{Proto: "udp", Ports: "4789"}, {Proto: "tcp", Ports: "70000-80"}}
	err := inNS(nsDUT, func() error {
		p, err := Attach(cfg)
		if err == nil {
			p.Close()
		}
		return err
	})
	const want = `xdp.fast_path[1].ports: "70000-80": port out of range 1-65535`
	if !errors.Is(err, ErrInvalidConfig) || err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	if err := linkGone(nsDUT, "kb0"); err != nil {
		t.Error(err)
	}
	if err := pinsGone(bedPins); err != nil {
		t.Error(err)
	}
}

// TestMACDiffersSetsPromisc: a kb0 MAC other than the NIC's needs the NIC
// promiscuous; Close turns it off again.
func TestMACDiffersSetsPromisc(t *testing.T) {
	newBed(t)
	cfg := bedConfig()
	cfg.MAC = "02:00:00:77:00:02"
	p := attachBed(t, cfg)
	nic, _ := linkIn(nsDUT, nicName)
	if nic.Attrs().Promisc == 0 {
		t.Error("NIC not promiscuous with a different kb0 MAC")
	}
	kb0, _ := linkIn(nsDUT, "kb0")
	if got := kb0.Attrs().HardwareAddr.String(); got != cfg.MAC {
		t.Errorf("kb0 MAC %s, want %s", got, cfg.MAC)
	}
	if err := pingFromRemote(2, kb0IP); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	nic, _ = linkIn(nsDUT, nicName)
	if nic.Attrs().Promisc != 0 {
		t.Error("NIC still promiscuous after Close")
	}
}

// TestKb0Offloads: kb0 has tx checksum off and GRO on; the NIC's MAC.
func TestKb0Offloads(t *testing.T) {
	newBed(t)
	attachBed(t, bedConfig())
	out := sh(t, "ip", "netns", "exec", nsDUT, "ethtool", "-k", "kb0")
	for _, want := range []string{"tx-checksumming: off", "generic-receive-offload: on"} {
		if !strings.Contains(out, want) {
			t.Errorf("kb0 offloads: missing %q in\n%s", want, out)
		}
	}
	nic, _ := linkIn(nsDUT, nicName)
	kb0, _ := linkIn(nsDUT, "kb0")
	if !bytes.Equal(nic.Attrs().HardwareAddr, kb0.Attrs().HardwareAddr) {
		t.Errorf("kb0 MAC %s, want the NIC's %s", kb0.Attrs().HardwareAddr, nic.Attrs().HardwareAddr)
	}
	if got := fmt.Sprint(kb0.Attrs().Alias); got != aliasPrefix+nicName {
		t.Errorf("kb0 alias %q", got)
	}
}

// TestPinsInUseRefused: the pin path is per NIC name, but names repeat across
// network namespaces. A second Attach for another "kbx-nic" must not take
// over (or remove) the first one's pins.
func TestPinsInUseRefused(t *testing.T) {
	newBed(t)
	attachBed(t, bedConfig())
	sh(t, "ip", "netns", "add", nsDUT2)
	sh(t, "ip", "-n", nsDUT2, "link", "add", nicName, "type", "veth", "peer", "name", "kbx-wire2")
	err := inNS(nsDUT2, func() error {
		p, err := Attach(bedConfig())
		if err == nil {
			p.Close()
		}
		return err
	})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("Attach over pins in use: %v, want ErrBusy", err)
	}
	t.Log(err)
	if err := linkGone(nsDUT2, "kb0"); err != nil {
		t.Error(err)
	}
	if err := pingFromRemote(2, kb0IP); err != nil {
		t.Fatalf("first path broken: %v", err)
	}
}

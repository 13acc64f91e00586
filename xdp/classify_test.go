package xdp

import (
	"encoding/binary"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/kbridge/kbridge/xdp/xdpconfig"
)

// These tests run kbridge_steer on hand-made frames with BPF_PROG_TEST_RUN:
// no interfaces, no namespaces, but the real verifier and the real program.
// The fallback is "pass" and no AF_XDP socket exists, so a fast-path frame
// returns XDP_PASS and any other frame XDP_REDIRECT (to the exception veth).

type frameSpec struct {
	dmac     [6]byte
	vlan     bool
	dst      netip.Addr
	proto    byte
	dport    uint16
	ipOpts   bool // IPv4 header with one option word
	frag     uint16
	hopByHop bool // IPv6 hop-by-hop header before L4
	v6Frag   bool
	arp      bool
	cut      int // truncate to this many bytes
}

var testMAC = [6]byte{0x02, 0, 0, 0, 0, 0x01}

func (f frameSpec) bytes() []byte {
	b := append([]byte{}, f.dmac[:]...)
	b = append(b, 0x02, 0, 0, 0, 0, 0x99) // source MAC
	ethertype := func(t uint16) { b = binary.BigEndian.AppendUint16(b, t) }
	if f.vlan {
		ethertype(0x8100)
		b = append(b, 0x00, 0x07)
	}
	l4 := func(proto byte) []byte {
		switch proto {
		case xdpconfig.ProtoTCP:
			h := make([]byte, 20)
			binary.BigEndian.PutUint16(h[0:], 40000)
			binary.BigEndian.PutUint16(h[2:], f.dport)
			h[12] = 5 << 4
			return h
		case xdpconfig.ProtoUDP:
			h := make([]byte, 8)
			binary.BigEndian.PutUint16(h[0:], 40000)
			binary.BigEndian.PutUint16(h[2:], f.dport)
			binary.BigEndian.PutUint16(h[4:], 8)
			return h
		}
		return []byte{8, 0, 0, 0, 0, 0, 0, 0} // ICMP echo
	}
	switch {
	case f.arp:
		ethertype(0x0806)
		b = append(b, make([]byte, 28)...)
	case f.dst.Is4():
		ethertype(0x0800)
		ihl := 5
		if f.ipOpts {
			ihl = 6
		}
		h := make([]byte, ihl*4)
		h[0] = 0x40 | byte(ihl)
		binary.BigEndian.PutUint16(h[6:], f.frag)
		h[8] = 64
		h[9] = f.proto
		copy(h[12:], []byte{198, 19, 77, 1})
		d := f.dst.As4()
		copy(h[16:], d[:])
		b = append(b, h...)
		b = append(b, l4(f.proto)...)
	default:
		ethertype(0x86dd)
		h := make([]byte, 40)
		h[0] = 0x60
		h[6] = f.proto
		h[7] = 64
		d := f.dst.As16()
		copy(h[24:], d[:])
		b = append(b, h...)
		if f.hopByHop {
			b[len(b)-40+6] = 0
			b = append(b, f.proto, 0, 1, 4, 0, 0, 0, 0) // PadN option
		}
		if f.v6Frag {
			b[len(b)-40+6] = 44
			b = append(b, f.proto, 0, 0, 1, 0, 0, 0, 1) // M flag set
		}
		b = append(b, l4(f.proto)...)
	}
	if f.cut > 0 {
		b = b[:f.cut]
	}
	return b
}

func requireRootTest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("loads BPF programs (skipped with -short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads BPF programs")
	}
}

// loadUnpinned loads the object with pinning off, so tests leave no pins.
func loadUnpinned(t *testing.T) *steerObjects {
	t.Helper()
	requireRootTest(t)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	spec, err := loadSteer()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	var objs steerObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatalf("load (verifier): %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

func TestClassify(t *testing.T) {
	objs := loadUnpinned(t)
	for _, prog := range []*ebpf.Program{objs.KbridgeSteer, objs.KbridgeReturn} {
		if info, err := prog.Info(); err == nil {
			n, _ := info.VerifiedInstructions()
			t.Logf("%s: verifier processed %d instructions", info.Name, n)
		}
	}
	rules := []Rule{
		{Proto: "udp", Ports: "4789"},
		{Proto: "tcp", Ports: "5000-5010"},
		{Dst: "198.19.99.0/24"},
		{Proto: "tcp", Dst: "fe80::1234"},
		{DstMAC: "02:00:00:00:00:42"},
	}
	kc, err := compileRules(rules, FallbackPass)
	if err != nil {
		t.Fatal(err)
	}
	kc.ExceptionIfindex = 1 // lo: test runs do not transmit
	if err := objs.SteerConfig.Put(uint32(0), kc); err != nil {
		t.Fatal(err)
	}

	v4 := netip.MustParseAddr("198.19.77.2")
	v6 := netip.MustParseAddr("fe80::2")
	const fast, exc = 2, 4 // XDP_PASS, XDP_REDIRECT
	cases := []struct {
		name string
		f    frameSpec
		want uint32
	}{
		{"udp rule port", frameSpec{dst: v4, proto: xdpconfig.ProtoUDP, dport: 4789}, fast},
		{"udp other port", frameSpec{dst: v4, proto: xdpconfig.ProtoUDP, dport: 4790}, exc},
		{"tcp range low", frameSpec{dst: v4, proto: xdpconfig.ProtoTCP, dport: 5000}, fast},
		{"tcp range high", frameSpec{dst: v4, proto: xdpconfig.ProtoTCP, dport: 5010}, fast},
		{"tcp above range", frameSpec{dst: v4, proto: xdpconfig.ProtoTCP, dport: 5011}, exc},
		{"udp in tcp range", frameSpec{dst: v4, proto: xdpconfig.ProtoUDP, dport: 5005}, exc},
		{"tcp on udp port", frameSpec{dst: v4, proto: xdpconfig.ProtoTCP, dport: 4789}, exc},
		{"icmp to fast prefix", frameSpec{dst: netip.MustParseAddr("198.19.99.7"), proto: 1}, fast},
		{"icmp next to fast prefix", frameSpec{dst: netip.MustParseAddr("198.19.98.7"), proto: 1}, exc},
		{"vlan udp rule port", frameSpec{vlan: true, dst: v4, proto: xdpconfig.ProtoUDP, dport: 4789}, fast},
		{"ipv4 options", frameSpec{ipOpts: true, dst: v4, proto: xdpconfig.ProtoUDP, dport: 4789}, fast},
		{"first fragment", frameSpec{dst: v4, proto: xdpconfig.ProtoUDP, dport: 4789, frag: 0x2000}, exc},
		{"later fragment", frameSpec{dst: v4, proto: xdpconfig.ProtoUDP, dport: 4789, frag: 0x0010}, exc},
		{"fragment to fast prefix", frameSpec{dst: netip.MustParseAddr("198.19.99.7"), proto: xdpconfig.ProtoUDP, frag: 0x2000}, fast},
		{"ipv6 udp rule port", frameSpec{dst: v6, proto: xdpconfig.ProtoUDP, dport: 4789}, fast},
		{"ipv6 tcp range after hop-by-hop", frameSpec{dst: v6, proto: xdpconfig.ProtoTCP, dport: 5001, hopByHop: true}, fast},
		{"ipv6 fragment", frameSpec{dst: v6, proto: xdpconfig.ProtoUDP, dport: 4789, v6Frag: true}, exc},
		{"ipv6 tcp to fast host", frameSpec{dst: netip.MustParseAddr("fe80::1234"), proto: xdpconfig.ProtoTCP, dport: 80}, fast},
		{"ipv6 udp to fast host", frameSpec{dst: netip.MustParseAddr("fe80::1234"), proto: xdpconfig.ProtoUDP, dport: 80}, exc},
		{"ipv6 tcp next to fast host", frameSpec{dst: netip.MustParseAddr("fe80::1235"), proto: xdpconfig.ProtoTCP, dport: 80}, exc},
		{"arp to fast mac", frameSpec{dmac: [6]byte{2, 0, 0, 0, 0, 0x42}, arp: true}, fast},
		{"arp broadcast", frameSpec{dmac: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, arp: true}, exc},
		{"truncated ipv4", frameSpec{dst: v4, proto: xdpconfig.ProtoUDP, dport: 4789, cut: 14 + 10}, exc},
		{"truncated udp", frameSpec{dst: v4, proto: xdpconfig.ProtoUDP, dport: 4789, cut: 14 + 20 + 3}, exc},
	}
	var wantFast uint64
	for _, c := range cases {
		if c.f.dmac == ([6]byte{}) {
			c.f.dmac = testMAC
		}
		ret, err := objs.KbridgeSteer.Run(&ebpf.RunOptions{Data: c.f.bytes()})
		if err != nil {
			t.Fatalf("%s: run: %v", c.name, err)
		}
		if ret != c.want {
			t.Errorf("%s: action %d, want %d", c.name, ret, c.want)
		}
		if c.want == fast {
			wantFast++
		}
	}

	p := &Path{objs: *objs}
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.XSKMiss.Packets != wantFast || s.Pass.Packets != wantFast {
		t.Errorf("xsk_miss %d, pass %d, want %d each", s.XSKMiss.Packets, s.Pass.Packets, wantFast)
	}
	if s.ParseError.Packets != 2 {
		t.Errorf("parse_error %d, want 2", s.ParseError.Packets)
	}
	if s.Exception.Packets != uint64(len(cases))-wantFast {
		t.Errorf("exception %d, want %d", s.Exception.Packets, uint64(len(cases))-wantFast)
	}
	if s.FastPath.Packets != 0 || s.Drop.Packets != 0 {
		t.Errorf("fast_path %d, drop %d, want 0", s.FastPath.Packets, s.Drop.Packets)
	}
}

// TestFallbacks checks the three xsk_fallback actions and the drop counted
// while no exception target is set.
func TestFallbacks(t *testing.T) {
	objs := loadUnpinned(t)
	fast := frameSpec{dmac: testMAC, dst: netip.MustParseAddr("198.19.77.2"), proto: xdpconfig.ProtoUDP, dport: 4789}.bytes()
	run := func() uint32 {
		ret, err := objs.KbridgeSteer.Run(&ebpf.RunOptions{Data: fast})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
	exception := uint32(0)
	set := func(fb Fallback) {
		kc, err := compileRules([]Rule{{Proto: "udp", Ports: "4789"}}, fb)
		if err != nil {
			t.Fatal(err)
		}
		kc.ExceptionIfindex = exception
		if err := objs.SteerConfig.Put(uint32(0), kc); err != nil {
			t.Fatal(err)
		}
	}
	set(FallbackException)
	if got := run(); got != 1 { // XDP_DROP: no exception target yet
		t.Errorf("exception fallback without exception ifindex: %d, want XDP_DROP", got)
	}
	exception = 1
	set(FallbackException)
	if got := run(); got != 4 {
		t.Errorf("exception fallback: %d, want XDP_REDIRECT", got)
	}
	set(FallbackDrop)
	if got := run(); got != 1 {
		t.Errorf("drop fallback: %d, want XDP_DROP", got)
	}
	set(FallbackPass)
	if got := run(); got != 2 {
		t.Errorf("pass fallback: %d, want XDP_PASS", got)
	}
	ret, err := objs.KbridgeReturn.Run(&ebpf.RunOptions{Data: fast})
	if err != nil || ret != 1 {
		t.Errorf("return without egress ifindex: %d, %v; want XDP_DROP", ret, err)
	}
}

package ring

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tap/vnet"
)

// fullFrame is s.build()'s frame as a sender puts it on the wire: its TCP
// checksum complete.
func fullFrame(s superSpec) []byte {
	_, f := s.build()
	l2, l3, l4 := 14, 20+s.ipOpts, 20+s.tcpOpts
	if s.vlan {
		l2 = 18
	}
	if s.v6 {
		l3 = 40
	}
	ip := f[l2:]
	src, dst := ip[12:16], ip[16:20]
	if s.v6 {
		src, dst = ip[8:24], ip[24:40]
	}
	tcp := ip[l3:]
	binary.BigEndian.PutUint16(tcp[16:], 0)
	binary.BigEndian.PutUint16(tcp[16:], vnet.Checksum(tcp, vnet.PseudoHeaderSum(6, src, dst, l4+s.payload)))
	return f
}

// refreshIPv4 recomputes the IPv4 header checksum of a frame without a VLAN
// tag after a test changed the header.
func refreshIPv4(f []byte) []byte {
	ip := f[14:34]
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], vnet.Checksum(ip, 0))
	return f
}

// The burst core checks each TCP frame's checksums in C while it describes
// the burst, on real rings: a frame it vouches for reaches Go with
// CsumChecked, and one it does not vouch for, for whatever reason, reaches
// it without, for the coalescer to check as before.
func TestTheBurstCoreChecksTCPChecksumsInC(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true})
	out, err := queue0(t, b).Out(32, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(out.Close)

	v4 := superSpec{payload: 1448, flags: 0x10}
	edit := func(s superSpec, f func([]byte) []byte) []byte { return f(fullFrame(s)) }
	cases := []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"IPv4", fullFrame(v4), true},
		{"IPv4, odd payload", fullFrame(superSpec{payload: 1447, flags: 0x18}), true},
		{"IPv4, no payload", fullFrame(superSpec{flags: 0x10}), true},
		{"IPv4, TCP options", fullFrame(superSpec{payload: 1436, tcpOpts: 12, flags: 0x10}), true},
		{"IPv4, VLAN tag", fullFrame(superSpec{payload: 1448, vlan: true, flags: 0x10}), true},
		{"IPv6", fullFrame(superSpec{payload: 1428, v6: true, flags: 0x10}), true},
		{"IPv4, wrong TCP checksum", edit(v4, func(f []byte) []byte { f[14+20+16] ^= 0xff; return f }), false},
		{"IPv4, a payload byte changed", edit(v4, func(f []byte) []byte { f[1000]++; return f }), false},
		{"IPv4, wrong header checksum", edit(v4, func(f []byte) []byte { f[14+10] ^= 0xff; return f }), false},
		{"IPv6, wrong TCP checksum", edit(superSpec{payload: 1428, v6: true, flags: 0x10},
			func(f []byte) []byte { f[14+40+16] ^= 0xff; return f }), false},
		{"IPv4 options", fullFrame(superSpec{payload: 1444, ipOpts: 4, flags: 0x10}), false},
		{"a fragment", edit(v4, func(f []byte) []byte { f[14+6] |= 0x20; return refreshIPv4(f) }), false},
		{"UDP", edit(v4, func(f []byte) []byte { f[14+9] = 17; return refreshIPv4(f) }), false},
		{"Ethernet padding", edit(superSpec{payload: 2, flags: 0x18}, func(f []byte) []byte { return append(f, 0, 0, 0, 0) }), false},
		{"an IP length past the frame", edit(v4, func(f []byte) []byte { return f[:len(f)-1] }), false},
	}
	// Any one byte past the Ethernet header changed, in a header or the
	// payload: the check must refuse the frame, whatever the byte does.
	// IPv6's traffic class, flow label and hop limit (bytes 14-17 and 21
	// of the frame) are under no checksum: not changed here.
	r := rand.New(rand.NewPCG(3, 4))
	for b, base := range [][]byte{cases[0].frame, cases[5].frame} {
		v6 := b == 1
		for range 8 {
			f := append([]byte(nil), base...)
			at := 14 + r.IntN(len(f)-14)
			for v6 && (at <= 17 || at == 21) {
				at = 14 + r.IntN(len(f)-14)
			}
			f[at] += byte(1 + r.IntN(255))
			cases = append(cases, struct {
				name  string
				frame []byte
				want  bool
			}{fmt.Sprintf("byte %d of a %d-byte frame changed", at, len(f)), f, false})
		}
	}
	frames := make([][]byte, len(cases))
	for i, c := range cases {
		frames[i] = c.frame
	}
	if n, err := b.Port.Inject(0, frames, ringtestOpts(0, 0)); err != nil || n != len(frames) {
		t.Fatalf("Inject: %d, %v", n, err)
	}
	if n := out.Next(); n != len(frames) {
		t.Fatalf("Next: %d packets, want %d", n, len(frames))
	}
	for i, c := range cases {
		p, err := out.Packet(i)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.CsumChecked != c.want || p.L4CsumGood {
			t.Errorf("%s: CsumChecked %v, L4CsumGood %v; want %v, false", c.name, p.CsumChecked, p.L4CsumGood, c.want)
		}
	}

	// A chained mbuf is the coalescer's to check.
	if _, err := b.Port.Inject(0, frames[:1], ringtestOpts(700, 0)); err != nil {
		t.Fatal(err)
	}
	if n := out.Next(); n != 1 {
		t.Fatalf("Next: %d packets, want 1", n)
	}
	if p, err := out.Packet(0); err != nil || p.CsumChecked || len(p.Segs) < 2 {
		t.Errorf("a chain of %d segments: CsumChecked %v (%v); want a chain, not checked", len(p.Segs), p.CsumChecked, err)
	}
	out.Next()
}

// Through the worker on real rings: segments the burst core checked merge
// into one write; a frame it refused is checked again by the coalescer,
// counted and written alone with an all-zero header, so that the kernel
// counts it too; a checked frame written alone tells the kernel its
// checksum is valid.
func TestCheckedFramesMergeAndABadOneIsStillCaught(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true})
	w, peer := realWorker(t, b, true)

	s := superSpec{payload: 1448, flags: 0x10}
	good := fullFrame(s)
	next := func(f []byte, k int) []byte { // segment k of f's stream
		g := append([]byte(nil), f...)
		tcp := g[14+20:]
		binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+uint32(k*s.payload))
		binary.BigEndian.PutUint16(tcp[16:], 0)
		binary.BigEndian.PutUint16(tcp[16:], vnet.Checksum(tcp, vnet.PseudoHeaderSum(6, g[26:30], g[30:34], 20+s.payload)))
		return g
	}
	bad := next(good, 4)
	bad[14+20+16] ^= 0xff
	other := fullFrame(superSpec{payload: 100, flags: 0x18, dstPort: 40001})
	frames := [][]byte{good, next(good, 1), next(good, 2), next(good, 3), bad, other}
	if _, err := b.Port.Inject(0, frames, ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	if n := w.ToKernel(); n != len(frames) {
		t.Fatalf("ToKernel moved %d, want %d", n, len(frames))
	}
	var hdrs []vnet.Hdr
	buf := make([]byte, 1<<17)
	for {
		n, err := unix.Read(peer, buf)
		if err != nil {
			break
		}
		hdrs = append(hdrs, vnet.Decode(buf[:n]))
	}
	o := w.Counters().Offload.Snapshot()
	if len(hdrs) != 3 || o.MergedWrites != 1 || o.MergedPackets != 4 || o.BadCsum != 1 || o.CsumTrusted != 0 {
		t.Fatalf("%d writes, %d merged of %d packets, %d bad checksums, %d trusted; want 3, 1 of 4, 1, 0",
			len(hdrs), o.MergedWrites, o.MergedPackets, o.BadCsum, o.CsumTrusted)
	}
	if hdrs[0].GSOType != vnet.GSOTCPv4 || hdrs[1] != (vnet.Hdr{}) || hdrs[2] != (vnet.Hdr{Flags: vnet.FlagDataValid}) {
		t.Errorf("headers %+v: want the merged write's, an all-zero one for the bad frame, DATA_VALID for the checked one alone", hdrs)
	}
}

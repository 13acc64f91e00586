package vnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// superFrame coalesces a stream into one write and returns it flattened.
func superFrame(t testing.TB, s spec, sizes ...int) ([]byte, [][]byte) {
	t.Helper()
	fs := frames(stream(s, sizes...))
	ws := NewCoalescer(len(fs), 0).Coalesce(packets(fs))
	if len(ws) != 1 || !ws[0].Merged {
		t.Fatalf("not merged: %v", groups(ws))
	}
	return flatten(ws[0]), fs
}

func TestSplitRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    spec
	}{
		{"v4", base()},
		{"v6", func() spec { s := base(); s.v6 = true; return s }()},
		{"v4 VLAN", func() spec { s := base(); s.vlan = 0x2064; return s }()},
		{"v6 VLAN no options", func() spec { s := base(); s.v6, s.vlan, s.opts = true, 5, nil; return s }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.seq = 0xfffffc00 // sequence numbers wrap inside the frame
			s.id = 0xfffe      // and so does the IPv4 ID
			wire, orig := superFrame(t, s, 1400, 1400, 1400, 1)
			segs, err := split(t, wire, testMTU)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) != len(orig) {
				t.Fatalf("%d segments", len(segs))
			}
			for k := range segs {
				if !bytes.Equal(segs[k], orig[k]) {
					t.Fatalf("segment %d:\n got %x\nwant %x", k, segs[k], orig[k])
				}
			}
		})
	}
}

func TestSplitLyingHdrLen(t *testing.T) {
	wire, orig := superFrame(t, base(), 1000, 1000, 10)
	for _, hl := range []uint16{0, 1, 14, 54, 65, 67, 200, 0xffff} {
		w := append([]byte(nil), wire...)
		binary.LittleEndian.PutUint16(w[2:], hl)
		segs, err := split(t, w, testMTU)
		if err != nil {
			t.Fatalf("hdr_len %d: %v", hl, err)
		}
		for k := range segs {
			if !bytes.Equal(segs[k], orig[k]) {
				t.Fatalf("hdr_len %d: segment %d differs", hl, k)
			}
		}
	}
}

func TestSplitRejects(t *testing.T) {
	wire, _ := superFrame(t, base(), 1000, 1000)
	good := Decode(wire)
	frame := wire[HdrLen:]
	for _, tc := range []struct {
		name string
		mod  func(*Hdr)
	}{
		{"csum_start before TCP", func(h *Hdr) { h.CsumStart -= 2 }},
		{"csum_start past the frame", func(h *Hdr) { h.CsumStart = 60000 }},
		{"csum_offset 6", func(h *Hdr) { h.CsumOffset = 6 }},
		{"csum_offset past the frame", func(h *Hdr) { h.CsumOffset = 0xffff }},
		{"GSO_ECN", func(h *Hdr) { h.GSOType |= GSOECN }},
		{"UDP", func(h *Hdr) { h.GSOType = GSOUDP }},
		{"UDP_L4", func(h *Hdr) { h.GSOType = GSOUDPL4 }},
		{"unknown type", func(h *Hdr) { h.GSOType = 9 }},
		{"TCPv6 on IPv4", func(h *Hdr) { h.GSOType = GSOTCPv6 }},
		{"no NEEDS_CSUM", func(h *Hdr) { h.Flags = 0 }},
		{"gso_size 0", func(h *Hdr) { h.GSOSize = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := good
			tc.mod(&h)
			_, err := Parse(h, frame, testMTU)
			if !errors.Is(err, ErrBadHeader) {
				t.Fatalf("err %v", err)
			}
			var he *HeaderError
			if !errors.As(err, &he) || he.Reason == "" {
				t.Fatalf("no reason in %v", err)
			}
		})
	}
	// NEEDS_CSUM without GSO, pointing outside the frame.
	for _, h := range []Hdr{
		{Flags: FlagNeedsCsum, CsumStart: uint16(len(frame)), CsumOffset: 0},
		{Flags: FlagNeedsCsum, CsumStart: uint16(len(frame) - 1), CsumOffset: 0},
		{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: uint16(len(frame))},
	} {
		small := frame[:200]
		if h.CsumStart > 200 {
			small = frame[:h.CsumStart]
		}
		if _, err := Parse(h, small, testMTU); !errors.Is(err, ErrBadHeader) {
			t.Fatalf("%+v: err %v", h, err)
		}
	}
	// Truncated frame: the IP length no longer matches.
	if _, err := Parse(good, frame[:len(frame)-1], testMTU); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("truncated: %v", err)
	}
	// A frame too long for an MTU-sized dst without GSO.
	if _, err := Parse(Hdr{}, frame, testMTU); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("long plain frame: %v", err)
	}
}

func TestSplitNeedsCsum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		s := base()
		s.v6 = v6
		s.vlan = 3
		s.payload = payload(777, 9)
		f := build(s)
		th, _, _ := parseTCP(f)
		ip := f[th.l2:]
		tcp := ip[th.l3:]
		want := append([]byte(nil), f...)
		// What the kernel hands over for CHECKSUM_PARTIAL: the folded
		// pseudo-header sum in the field.
		src, dst := addrs(ip, v6)
		binary.BigEndian.PutUint16(tcp[16:], Fold(PseudoHeaderSum(protoTCP, src, dst, len(tcp))))
		h := Hdr{Flags: FlagNeedsCsum, CsumStart: uint16(th.l2 + th.l3), CsumOffset: 16, HdrLen: 3}
		segs, err := split(t, append(encode(h), f...), testMTU)
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) != 1 || !bytes.Equal(segs[0], want) {
			t.Fatalf("v6=%v: completed frame differs", v6)
		}
		checkFrame(t, segs[0])
	}
	// Any L4: a UDP datagram, checksum completed the same generic way.
	udp := []byte{0x30, 0x39, 0x00, 0x35, 0, 13, 0, 0, 'h', 'e', 'l', 'l', 'o'}
	ipSrc, ipDst := []byte{192, 168, 0, 1}, []byte{192, 168, 0, 2}
	binary.BigEndian.PutUint16(udp[6:], Fold(PseudoHeaderSum(17, ipSrc, ipDst, len(udp))))
	f := append(make([]byte, 34), udp...)
	f[12], f[13], f[14] = 0x08, 0x00, 0x45
	copy(f[26:], ipSrc)
	copy(f[30:], ipDst)
	h := Hdr{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: 6}
	segs, err := split(t, append(encode(h), f...), testMTU)
	if err != nil {
		t.Fatal(err)
	}
	got := segs[0][34:]
	if Fold(Sum(got, PseudoHeaderSum(17, ipSrc, ipDst, len(got)))) != 0xffff {
		t.Fatalf("UDP checksum %x not valid", got[6:8])
	}
}

func encode(h Hdr) []byte {
	b := make([]byte, HdrLen)
	h.Encode(b)
	return b
}

func TestSplitPlain(t *testing.T) {
	f := build(func() spec { s := base(); s.payload = payload(100, 0); return s }())
	segs, err := split(t, append(encode(Hdr{Flags: FlagDataValid}), f...), testMTU)
	if err != nil || len(segs) != 1 || !bytes.Equal(segs[0], f) {
		t.Fatalf("plain frame changed: %v", err)
	}
	for _, tc := range []struct {
		h    Hdr
		good bool
	}{
		{Hdr{}, false},
		{Hdr{Flags: FlagDataValid}, true},
		{Hdr{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: 16}, true},
	} {
		s, err := Parse(tc.h, f, testMTU)
		if err != nil || s.CsumGood() != tc.good {
			t.Fatalf("%+v: CsumGood %v, err %v", tc.h, s.CsumGood(), err)
		}
	}
}

func TestSplitSmallerMTU(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		s := base()
		s.v6 = v6
		s.flags |= tcpPSH | tcpCWR
		s.payload = payload(9000, 1)
		f := build(s)
		th, _, _ := parseTCP(f)
		src, dst := addrs(f[th.l2:], v6)
		tcp := f[th.l2+th.l3:]
		binary.BigEndian.PutUint16(tcp[16:], Fold(PseudoHeaderSum(protoTCP, src, dst, len(tcp))))
		gso := uint8(GSOTCPv4)
		if v6 {
			gso = GSOTCPv6
		}
		h := Hdr{Flags: FlagNeedsCsum, GSOType: gso, GSOSize: 4000, CsumStart: uint16(th.l2 + th.l3), CsumOffset: 16}
		const mtu = 1280
		segs, err := split(t, append(encode(h), f...), mtu)
		if err != nil {
			t.Fatal(err)
		}
		mss := mtu - th.l3 - th.l4
		if want := (9000 + mss - 1) / mss; len(segs) != want {
			t.Fatalf("%d segments, want %d", len(segs), want)
		}
		var pl []byte
		for k, sg := range segs {
			checkFrame(t, sg)
			if len(sg) > mtu+th.l2 {
				t.Fatalf("segment %d is %d bytes", k, len(sg))
			}
			fl := sg[th.l2+th.l3+13]
			if (fl&tcpPSH != 0) != (k == len(segs)-1) || (fl&tcpCWR != 0) != (k == 0) {
				t.Fatalf("segment %d flags %#x", k, fl)
			}
			if seq := binary.BigEndian.Uint32(sg[th.l2+th.l3+4:]); seq != s.seq+uint32(k*mss) {
				t.Fatalf("segment %d seq %d", k, seq)
			}
			pl = append(pl, sg[th.hlen():]...)
		}
		if !bytes.Equal(pl, s.payload) {
			t.Fatal("payload differs")
		}
	}
}

func TestSplitAllocs(t *testing.T) {
	wire, _ := superFrame(t, func() spec { s := base(); s.v6 = true; return s }(), 1000, 1000, 1000, 5)
	dst := make([]byte, testMTU+18)
	n := testing.AllocsPerRun(100, func() {
		h := Decode(wire)
		s, err := Parse(h, wire[HdrLen:], testMTU)
		if err != nil {
			panic(err)
		}
		for k := range s.N() {
			s.Segment(k, wire[HdrLen:], dst)
		}
		if _, err := Parse(Hdr{GSOType: GSOTCPv4 | GSOECN}, wire[HdrLen:], testMTU); err == nil {
			panic("no error")
		}
	})
	if n != 0 {
		t.Fatalf("Parse+Segment allocate %v times", n)
	}
}

func BenchmarkSplit(b *testing.B) {
	wire, _ := superFrame(b, base(), repeat(1448, 40)...)
	dst := make([]byte, testMTU+18)
	b.SetBytes(int64(len(wire)))
	for b.Loop() {
		s, _ := Parse(Decode(wire), wire[HdrLen:], testMTU)
		for k := range s.N() {
			s.Segment(k, wire[HdrLen:], dst)
		}
	}
}

func TestStaleIPLenTellsAnLROPacketsShortLengthFromPadding(t *testing.T) {
	f := build(func() spec { s := base(); s.payload = payload(600, 1); return s }())
	stale := append([]byte(nil), f...)
	binary.BigEndian.PutUint16(stale[16:], binary.BigEndian.Uint16(stale[16:])-200) // the IPv4 total length
	short := build(func() spec { s := base(); s.opts = nil; s.payload = payload(2, 1); return s }())
	padded := append(short, make([]byte, 60-len(short))...)
	check := func(name string, frame []byte, want bool) {
		if got := StaleIPLen(frame, len(frame)); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	check("exact", f, false)
	check("IP length short", stale, true)
	check("padded to 60 bytes", padded, false)
	check("not IP", make([]byte, 100), false)
}

package vnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// spec describes one Ethernet/IP/TCP frame for the builders.
type spec struct {
	v6       bool
	vlan     uint16 // 802.1Q TCI; 0: untagged
	mac      byte   // last byte of the source MAC
	src, dst byte   // last byte of the addresses
	sport    uint16
	dport    uint16
	seq, ack uint32
	flags    uint8
	window   uint16
	opts     []byte // TCP options (multiple of 4)
	tos      uint8  // IPv4 TOS / IPv6 traffic class
	ttl      uint8
	df       bool
	id       uint16
	ipOpts   []byte // IPv4 options (multiple of 4)
	ext      bool   // IPv6: a hop-by-hop header before TCP
	flow     uint32 // IPv6 flow label
	payload  []byte
	badCsum  bool // corrupt the TCP checksum
}

func base() spec {
	return spec{
		src: 1, dst: 2, mac: 0x10, sport: 40000, dport: 5201, seq: 1000, ack: 77,
		flags: tcpACK, window: 512, ttl: 64, df: true, id: 100,
		opts: []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}, // NOP NOP TS
	}
}

func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// build returns the frame described by s with correct checksums (unless
// badCsum).
func build(s spec) []byte {
	var f []byte
	f = append(f, 0x02, 0, 0, 0, 0, 0x20, 0x02, 0, 0, 0, 0, s.mac)
	if s.vlan != 0 {
		f = binary.BigEndian.AppendUint16(f, etherVLAN)
		f = binary.BigEndian.AppendUint16(f, s.vlan)
	}
	l2 := len(f)
	tcp := make([]byte, 20+len(s.opts))
	binary.BigEndian.PutUint16(tcp[0:], s.sport)
	binary.BigEndian.PutUint16(tcp[2:], s.dport)
	binary.BigEndian.PutUint32(tcp[4:], s.seq)
	binary.BigEndian.PutUint32(tcp[8:], s.ack)
	tcp[12] = byte(len(tcp)/4) << 4
	tcp[13] = s.flags
	binary.BigEndian.PutUint16(tcp[14:], s.window)
	copy(tcp[20:], s.opts)
	tcp = append(tcp, s.payload...)
	var srcA, dstA []byte
	if s.v6 {
		f = binary.BigEndian.AppendUint16(f, etherIPv6)
		ip := make([]byte, 40)
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(s.tos)<<20|s.flow&0xfffff)
		ip[6] = protoTCP
		ip[7] = s.ttl
		ip[8], ip[23] = 0xfd, s.src
		ip[24], ip[39] = 0xfd, s.dst
		var ext []byte
		if s.ext {
			ip[6] = 0 // hop-by-hop
			ext = []byte{protoTCP, 0, 1, 4, 0, 0, 0, 0}
		}
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ext)+len(tcp)))
		srcA, dstA = ip[8:24], ip[24:40]
		f = append(f, ip...)
		f = append(f, ext...)
	} else {
		f = binary.BigEndian.AppendUint16(f, etherIPv4)
		ip := make([]byte, 20+len(s.ipOpts))
		ip[0] = 0x40 | byte(len(ip)/4)
		ip[1] = s.tos
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(tcp)))
		binary.BigEndian.PutUint16(ip[4:], s.id)
		if s.df {
			ip[6] = 0x40
		}
		ip[8] = s.ttl
		ip[9] = protoTCP
		ip[12], ip[15] = 10, s.src
		ip[16], ip[19] = 10, s.dst
		copy(ip[20:], s.ipOpts)
		binary.BigEndian.PutUint16(ip[10:], Checksum(ip, 0))
		srcA, dstA = ip[12:16], ip[16:20]
		f = append(f, ip...)
	}
	acc := PseudoHeaderSum(protoTCP, srcA, dstA, len(tcp))
	cs := Checksum(tcp, acc)
	if s.badCsum {
		cs ^= 0x0101
	}
	binary.BigEndian.PutUint16(tcp[16:], cs)
	_ = l2
	return append(f, tcp...)
}

// stream builds consecutive segments of one flow with the given payload
// sizes: sequence numbers adjacent, IPv4 ID +1 each (as the kernel's
// segmentation would produce), PSH on none.
func stream(s spec, sizes ...int) []spec {
	out := make([]spec, len(sizes))
	for i, n := range sizes {
		out[i] = s
		out[i].payload = payload(n, byte(i))
		s.seq += uint32(n)
		s.id++
	}
	return out
}

func frames(specs []spec) [][]byte {
	out := make([][]byte, len(specs))
	for i, s := range specs {
		out[i] = build(s)
	}
	return out
}

func packets(fs [][]byte) []Packet {
	ps := make([]Packet, len(fs))
	for i, f := range fs {
		ps[i] = Packet{Segs: [][]byte{f}, Len: len(f)}
	}
	return ps
}

// chain splits f into an mbuf chain at the given cut offsets.
func chain(f []byte, cuts ...int) Packet {
	p := Packet{Len: len(f)}
	prev := 0
	for _, c := range cuts {
		p.Segs = append(p.Segs, f[prev:c])
		prev = c
	}
	p.Segs = append(p.Segs, f[prev:])
	return p
}

// lro returns what a NIC's LRO (librte_gro) makes of consecutive segments
// of one flow: an mbuf chain of the first frame and then each further
// segment's payload, the IP length updated, the checksums left the first
// frame's (stale), LROSize the largest payload, CsumOK set.
func lro(specs []spec) Packet {
	head := build(specs[0])
	th, _, _ := parseTCP(head)
	p := Packet{Segs: [][]byte{head}, Len: len(head), CsumOK: true, LROSize: uint16(len(specs[0].payload))}
	for _, s := range specs[1:] {
		p.Segs = append(p.Segs, s.payload)
		p.Len += len(s.payload)
		p.LROSize = max(p.LROSize, uint16(len(s.payload)))
	}
	ip := head[th.l2:]
	if th.v6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(p.Len-th.l2-th.l3))
	} else {
		binary.BigEndian.PutUint16(ip[2:], uint16(p.Len-th.l2))
	}
	return p
}

// origFrames returns the frames packet p stands for: p itself, or for an
// LRO packet the kernel segments, the frames its GSO write alone splits
// into (the IPv4 IDs counting up from its own).
func origFrames(t testing.TB, p Packet, mtu int) [][]byte {
	t.Helper()
	var f []byte
	for _, s := range p.Segs {
		f = append(f, s...)
	}
	if p.LROSize == 0 {
		return [][]byte{f}
	}
	ws := NewCoalescer(1, 0).Coalesce([]Packet{p})
	if Decode(ws[0].Iov[0]).GSOType == GSONone {
		return [][]byte{f}
	}
	segs, err := split(t, flatten(ws[0]), mtu)
	if err != nil {
		t.Fatalf("LRO packet alone: split: %v", err)
	}
	return segs
}

func flatten(w Write) []byte {
	var b []byte
	for _, v := range w.Iov {
		b = append(b, v...)
	}
	return b
}

// split runs a flattened write through Parse and Segment.
func split(t testing.TB, wire []byte, mtu int) ([][]byte, error) {
	t.Helper()
	h := Decode(wire)
	s, err := Parse(h, wire[HdrLen:], mtu)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for k := range s.N() {
		dst := make([]byte, mtu+ethLen+vlanLen)
		n := s.Segment(k, wire[HdrLen:], dst)
		if n == 0 {
			return nil, errors.New("Segment returned 0")
		}
		out = append(out, dst[:n])
	}
	return out, nil
}

// checkFrame verifies the IPv4 header checksum and TCP checksum of a frame.
func checkFrame(t testing.TB, f []byte) {
	t.Helper()
	th, _, ok := parseTCP(f)
	if !ok {
		t.Fatalf("output frame does not parse as TCP: %x", f)
	}
	ip := f[th.l2:]
	if th.l2+th.ipLen != len(f) {
		t.Fatalf("IP length %d, frame %d", th.ipLen, len(f)-th.l2)
	}
	if !th.v6 && Fold(Sum(ip[:th.l3], 0)) != 0xffff {
		t.Fatalf("bad IPv4 header checksum")
	}
	src, dst := addrs(ip, th.v6)
	if Fold(Sum(ip[th.l3:th.ipLen], PseudoHeaderSum(protoTCP, src, dst, th.ipLen-th.l3))) != 0xffff {
		t.Fatalf("bad TCP checksum")
	}
}

// checkWrites checks the invariants every Coalesce result has: each packet
// in exactly one write, writes ordered by first packet, alone writes with the
// packet whole behind a plain header, merged writes that split back into the
// original frames (an LRO packet's being the frames it holds).
func checkWrites(t testing.TB, pkts []Packet, ws []Write, mtu int, exact bool) {
	t.Helper()
	seen := make([]bool, len(pkts))
	last := -1
	for wi, w := range ws {
		if len(w.Pkts) == 0 || w.Pkts[0] != w.First || w.First <= last {
			t.Fatalf("write %d: First %d Pkts %v after %d", wi, w.First, w.Pkts, last)
		}
		last = w.First
		for _, i := range w.Pkts {
			if seen[i] {
				t.Fatalf("packet %d twice", i)
			}
			seen[i] = true
		}
		if w.Merged != (len(w.Pkts) > 1) {
			t.Fatalf("write %d: Merged %v with %d packets", wi, w.Merged, len(w.Pkts))
		}
		wire := flatten(w)
		h := Decode(wire)
		var orig [][]byte
		for _, i := range w.Pkts {
			orig = append(orig, origFrames(t, pkts[i], mtu)...)
		}
		if len(w.Pkts) == 1 && h.GSOType == GSONone {
			want := Hdr{}
			if pkts[w.First].CsumOK {
				want.Flags = FlagDataValid
			}
			if h != want || !bytes.Equal(wire[HdrLen:], orig[0]) {
				t.Fatalf("write %d alone: header %+v, want %+v, frame equal %v", wi, h, want, bytes.Equal(wire[HdrLen:], orig[0]))
			}
			continue
		}
		if h.Flags != FlagNeedsCsum || h.CsumOffset != 16 || (h.GSOType != GSOTCPv4 && h.GSOType != GSOTCPv6) {
			t.Fatalf("write %d: header %+v", wi, h)
		}
		segs, err := split(t, wire, mtu)
		if err != nil {
			t.Fatalf("write %d: split: %v", wi, err)
		}
		for _, f := range segs {
			checkFrame(t, f)
		}
		if exact && len(orig) > 1 {
			if len(segs) != len(orig) {
				t.Fatalf("write %d: %d segments, want %d", wi, len(segs), len(orig))
			}
			for k := range segs {
				if !bytes.Equal(segs[k], orig[k]) {
					t.Fatalf("write %d segment %d differs:\n got %x\nwant %x", wi, k, segs[k], orig[k])
				}
			}
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("packet %d in no write", i)
		}
	}
}

func groups(ws []Write) [][]int {
	var g [][]int
	for _, w := range ws {
		g = append(g, append([]int(nil), w.Pkts...))
	}
	return g
}

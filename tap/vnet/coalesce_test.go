package vnet

import (
	"fmt"
	"reflect"
	"testing"
)

const testMTU = 1500

func TestCoalesce(t *testing.T) {
	b := base()
	v6 := base()
	v6.v6 = true
	vlan := base()
	vlan.vlan = 100
	flowB := base()
	flowB.sport = 40001
	flowB.seq = 9000

	mod := func(ss []spec, i int, f func(*spec)) []spec {
		f(&ss[i])
		return ss
	}
	cat := func(parts ...[]spec) []spec {
		var out []spec
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	seq := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	cont := func(s spec, prev []spec) spec {
		l := prev[len(prev)-1]
		s.seq = l.seq + uint32(len(l.payload))
		s.id = l.id + 1
		return s
	}

	tests := []struct {
		name  string
		specs []spec
		want  [][]int
	}{
		{"in order", stream(b, 1000, 1000, 1000), [][]int{{0, 1, 2}}},
		{"single", stream(b, 1000), [][]int{{0}}},
		{"out of order", func() []spec {
			s := stream(b, 1000, 1000, 1000)
			s[1], s[2] = s[2], s[1]
			return s
		}(), [][]int{{0}, {1}, {2}}},
		{"PSH in the middle closes", mod(stream(b, 1000, 1000, 1000, 1000), 1, func(s *spec) { s.flags |= tcpPSH }),
			[][]int{{0, 1}, {2, 3}}},
		{"PSH on the last", mod(stream(b, 1000, 1000, 1000), 2, func(s *spec) { s.flags |= tcpPSH }),
			[][]int{{0, 1, 2}}},
		{"PSH first is alone", mod(stream(b, 1000, 1000, 1000), 0, func(s *spec) { s.flags |= tcpPSH }),
			[][]int{{0}, {1, 2}}},
		{"FIN", mod(stream(b, 1000, 1000, 1000, 1000), 1, func(s *spec) { s.flags |= tcpFIN }), [][]int{{0}, {1}, {2, 3}}},
		{"SYN", mod(stream(b, 1000, 1000, 1000, 1000), 1, func(s *spec) { s.flags |= tcpSYN }), [][]int{{0}, {1}, {2, 3}}},
		{"RST", mod(stream(b, 1000, 1000, 1000, 1000), 1, func(s *spec) { s.flags |= tcpRST }), [][]int{{0}, {1}, {2, 3}}},
		{"URG", mod(stream(b, 1000, 1000, 1000, 1000), 1, func(s *spec) { s.flags |= tcpURG }), [][]int{{0}, {1}, {2, 3}}},
		{"CWR", mod(stream(b, 1000, 1000, 1000, 1000), 1, func(s *spec) { s.flags |= tcpCWR }), [][]int{{0}, {1}, {2, 3}}},
		{"ECE", mod(stream(b, 1000, 1000, 1000, 1000), 1, func(s *spec) { s.flags |= tcpECE }), [][]int{{0}, {1}, {2, 3}}},
		{"no ACK", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.flags = 0 }), [][]int{{0}, {1}}},
		{"pure ACKs", stream(b, 0, 0, 0), [][]int{{0}, {1}, {2}}},
		{"options differ", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.opts = []byte{1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 2} }),
			[][]int{{0}, {1}}},
		{"option length differs", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.opts = nil }), [][]int{{0}, {1}}},
		{"TOS differs", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.tos = 0x10 }), [][]int{{0}, {1}}},
		{"ECN differs", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.tos = 0x03 }), [][]int{{0}, {1}}},
		{"TTL differs", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.ttl = 63 }), [][]int{{0}, {1}}},
		{"DF differs", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.df = false }), [][]int{{0}, {1}}},
		{"ack differs", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.ack++ }), [][]int{{0}, {1}}},
		{"window differs", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.window++ }), [][]int{{0}, {1}}},
		{"IPv4 options", func() []spec {
			o := b
			o.ipOpts = []byte{1, 1, 1, 0}
			return stream(o, 1000, 1000)
		}(), [][]int{{0}, {1}}},
		{"IPv6", stream(v6, 1200, 1200, 1200, 700), [][]int{{0, 1, 2, 3}}},
		{"IPv6 extension header", func() []spec {
			o := v6
			o.ext = true
			return stream(o, 1000, 1000)
		}(), [][]int{{0}, {1}}},
		{"IPv6 flow label differs", mod(stream(v6, 1000, 1000), 1, func(s *spec) { s.flow = 5 }), [][]int{{0}, {1}}},
		{"IPv6 hop limit differs", mod(stream(v6, 1000, 1000), 1, func(s *spec) { s.ttl = 1 }), [][]int{{0}, {1}}},
		{"VLAN with VLAN", stream(vlan, 1000, 1000, 1000), [][]int{{0, 1, 2}}},
		{"VLAN then untagged", func() []spec {
			s := stream(vlan, 1000, 1000)
			u := cont(b, s)
			return append(s, stream(u, 1000, 1000)...)
		}(), [][]int{{0, 1}, {2, 3}}},
		{"other VLAN", func() []spec {
			s := stream(vlan, 1000)
			o := cont(vlan, s)
			o.vlan = 101
			return append(s, stream(o, 1000)...)
		}(), [][]int{{0}, {1}}},
		{"MAC differs", mod(stream(b, 1000, 1000), 1, func(s *spec) { s.mac = 0x11 }), [][]int{{0}, {1}}},
		{"short last", stream(b, 1000, 1000, 500), [][]int{{0, 1, 2}}},
		{"short last closes", stream(b, 1000, 1000, 500, 1000), [][]int{{0, 1, 2}, {3}}},
		{"longer after shorter", stream(b, 500, 1000, 1000), [][]int{{0}, {1, 2}}},
		{"64 KiB cap", stream(b, repeat(1400, 50)...), [][]int{seq(46), seqFrom(46, 4)}},
		{"IPv6 64 KiB cap", stream(v6, repeat(1400, 50)...), [][]int{seq(46), seqFrom(46, 4)}},
		{"segment cap", stream(b, repeat(100, 70)...), [][]int{seq(64), seqFrom(64, 6)}},
		{"interleaved flows", func() []spec {
			a := stream(b, 1000, 1000, 1000)
			bb := stream(flowB, 800, 800)
			return []spec{a[0], bb[0], a[1], bb[1], a[2]}
		}(), [][]int{{0, 2, 4}, {1, 3}}},
		{"interleaved, one flow's FIN", func() []spec {
			a := stream(b, 1000, 1000, 1000)
			bb := stream(flowB, 800, 800, 800)
			bb[1].flags |= tcpFIN
			return []spec{a[0], bb[0], a[1], bb[1], a[2], bb[2]}
		}(), [][]int{{0, 2, 4}, {1}, {3}, {5}}},
		{"bad checksum in the middle", mod(stream(b, 1000, 1000, 1000, 1000), 1, func(s *spec) { s.badCsum = true }),
			[][]int{{0}, {1}, {2, 3}}},
		{"bad checksum first", mod(stream(b, 1000, 1000, 1000), 0, func(s *spec) { s.badCsum = true }),
			[][]int{{0}, {1, 2}}},
		{"bad checksum last", mod(stream(b, 1000, 1000, 1000), 2, func(s *spec) { s.badCsum = true }),
			[][]int{{0, 1}, {2}}},
		{"mixed v4 and v6", cat(stream(b, 1000, 1000), stream(v6, 1000, 1000)), [][]int{{0, 1}, {2, 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkts := packets(frames(tc.specs))
			c := NewCoalescer(len(pkts), 0)
			ws := c.Coalesce(pkts)
			if got := groups(ws); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("groups %v, want %v", got, tc.want)
			}
			checkWrites(t, pkts, ws, testMTU, true)
			bad := 0
			for _, s := range tc.specs {
				if s.badCsum {
					bad++
				}
			}
			if st := c.Stats(); st.BadCsum != uint64(bad) {
				t.Fatalf("BadCsum %d, want %d", st.BadCsum, bad)
			}
		})
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}

func seqFrom(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func TestCoalesceMergedHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    spec
		l2   int
		l3   int
		gso  uint8
	}{
		{"v4", base(), 14, 20, GSOTCPv4},
		{"v4 VLAN", func() spec { s := base(); s.vlan = 7; return s }(), 18, 20, GSOTCPv4},
		{"v6", func() spec { s := base(); s.v6 = true; return s }(), 14, 40, GSOTCPv6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs := stream(tc.s, 1000, 1000, 300)
			specs[2].flags |= tcpPSH
			pkts := packets(frames(specs))
			ws := NewCoalescer(8, 0).Coalesce(pkts)
			if len(ws) != 1 || !ws[0].Merged {
				t.Fatalf("writes %v", groups(ws))
			}
			h := Decode(ws[0].Iov[0])
			l4 := 20 + len(tc.s.opts)
			want := Hdr{Flags: FlagNeedsCsum, GSOType: tc.gso, HdrLen: uint16(tc.l2 + tc.l3 + l4), GSOSize: 1000,
				CsumStart: uint16(tc.l2 + tc.l3), CsumOffset: 16}
			if h != want {
				t.Fatalf("header %+v, want %+v", h, want)
			}
			if len(ws[0].Iov[0]) != HdrLen+int(want.HdrLen) {
				t.Fatalf("Iov[0] is %d bytes", len(ws[0].Iov[0]))
			}
			cp := ws[0].Iov[0][HdrLen:]
			ip := cp[tc.l2:]
			tcp := ip[tc.l3:]
			if tcp[13] != tcpACK|tcpPSH {
				t.Fatalf("flags %#x, want ACK|PSH from the last packet", tcp[13])
			}
			l4len := l4 + 2300
			src, dst := addrs(ip, tc.s.v6)
			if got, want := uint16(tcp[16])<<8|uint16(tcp[17]), Fold(PseudoHeaderSum(protoTCP, src, dst, l4len)); got != want {
				t.Fatalf("TCP checksum field %#x, want pseudo-header sum %#x", got, want)
			}
			if !tc.s.v6 {
				if tl := int(ip[2])<<8 | int(ip[3]); tl != 20+l4len {
					t.Fatalf("total length %d", tl)
				}
				if Fold(Sum(ip[:20], 0)) != 0xffff {
					t.Fatal("IPv4 header checksum not recomputed")
				}
			} else if pl := int(ip[4])<<8 | int(ip[5]); pl != l4len {
				t.Fatalf("payload length %d", pl)
			}
		})
	}
}

func TestCoalesceMultiSegment(t *testing.T) {
	specs := stream(base(), 1000, 1000, 1000, 999)
	fs := frames(specs)
	hl := 14 + 20 + 32
	pkts := []Packet{
		chain(fs[0], hl+1, hl+501),         // odd cut in the payload
		chain(fs[1], hl, hl+7, hl+8, hl+8), // empty segment, 1-byte segment
		chain(fs[2]),
		chain(fs[3], hl+333, hl+334, hl+901),
	}
	c := NewCoalescer(4, 0)
	ws := c.Coalesce(pkts)
	if got := groups(ws); !reflect.DeepEqual(got, [][]int{{0, 1, 2, 3}}) {
		t.Fatalf("groups %v", got)
	}
	checkWrites(t, pkts, ws, testMTU, true)

	// A corrupted byte in a later segment is still caught.
	bad := append([]byte(nil), fs[1]...)
	bad[hl+600] ^= 0x40
	pkts[1] = chain(bad, hl+3, hl+500)
	ws = c.Coalesce(pkts)
	if got := groups(ws); !reflect.DeepEqual(got, [][]int{{0}, {1}, {2, 3}}) {
		t.Fatalf("groups %v", got)
	}
	checkWrites(t, pkts, ws, testMTU, true)
}

func TestCoalesceHeadersNotInFirstSegment(t *testing.T) {
	a := stream(base(), 1000, 1000, 1000, 1000)
	fs := frames(a)
	pkts := packets(fs)
	pkts[2] = chain(fs[2], 30) // the TCP header is in the second segment
	ws := NewCoalescer(4, 0).Coalesce(pkts)
	if got := groups(ws); !reflect.DeepEqual(got, [][]int{{0, 1}, {2}, {3}}) {
		t.Fatalf("groups %v", got)
	}
	checkWrites(t, pkts, ws, testMTU, true)
}

// A packet whose checksums were verified before it came is not checked
// again: by the app's NIC (CsumOK), counted as trusted, or by the caller
// (Checked: ring mode's burst core, in C), not counted, as that count is
// the NIC's word. Written alone it tells the kernel its checksum is valid.
func TestCoalesceCsumOKAndChecked(t *testing.T) {
	for _, byNIC := range []bool{true, false} {
		specs := stream(base(), 1000, 1000)
		specs[1].badCsum = true // verified before: not re-checked
		pkts := packets(frames(specs))
		pkts = append(pkts, packets(frames(stream(func() spec { s := base(); s.sport = 1; return s }(), 10)))[0])
		trusted := uint64(0)
		for i := range pkts {
			pkts[i].CsumOK, pkts[i].Checked = byNIC, !byNIC
			if byNIC {
				trusted++
			}
		}
		c := NewCoalescer(4, 0)
		ws := c.Coalesce(pkts)
		if got := groups(ws); !reflect.DeepEqual(got, [][]int{{0, 1}, {2}}) {
			t.Fatalf("by the NIC %v: groups %v", byNIC, got)
		}
		if h := Decode(ws[1].Iov[0]); h != (Hdr{Flags: FlagDataValid}) {
			t.Fatalf("by the NIC %v: alone header %+v", byNIC, h)
		}
		if st := c.Stats(); st.BadCsum != 0 || st.CsumTrusted != trusted {
			t.Fatalf("by the NIC %v: BadCsum %d, CsumTrusted %d: want 0, %d", byNIC, st.BadCsum, st.CsumTrusted, trusted)
		}
	}
}

func TestCoalesceLRO(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprint("v6=", v6), func(t *testing.T) {
			s := base()
			s.v6 = v6
			s.payload = payload(3500, 3)
			s.flags |= tcpPSH
			f := build(s)
			small := s
			small.seq += 3500
			small.payload = payload(500, 1)
			pkts := packets([][]byte{f, build(small)})
			pkts[0].LROSize = 1000
			pkts[1].LROSize = 1000 // payload not above LROSize: a plain packet
			c := NewCoalescer(2, 0)
			ws := c.Coalesce(pkts)
			if len(ws) != 2 || ws[0].Merged {
				t.Fatalf("writes %v", groups(ws))
			}
			h := Decode(ws[0].Iov[0])
			if h.Flags != FlagNeedsCsum || h.GSOSize != 1000 || h.CsumOffset != 16 {
				t.Fatalf("LRO header %+v", h)
			}
			segs, err := split(t, flatten(ws[0]), testMTU)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) != 4 {
				t.Fatalf("%d segments", len(segs))
			}
			var got []byte
			for k, sg := range segs {
				checkFrame(t, sg)
				th, _, _ := parseTCP(sg)
				flags := sg[th.l2+th.l3+13]
				if (flags&tcpPSH != 0) != (k == 3) {
					t.Fatalf("segment %d flags %#x", k, flags)
				}
				got = append(got, sg[th.hlen():]...)
			}
			if string(got) != string(s.payload) {
				t.Fatal("payload differs")
			}
			if h := Decode(ws[1].Iov[0]); h != (Hdr{}) {
				t.Fatalf("small LRO packet header %+v", h)
			}
			if c.Stats().LROWrites != 1 {
				t.Fatalf("stats %+v", c.Stats())
			}
		})
	}
}

func TestCoalesceNonTCP(t *testing.T) {
	a := stream(base(), 1000, 1000, 1000)
	fs := frames(a)
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	ipv4opt := base()
	ipv4opt.ipOpts = []byte{1, 1, 1, 0}
	ipv4opt.sport = 1
	ipv4opt.payload = payload(100, 0)
	pure := base()
	pure.sport = 2
	pure.opts = nil
	ack := build(pure)
	ack = append(ack, 0, 0, 0, 0, 0, 0) // Ethernet padding to 60
	pkts := packets([][]byte{fs[0], arp, fs[1], ack, build(ipv4opt), fs[2], nil})
	pkts[6] = Packet{}
	ws := NewCoalescer(2, 0).Coalesce(pkts) // more packets than preallocated
	// ARP and a padded ACK of another flow do not close the item; a TCP
	// packet with IPv4 options (not keyed) does.
	if got := groups(ws); !reflect.DeepEqual(got, [][]int{{0, 2}, {1}, {3}, {4}, {5}, {6}}) {
		t.Fatalf("groups %v", got)
	}
	checkWrites(t, pkts[:6], ws[:5], testMTU, true)
}

func TestCoalesceReuse(t *testing.T) {
	// A write that was merged in one call and a bad packet in the next must
	// not share header state (the stale vnet header of tailscale #19820).
	c := NewCoalescer(4, 0)
	good := packets(frames(stream(base(), 1000, 1000)))
	c.Coalesce(good)
	specs := stream(base(), 1000, 1000)
	specs[0].badCsum = true
	bad := packets(frames(specs))
	bad[1] = Packet{Segs: [][]byte{arpFrame()}, Len: 60}
	ws := c.Coalesce(bad)
	for i, w := range ws {
		if h := Decode(w.Iov[0]); h != (Hdr{}) || len(w.Iov[0]) != HdrLen {
			t.Fatalf("write %d header %+v, Iov[0] %d bytes", i, h, len(w.Iov[0]))
		}
	}
}

func arpFrame() []byte {
	f := make([]byte, 60)
	f[12], f[13] = 0x08, 0x06
	return f
}

func TestCoalesceAllocs(t *testing.T) {
	a := stream(base(), 1000, 1000, 1000, 500)
	v := base()
	v.v6, v.sport = true, 9
	bb := stream(v, 1200, 1200, 1200)
	specs := []spec{a[0], bb[0], a[1], bb[1], a[2], bb[2], a[3]}
	specs = append(specs, stream(func() spec { s := base(); s.sport = 3; s.badCsum = true; return s }(), 10, 10)...)
	pkts := packets(frames(specs))
	pkts[1] = chain(build(bb[0]), 100, 200)
	// LRO packets merged with each other and a frame.
	l := stream(func() spec { s := base(); s.sport = 5; return s }(), repeat(1000, 5)...)
	pkts = append(pkts, lro(l[0:2]), lro(l[2:4]), Packet{Segs: [][]byte{build(l[4])}, Len: len(build(l[4])), CsumOK: true})
	c := NewCoalescer(len(pkts), 0)
	if ws := c.Coalesce(pkts); ws[len(ws)-1].LRO != 2 {
		t.Fatalf("the LRO packets were not merged: %v", groups(ws))
	}
	if n := testing.AllocsPerRun(100, func() { c.Coalesce(pkts) }); n != 0 {
		t.Fatalf("Coalesce allocates %v times per call", n)
	}
}

func BenchmarkCoalesce(b *testing.B) {
	pkts := packets(frames(stream(base(), repeat(1448, 32)...)))
	c := NewCoalescer(len(pkts), 0)
	b.SetBytes(int64(32 * 1514))
	for b.Loop() {
		c.Coalesce(pkts)
	}
}

func TestCoalesceNoShortLast(t *testing.T) {
	pkts := packets(frames(stream(base(), 1000, 1000, 999, 1000)))
	c := NewCoalescer(4, 0)
	c.SetShortLast(false)
	ws := c.Coalesce(pkts)
	if got := groups(ws); !reflect.DeepEqual(got, [][]int{{0, 1}, {2}, {3}}) {
		t.Fatalf("groups %v", got)
	}
	checkWrites(t, pkts, ws, testMTU, true)
}

func TestCoalesceLROStaleLength(t *testing.T) {
	// An LRO frame whose NIC left the first packet's IP length: the frame
	// length wins.
	s := base()
	s.payload = payload(1000, 0)
	f := build(s)
	f = append(f, payload(2000, 5)...)
	pkts := []Packet{{Segs: [][]byte{f}, Len: len(f), LROSize: 1000}}
	ws := NewCoalescer(1, 0).Coalesce(pkts)
	segs, err := split(t, flatten(ws[0]), testMTU)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 3 {
		t.Fatalf("%d segments", len(segs))
	}
	for _, sg := range segs {
		checkFrame(t, sg)
	}
}

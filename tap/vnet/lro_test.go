package vnet

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// lroBurst makes a burst of LRO packets and plain frames from one stream:
// each element of parts is how many consecutive segments the next packet
// holds, 0 standing for one plain frame. It returns the burst and the
// stream's frames.
func lroBurst(specs []spec, parts ...int) ([]Packet, [][]byte) {
	var pkts []Packet
	k := 0
	for _, n := range parts {
		if n == 0 {
			f := build(specs[k])
			pkts = append(pkts, Packet{Segs: [][]byte{f}, Len: len(f), CsumOK: true})
			k++
			continue
		}
		pkts = append(pkts, lro(specs[k:k+n]))
		k += n
	}
	return pkts, frames(specs[:k])
}

// wantSegments checks that write w splits into exactly the frames want.
func wantSegments(t *testing.T, w Write, want [][]byte) {
	t.Helper()
	segs, err := split(t, flatten(w), testMTU)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != len(want) {
		t.Fatalf("%d segments, want %d", len(segs), len(want))
	}
	for k := range segs {
		if !bytes.Equal(segs[k], want[k]) {
			t.Fatalf("segment %d differs:\n got %x\nwant %x", k, segs[k], want[k])
		}
	}
}

func TestConsecutiveLROPacketsOfAFlowBecomeOneWriteWithTheirSegmentSize(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprint("v6=", v6), func(t *testing.T) {
			s := base()
			s.v6 = v6
			pkts, orig := lroBurst(stream(s, repeat(1000, 8)...), 4, 4)
			c := NewCoalescer(len(pkts), 0)
			ws := c.Coalesce(pkts)
			if len(ws) != 1 || !ws[0].Merged || ws[0].LRO != 2 {
				t.Fatalf("writes %v, LRO %d", groups(ws), ws[0].LRO)
			}
			if h := Decode(ws[0].Iov[0]); h.GSOSize != 1000 || h.Flags != FlagNeedsCsum {
				t.Fatalf("header %+v", h)
			}
			wantSegments(t, ws[0], orig)
			st := c.Stats()
			if st.LROWrites != 2 || st.LROMerged != 2 || st.MergedWrites != 1 || st.MergedPackets != 2 || st.Writes != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestPlainFramesJoinAnLROPacketAndAnLROPacketJoinsPlainFrames(t *testing.T) {
	specs := stream(base(), 1000, 1000, 1000, 1000, 1000, 1000, 1000, 400)
	for _, tc := range []struct {
		name  string
		parts []int
	}{
		{"LRO then frames, the last short", []int{4, 0, 0, 0, 0}},
		{"frames then LRO then a frame", []int{0, 0, 5, 0}},
		{"frame, LRO, frame, LRO", []int{0, 3, 0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkts, orig := lroBurst(specs, tc.parts...)
			ws := NewCoalescer(len(pkts), 0).Coalesce(pkts)
			if len(ws) != 1 || !ws[0].Merged {
				t.Fatalf("writes %v", groups(ws))
			}
			wantSegments(t, ws[0], orig)
			checkWrites(t, pkts, ws, testMTU, true)
		})
	}
}

func TestAnLROPacketJoinsOnlyWhereTheKernelKeepsEverySegmentBoundary(t *testing.T) {
	s := base()
	for _, tc := range []struct {
		name    string
		specs   []spec
		parts   []int
		maxSegs int
		edit    func([]Packet)
		want    [][]int
	}{
		{"a different LROSize", stream(s, 1000, 1000, 1200, 1200), []int{2, 2}, 0, nil, [][]int{{0}, {1}}},
		{"a payload not whole segments", stream(s, 1000, 1000, 1000, 500), []int{2, 2}, 0, nil, [][]int{{0}, {1}}},
		{"after a payload not whole segments", stream(s, 1000, 500, 1000, 1000), []int{2, 2}, 0, nil, [][]int{{0}, {1}}},
		{"a frame after a payload not whole segments", stream(s, 1000, 500, 1000), []int{2, 0}, 0, nil, [][]int{{0}, {1}}},
		{"a sequence gap", func() []spec { ss := stream(s, 1000, 1000, 1000, 1000); ss[2].seq++; ss[3].seq++; return ss }(),
			[]int{2, 2}, 0, nil, [][]int{{0}, {1}}},
		{"a different ack", func() []spec { ss := stream(s, 1000, 1000, 1000, 1000); ss[2].ack++; return ss }(),
			[]int{2, 2}, 0, nil, [][]int{{0}, {1}}},
		{"a different window", func() []spec { ss := stream(s, 1000, 1000, 1000, 1000); ss[2].window++; return ss }(),
			[]int{2, 2}, 0, nil, [][]int{{0}, {1}}},
		{"PSH on the first", func() []spec { ss := stream(s, 1000, 1000, 1000, 1000); ss[0].flags |= tcpPSH; return ss }(),
			[]int{2, 2}, 0, nil, [][]int{{0}, {1}}},
		{"PSH on the second closes", func() []spec { ss := stream(s, 1000, 1000, 1000, 1000, 1000); ss[2].flags |= tcpPSH; return ss }(),
			[]int{2, 2, 0}, 0, nil, [][]int{{0, 1}, {2}}},
		{"maxSegs segments", stream(s, repeat(1000, 8)...), []int{4, 4}, 6, nil, [][]int{{0}, {1}}},
		{"maxSegs with frames", stream(s, repeat(1000, 7)...), []int{4, 0, 0, 0}, 6, nil, [][]int{{0, 1, 2}, {3}}},
		{"an LRO packet of maxSegs segments starts nothing", stream(s, repeat(1000, 7)...), []int{6, 0}, 6, nil, [][]int{{0}, {1}}},
		{"64 KiB of payload", stream(s, repeat(1400, 47)...), []int{24, 23}, 0, nil, [][]int{{0}, {1}}},
		{"IOVMax iovecs", stream(s, repeat(8, 1200)...), []int{600, 600}, 2000, nil, [][]int{{0}, {1}}},
		{"checksums not verified", stream(s, 1000, 1000, 1000, 1000), []int{2, 2}, 0,
			func(p []Packet) { p[1].CsumOK = false }, [][]int{{0}, {1}}},
		{"an unverified LRO packet starts nothing", stream(s, 1000, 1000, 1000), []int{2, 0}, 0,
			func(p []Packet) { p[0].CsumOK = false }, [][]int{{0}, {1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkts, _ := lroBurst(tc.specs, tc.parts...)
			if tc.edit != nil {
				tc.edit(pkts)
			}
			ws := NewCoalescer(len(pkts), tc.maxSegs).Coalesce(pkts)
			if got := groups(ws); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("groups %v, want %v", got, tc.want)
			}
			checkWrites(t, pkts, ws, testMTU, true)
		})
	}
}

func TestLROPacketsKeepTheirFlowsOrder(t *testing.T) {
	a := stream(base(), 1000, 1000, 1000, 1000, 1200, 1200, 1000)
	b := base()
	b.sport, b.seq = 7, 50000
	bs := stream(b, 1000, 1000, 1000, 1000)
	// a's second LRO packet has another segment size: it must not join
	// the first's item, and a's last frame must not overtake it.
	pkts := []Packet{lro(a[0:2]), lro(bs[0:2]), lro(a[2:4]), lro(a[4:6]), lro(bs[2:4]), packets(frames(a[6:7]))[0]}
	pkts[5].CsumOK = true
	ws := NewCoalescer(len(pkts), 0).Coalesce(pkts)
	if got := groups(ws); !reflect.DeepEqual(got, [][]int{{0, 2}, {1, 4}, {3, 5}}) {
		t.Fatalf("groups %v", got)
	}
	checkWrites(t, pkts, ws, testMTU, true)
}

func TestAnLROPacketWithAStaleIPLengthMergesWithTheLengthOfItsFrame(t *testing.T) {
	specs := stream(base(), 1000, 1000, 1000, 1000)
	pkts, orig := lroBurst(specs, 2, 2)
	// A NIC that left the first frame's IP length and header checksum.
	copy(pkts[1].Segs[0], build(specs[2])[:34])
	ws := NewCoalescer(len(pkts), 0).Coalesce(pkts)
	if len(ws) != 1 {
		t.Fatalf("writes %v", groups(ws))
	}
	wantSegments(t, ws[0], orig)
}

// What keeps two frames apart (the kernel's GRO refuses them too) keeps an
// LRO packet apart from its flow's frames and LRO packets, either way round.
func TestAnLROPacketMergesOnlyWithHeadersAFrameWouldMergeWith(t *testing.T) {
	v4, v6 := base(), base()
	v6.v6 = true
	for _, tc := range []struct {
		name string
		s    spec
		edit func(*spec)
	}{
		{"TOS", v4, func(s *spec) { s.tos = 0x10 }},
		{"ECN", v4, func(s *spec) { s.tos = 0x03 }},
		{"TTL", v4, func(s *spec) { s.ttl-- }},
		{"DF", v4, func(s *spec) { s.df = false }},
		{"timestamps", v4, func(s *spec) { s.opts = []byte{1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 2} }},
		{"option length", v4, func(s *spec) { s.opts = nil }},
		{"VLAN tag", v4, func(s *spec) { s.vlan = 7 }},
		{"IPv4 options", v4, func(s *spec) { s.ipOpts = []byte{1, 1, 1, 0} }},
		{"CWR", v4, func(s *spec) { s.flags |= tcpCWR }},
		{"ECE", v4, func(s *spec) { s.flags |= tcpECE }},
		{"URG", v4, func(s *spec) { s.flags |= tcpURG }},
		{"FIN", v4, func(s *spec) { s.flags |= tcpFIN }},
		{"IPv6 traffic class", v6, func(s *spec) { s.tos = 0x10 }},
		{"IPv6 flow label", v6, func(s *spec) { s.flow = 5 }},
		{"IPv6 hop limit", v6, func(s *spec) { s.ttl-- }},
	} {
		for _, parts := range [][]int{{2, 2}, {2, 0}, {0, 2}} {
			t.Run(fmt.Sprint(tc.name, parts), func(t *testing.T) {
				specs := stream(tc.s, 1000, 1000, 1000, 1000)
				pkts, _ := lroBurst(specs, parts...)
				if got := groups(NewCoalescer(len(pkts), 0).Coalesce(pkts)); len(got) != 1 {
					t.Fatalf("unchanged: groups %v, want one write", got)
				}
				second := max(parts[0], 1) // the second packet's first segment
				tc.edit(&specs[second])
				pkts, _ = lroBurst(specs, parts...)
				ws := NewCoalescer(len(pkts), 0).Coalesce(pkts)
				if got := groups(ws); !reflect.DeepEqual(got, [][]int{{0}, {1}}) {
					t.Fatalf("groups %v, want each alone", got)
				}
				checkWrites(t, pkts, ws, testMTU, true)
			})
		}
	}
}

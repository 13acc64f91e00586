package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap/vnet"
	"github.com/kbridge/kbridge/tap/vnet/vnettest"
)

// superSpec is a TCP super-frame as a TAP with TSO hands it over.
type superSpec struct {
	v6        bool
	vlan      bool
	ipOpts    int // IPv4 option bytes, a multiple of 4
	tcpOpts   int // TCP option bytes, a multiple of 4
	payload   int
	gso       int  // gso_size
	flags     byte // TCP flags of the super-frame
	dstPort   uint16
	mtu       int // the link's, which may cut gso_size
	wantSegs  int
	wantMSS   int
	wantError bool
}

// build returns the virtio-net header and the frame: IPv4 ID and sequence
// number near their wrap, a payload of varied bytes, the pseudo-header sum
// in the TCP checksum field (CHECKSUM_PARTIAL).
func (s superSpec) build() (vnet.Hdr, []byte) {
	l2 := 14
	if s.vlan {
		l2 = 18
	}
	l3 := 20 + s.ipOpts
	if s.v6 {
		l3 = 40
	}
	l4 := 20 + s.tcpOpts
	f := make([]byte, l2+l3+l4+s.payload)
	copy(f, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1})
	et := f[12:]
	if s.vlan {
		binary.BigEndian.PutUint16(f[12:], 0x8100)
		binary.BigEndian.PutUint16(f[14:], 42)
		et = f[16:]
	}
	ip := f[l2:]
	var src, dst []byte
	if s.v6 {
		binary.BigEndian.PutUint16(et, 0x86dd)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(l4+s.payload))
		ip[6], ip[7] = 6, 64
		copy(ip[8:], []byte{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
		copy(ip[24:], []byte{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
		src, dst = ip[8:24], ip[24:40]
	} else {
		binary.BigEndian.PutUint16(et, 0x0800)
		ip[0] = 0x40 | byte(l3/4)
		binary.BigEndian.PutUint16(ip[2:], uint16(l3+l4+s.payload))
		binary.BigEndian.PutUint16(ip[4:], 0xfffa)
		ip[6], ip[8], ip[9] = 0x40, 64, 6
		copy(ip[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
		for i := 20; i < l3; i++ {
			ip[i] = 1 // NOP options
		}
		binary.BigEndian.PutUint16(ip[10:], vnet.Checksum(ip[:l3], 0))
		src, dst = ip[12:16], ip[16:20]
	}
	tcp := ip[l3:]
	port := s.dstPort
	if port == 0 {
		port = 40000
	}
	binary.BigEndian.PutUint16(tcp[0:], 5201)
	binary.BigEndian.PutUint16(tcp[2:], port)
	binary.BigEndian.PutUint32(tcp[4:], 0xffffe000)
	binary.BigEndian.PutUint32(tcp[8:], 7)
	tcp[12] = byte(l4/4) << 4
	tcp[13] = s.flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	for i := 20; i < l4; i++ {
		tcp[i] = byte(i * 13) // option bytes, copied as they are
	}
	for i := range s.payload {
		tcp[l4+i] = byte(i*31 + i>>8)
	}
	binary.BigEndian.PutUint16(tcp[16:], vnet.Fold(vnet.PseudoHeaderSum(6, src, dst, l4+s.payload)))
	h := vnet.Hdr{
		Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: uint16(s.gso),
		HdrLen: uint16(l2 + l3 + l4), CsumStart: uint16(l2 + l3), CsumOffset: 16,
	}
	if s.v6 {
		h.GSOType = vnet.GSOTCPv6
	}
	return h, f
}

// cut parses the super-frame as the kernel side does and returns it with
// its TSO description and the frames vnet.Super.Segment cuts from it.
func (s superSpec) cut(t *testing.T) ([]byte, bridge.TSOFrame, [][]byte) {
	t.Helper()
	h, f := s.build()
	sup, err := vnet.Parse(h, f, s.mtu)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	l2, l3, l4, mss, v6, ok := sup.TSO()
	if !ok {
		t.Fatal("not a TCP super-frame")
	}
	want := make([][]byte, sup.N())
	for k := range want {
		d := make([]byte, 1<<16)
		want[k] = d[:sup.Segment(k, f, d)]
	}
	return f, bridge.TSOFrame{L2: l2, L3: l3, L4: l4, MSS: mss, IPv6: v6}, want
}

// queue0 opens queue 0 of a bed's port as kbridge would.
func queue0(t *testing.T, b *bed) *ring.Queue {
	t.Helper()
	port, err := ring.OpenPort(b.Name)
	if err != nil {
		t.Fatal(err)
	}
	q, err := port.Queue(0)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// splitIn is q's from_kernel writer with bursts of batch slots.
func splitIn(t *testing.T, q *ring.Queue, batch int) *ring.In {
	t.Helper()
	in, err := q.In(batch, 1600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	return in
}

// Ring mode cuts a TCP super-frame straight into mbufs: every mbuf holds,
// byte for byte, the frame vnet.Super.Segment cuts from the same input
// (headers, IPv4 length, ID and checksum, IPv6 length, sequence numbers,
// FIN/PSH on the last only, CWR on the first only, the TCP checksum), and
// a super-frame of more segments than a burst holds goes over in several
// hand-overs. A segment larger than an mbuf is refused before anything is
// taken from the pool.
func TestRingModeCutsASuperFrameIntoTheFramesTheGoSplitMakes(t *testing.T) {
	const psh, fin, cwr, ack = 0x08, 0x01, 0x80, 0x10
	cases := []struct {
		name  string
		batch int
		s     superSpec
	}{
		{"IPv4 with a short last segment", 32, superSpec{payload: 10*1448 + 700, gso: 1448, flags: ack | psh, mtu: 1500, wantSegs: 11}},
		{"IPv4 of an exact multiple of mss with FIN, PSH and CWR", 32,
			superSpec{payload: 8 * 1448, gso: 1448, flags: ack | psh | fin | cwr, mtu: 1500, wantSegs: 8}},
		{"IPv6 with TCP options and an odd last segment", 32,
			superSpec{v6: true, tcpOpts: 12, payload: 5*1428 + 333, gso: 1428, flags: ack | psh | cwr, mtu: 1500, wantSegs: 6}},
		{"IPv4 with IP and TCP options", 32,
			superSpec{ipOpts: 8, tcpOpts: 12, payload: 3*1420 + 1, gso: 1420, flags: ack, mtu: 1500, wantSegs: 4}},
		{"odd segments, each with a tail byte", 32, superSpec{payload: 7*1001 + 3, gso: 1001, flags: ack | fin, mtu: 1500, wantSegs: 8}},
		{"a VLAN tag", 32, superSpec{vlan: true, payload: 4 * 1460, gso: 1460, flags: ack, mtu: 1500, wantSegs: 4}},
		{"an mss cut by the MTU", 32,
			superSpec{tcpOpts: 12, payload: 9000, gso: 8948, flags: ack | psh, mtu: 1500, wantSegs: 7, wantMSS: 1448}},
		{"more segments than a burst holds", 8, superSpec{payload: 20*1448 + 5, gso: 1448, flags: ack | psh, mtu: 1500, wantSegs: 21}},
		{"64 KiB in 45 segments", 32, superSpec{payload: 45 * 1448, gso: 1448, flags: ack | psh, mtu: 1500, wantSegs: 45}},
		{"IPv6 over more than a burst", 16, superSpec{v6: true, payload: 40 * 1440, gso: 1440, flags: ack | fin, mtu: 1500, wantSegs: 40}},
		{"no payload", 32, superSpec{payload: 0, gso: 1448, flags: ack | fin, mtu: 1500, wantSegs: 1}},
		{"a segment larger than an mbuf", 32, superSpec{payload: 3 * 4000, gso: 4000, flags: ack, mtu: 9000, wantError: true}},
	}
	b := newBed(t, bedOpts{noStart: true, ringSize: 256})
	q := queue0(t, b)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := splitIn(t, q, tc.batch)
			f, tso, want := tc.s.cut(t)
			if tc.s.wantMSS != 0 && tso.MSS != tc.s.wantMSS {
				t.Fatalf("mss %d, want %d cut by the MTU", tso.MSS, tc.s.wantMSS)
			}
			before := b.Pool.InUse()
			res, err := in.PutSplit(f, tso)
			if tc.s.wantError {
				if !errors.Is(err, bridge.ErrSegmentTooLarge) || res != (bridge.PutResult{}) {
					t.Fatalf("PutSplit = %+v, %v; want ErrSegmentTooLarge", res, err)
				}
				if n := b.Pool.InUse(); n != before {
					t.Errorf("%d mbufs in use after a refusal, %d before", n, before)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(want) != tc.s.wantSegs || res != (bridge.PutResult{Queued: len(want)}) {
				t.Fatalf("PutSplit = %+v for %d segments (want %d)", res, len(want), tc.s.wantSegs)
			}
			for k := range want {
				got, m, ok := b.Port.CollectOne(0)
				if !ok {
					t.Fatalf("the app got %d frames, want %d", k, len(want))
				}
				if m.NbSegs != 1 || m.OlFlags != 0 {
					t.Errorf("frame %d: %d mbufs, flags %#x; want 1 and none", k, m.NbSegs, m.OlFlags)
				}
				if !bytes.Equal(got, want[k]) {
					t.Errorf("frame %d of %d differs from Segment's:\n got %x\nwant %x", k, len(want), head(got), head(want[k]))
				}
			}
			if _, _, ok := b.Port.CollectOne(0); ok {
				t.Error("the app got more frames than Segment cuts")
			}
			if n := b.Pool.InUse(); n != before {
				t.Errorf("%d mbufs in use after the app took every frame, %d before", n, before)
			}
		})
	}
}

// head is the headers of a frame, for a failure message.
func head(f []byte) string { return fmt.Sprintf("%x", f[:min(len(f), 96)]) }

// A super-frame cut into a from_kernel ring near its reserve: the segments
// above the reserve are queued and the rest counted as refused for room
// under the frame's class; a control frame's segments (BGP) go into the
// reserve as far as it reaches. What is queued is the first segments.
func TestTheReserveAdmitsPartOfACutSuperFrameAndCountsTheRest(t *testing.T) {
	// A ring of 64: 63 slots, the last 63/8 = 7 kept for the control plane.
	const ringCap, reserve = 63, 7
	b := newBed(t, bedOpts{noStart: true, ringSize: 64})
	in := splitIn(t, queue0(t, b), 32)
	fill := make([]int, 0, 32)
	for i, n := range []int{32, 11} {
		fill = fill[:0]
		for k := range n {
			copy(in.Slot(k), testFrame(100, uint32(i*32+k)))
			fill = append(fill, 100)
		}
		if res := in.Put(fill); res.Queued != n {
			t.Fatalf("filling the ring: %+v", res)
		}
	}
	in.SetReserve(true)
	room := ringCap - 43

	f, tso, want := superSpec{payload: 20 * 1448, gso: 1448, flags: 0x18, mtu: 1500}.cut(t)
	res, err := in.PutSplit(f, tso)
	if err != nil {
		t.Fatal(err)
	}
	if res != (bridge.PutResult{Queued: room - reserve, RingFull: len(want) - (room - reserve)}) {
		t.Fatalf("PutSplit = %+v; want %d queued and %d refused for room", res, room-reserve, len(want)-(room-reserve))
	}
	var s copp.Snapshot
	if !in.Reserve(&s) || s.FromKernelRoom[copp.Default] != uint64(len(want)-(room-reserve)) || s.FromKernelReserved != 0 {
		t.Errorf("reserved %d, refused for room %v; want 0 and %d default", s.FromKernelReserved, s.FromKernelRoom, len(want)-(room-reserve))
	}

	bgp, btso, bwant := superSpec{payload: 10 * 1448, gso: 1448, flags: 0x18, dstPort: 179, mtu: 1500}.cut(t)
	res, err = in.PutSplit(bgp, btso)
	if err != nil {
		t.Fatal(err)
	}
	if res != (bridge.PutResult{Queued: reserve, RingFull: len(bwant) - reserve}) {
		t.Fatalf("PutSplit of BGP = %+v; want %d queued into the reserve and %d refused", res, reserve, len(bwant)-reserve)
	}
	s = copp.Snapshot{}
	in.Reserve(&s)
	if s.FromKernelReserved != reserve || s.FromKernelRoom[copp.BGP] != uint64(len(bwant)-reserve) {
		t.Errorf("reserved %d, refused for room %v; want %d and %d bgp", s.FromKernelReserved, s.FromKernelRoom, reserve, len(bwant)-reserve)
	}
	got := b.Port.Collect(0, 128)
	if len(got) != ringCap {
		t.Fatalf("the app got %d frames, want a full ring of %d", len(got), ringCap)
	}
	for k := range room - reserve {
		if !bytes.Equal(got[43+k], want[k]) {
			t.Errorf("queued frame %d is not segment %d", 43+k, k)
		}
	}
	for k := range reserve {
		if !bytes.Equal(got[ringCap-reserve+k], bwant[k]) {
			t.Errorf("reserved frame %d is not BGP segment %d", k, k)
		}
	}
}

// A super-frame from the kernel side reaches a ring-mode app without TSO as
// MTU frames cut in C: one cgo call for the whole super-frame and no
// allocation, counted as a split read with its frames.
func TestASuperFrameCutInCCostsOneCgoCallAndNoAllocation(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 1024})
	w, peer := realWorker(t, b, true)
	const segs = 45
	super := vnettest.DefaultFlow().Super(1, 1, segs, 1448, vnettest.PSH)
	c0 := runtime.NumCgoCall()
	if _, err := unix.Write(peer, super); err != nil {
		t.Fatal(err)
	}
	if n := w.FromKernel(); n != segs {
		t.Fatalf("FromKernel moved %d, want %d", n, segs)
	}
	if calls := runtime.NumCgoCall() - c0; calls != 1 {
		t.Errorf("FromKernel made %d cgo calls for a super-frame of %d segments, want 1", calls, segs)
	}
	if got := b.Port.Drain(0); got != segs {
		t.Fatalf("the app got %d frames, want %d", got, segs)
	}
	allocs := testing.AllocsPerRun(200, func() {
		_, _ = unix.Write(peer, super)
		w.FromKernel()
		b.Port.Drain(0)
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per super-frame, want 0", allocs)
	}
	s := w.Counters().Snapshot()
	if s.Offload.SplitReads != 202 || s.Offload.SplitFrames != 202*segs || s.FromKernelPackets != 202*segs ||
		s.FromKernelBytes != 202*segs*(54+1448) {
		t.Errorf("split reads %d, frames %d, from_kernel %d packets %d bytes; want %d, %d, %d, %d",
			s.Offload.SplitReads, s.Offload.SplitFrames, s.FromKernelPackets, s.FromKernelBytes,
			202, 202*segs, 202*segs, 202*segs*(54+1448))
	}
}

// A frame whose checksum the kernel left partial (NEEDS_CSUM) reaches a
// ring-mode app finished in C as the in buffer copies it (burst_csum.h's
// sum), byte for byte the frame with its full checksum, for odd and even
// lengths and no payload: one cgo call for the burst, no allocation, each
// counted as csum_from_kernel.
func TestAPartialChecksumIsFinishedInCAsTheFrameIsCopied(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 1024})
	flow := vnettest.DefaultFlow()
	payloads := []int{0, 1, 101, 1400, 1460}

	// The in buffer alone: slots marked with PartialCsum come out finished.
	in := splitIn(t, queue0(t, b), 32)
	lens := make([]int, len(payloads))
	for i, p := range payloads {
		lens[i] = copy(in.Slot(i), flow.Partial(uint32(i), 1, p, vnettest.ACK)[vnet.HdrLen:])
		in.PartialCsum(i, 34, 16)
	}
	if res := in.Put(lens); res.Queued != len(payloads) {
		t.Fatalf("Put = %+v", res)
	}
	for i, f := range b.Port.Collect(0, 64) {
		if want := flow.Segment(uint32(i), 1, payloads[i], vnettest.ACK); !bytes.Equal(f, want) {
			t.Errorf("Put, payload %d: the app got\n %s\nwant\n %s", payloads[i], head(f), head(want))
		}
	}

	// Through the worker and the kernel side, which leaves the sum to C.
	w, peer := realWorker(t, b, true)
	for i, p := range payloads {
		if _, err := unix.Write(peer, flow.Partial(uint32(1000*i), uint16(i), p, vnettest.ACK|vnettest.PSH)); err != nil {
			t.Fatal(err)
		}
	}
	c0 := runtime.NumCgoCall()
	if n := w.FromKernel(); n != len(payloads) {
		t.Fatalf("FromKernel moved %d, want %d", n, len(payloads))
	}
	if calls := runtime.NumCgoCall() - c0; calls != 1 {
		t.Errorf("FromKernel made %d cgo calls for a burst, want 1", calls)
	}
	got := b.Port.Collect(0, 64)
	if len(got) != len(payloads) {
		t.Fatalf("the app got %d frames, want %d", len(got), len(payloads))
	}
	for i, p := range payloads {
		if want := flow.Segment(uint32(1000*i), uint16(i), p, vnettest.ACK|vnettest.PSH); !bytes.Equal(got[i], want) {
			t.Errorf("payload %d: the app got\n %s\nwant\n %s", p, head(got[i]), head(want))
		}
	}
	partial := flow.Partial(7, 7, 1000, vnettest.ACK)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = unix.Write(peer, partial)
		w.FromKernel()
		b.Port.Drain(0)
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per frame, want 0", allocs)
	}
	if s := w.Counters().Snapshot(); s.Offload.CsumFromKernel != uint64(len(payloads)+101) {
		t.Errorf("csum_from_kernel %d, want %d", s.Offload.CsumFromKernel, len(payloads)+101)
	}
}

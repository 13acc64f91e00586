package tap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/bridge/bridgetest"
	"github.com/kbridge/kbridge/internal/limits"
	"github.com/kbridge/kbridge/policy"
	"github.com/kbridge/kbridge/tap/vnet"
	"github.com/kbridge/kbridge/tap/vnet/vnettest"
)

const mtu = 1500

// newTestQueue returns a Queue over one end of a SOCK_SEQPACKET pair, which
// keeps frame boundaries like a TAP fd, and the other end for the test.
func newTestQueue(t *testing.T, merge bool) (*Queue, int) {
	t.Helper()
	return newTestQueueMax(t, merge, 0)
}

// newTestQueueMax is newTestQueue with room for SetMTU up to maxMTU.
func newTestQueueMax(t *testing.T, merge bool, maxMTU int) (*Queue, int) {
	t.Helper()
	fd, peer, err := bridgetest.SeqPacket()
	if err != nil {
		t.Fatal(err)
	}
	q := NewQueue(fd, QueueConfig{MTU: mtu, MaxMTU: maxMTU, Batch: 32, MaxSegs: 4, Merge: merge})
	t.Cleanup(func() { q.Close(); unix.Close(peer) })
	return q, peer
}

// newTestWorker returns a worker between the fakes and q, for the tests that
// drive q through the engine's hand-over (ToKernel, FromKernel) rather than
// by hand. It is never Run.
func newTestWorker(t *testing.T, q *Queue, out *bridgetest.Out, in *bridgetest.In) *bridge.Worker {
	t.Helper()
	w, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: policy.Default()}, bridgetest.App(out, in, &bridgetest.Waker{Out: out}), q)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// slotsOf returns in's slots and room for what Read makes of them.
func slotsOf(in *bridgetest.In) ([][]byte, []bridge.Frame) {
	slots := make([][]byte, in.Cap())
	for i := range slots {
		slots[i] = in.Slot(i)
	}
	return slots, make([]bridge.Frame, in.Cap())
}

var flow = vnettest.DefaultFlow()

func tcpFrame(seq uint32, id uint16, payload int, flags byte) []byte {
	return flow.Segment(seq, id, payload, flags)
}

const ack, psh = vnettest.ACK, vnettest.PSH

func frame(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	if n >= 14 {
		b[12], b[13] = 0x08, 0x06 // ARP: never merged
	}
	return b
}

type wire struct {
	hdr   vnet.Hdr
	frame []byte
}

func readAll(t *testing.T, fd int) []wire {
	t.Helper()
	var got []wire
	buf := make([]byte, maxRead)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < vnet.HdrLen {
			t.Fatalf("a %d-byte write has no virtio-net header", n)
		}
		got = append(got, wire{vnet.Decode(buf), append([]byte(nil), buf[vnet.HdrLen:n]...)})
	}
}

func split(b []byte, sizes ...int) [][]byte {
	var segs [][]byte
	for _, s := range sizes {
		segs = append(segs, b[:s])
		b = b[s:]
	}
	return append(segs, b)
}

func TestWriteAppliesFrameRules(t *testing.T) {
	for _, merge := range []bool{false, true} {
		q, peer := newTestQueue(t, merge)
		out := bridgetest.NewOut(32, 4)
		w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
		c := w.Counters()
		good1 := frame(60, 1)
		good2 := frame(mtu+14, 2) // the largest legal frame
		chained := frame(1000, 3)
		vlan := frame(mtu+18, 4) // one VLAN tag allows 4 bytes more
		vlan[12], vlan[13] = 0x81, 0x00
		out.Enqueue(
			bridgetest.Frame(good1),
			bridgetest.Frame(good2),
			bridgetest.Packet{Segs: split(chained, 100, 300, 500)},
			bridgetest.Frame(vlan),
			bridgetest.Packet{Segs: [][]byte{frame(200, 9)}, CsumGood: true},
			bridgetest.Frame(frame(mtu+15, 5)),                            // oversize
			bridgetest.Frame(frame(13, 6)),                                // runt
			bridgetest.Packet{Segs: split(frame(500, 7), 50, 50, 50, 50)}, // 5 segments > 4
			bridgetest.Packet{Segs: [][]byte{frame(100, 8)}, ClaimLen: 90},
		)
		w.ToKernel()
		got := readAll(t, peer)
		want := [][]byte{good1, good2, chained, vlan, frame(200, 9)}
		if len(got) != len(want) {
			t.Fatalf("merge=%v: kernel got %d frames, want %d", merge, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i].frame, want[i]) {
				t.Errorf("merge=%v: frame %d differs: got %d bytes, want %d", merge, i, len(got[i].frame), len(want[i]))
			}
			wantHdr := vnet.Hdr{}
			if i == 4 {
				wantHdr.Flags = vnet.FlagDataValid // the app's NIC checked it
			}
			if got[i].hdr != wantHdr {
				t.Errorf("merge=%v: frame %d header %+v, want %+v", merge, i, got[i].hdr, wantHdr)
			}
		}
		for reason, n := range map[int]uint64{bridge.DropOversize: 1, bridge.DropRunt: 1, bridge.DropTooManySegs: 1, bridge.DropMalformed: 1} {
			if got := c.Drops[reason].Load(); got != n {
				t.Errorf("merge=%v: drops[%s] = %d, want %d", merge, bridge.DropNames[reason], got, n)
			}
		}
		if c.ToKernelPackets.Load() != 5 || out.Delivered != 5 {
			t.Errorf("merge=%v: to_kernel_packets = %d, delivered = %d, want 5", merge, c.ToKernelPackets.Load(), out.Delivered)
		}
	}
}

// A burst of one flow's segments goes down as one GSO write that the kernel's
// side splits back into the very same frames.
func TestWriteMergesAFlowIntoOneGSOWrite(t *testing.T) {
	q, peer := newTestQueue(t, true)
	out := bridgetest.NewOut(32, 4)
	w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
	c := w.Counters()
	var frames [][]byte
	seq := uint32(1000)
	for i := range 10 {
		n := 1448
		fl := byte(ack)
		if i == 9 {
			n, fl = 500, ack|psh // a short last segment, with PSH
		}
		f := tcpFrame(seq, uint16(100+i), n, fl)
		seq += uint32(n)
		frames = append(frames, f)
		out.Enqueue(bridgetest.Frame(f))
	}
	arp := frame(60, 1)
	out.Enqueue(bridgetest.Frame(arp))
	w.ToKernel()
	got := readAll(t, peer)
	if len(got) != 2 {
		t.Fatalf("%d writes, want 2 (the merged flow, the ARP frame)", len(got))
	}
	h := got[0].hdr
	if h.GSOType != vnet.GSOTCPv4 || h.GSOSize != 1448 || h.Flags != vnet.FlagNeedsCsum || h.CsumStart != 34 || h.CsumOffset != 16 {
		t.Fatalf("merged header %+v", h)
	}
	s, err := vnet.Parse(h, got[0].frame, mtu)
	if err != nil {
		t.Fatal(err)
	}
	if s.N() != 10 {
		t.Fatalf("the merged write splits into %d frames, want 10", s.N())
	}
	dst := make([]byte, FrameLen(mtu))
	for k := range 10 {
		n := s.Segment(k, got[0].frame, dst)
		if !bytes.Equal(dst[:n], frames[k]) {
			t.Errorf("segment %d differs from the frame the app sent", k)
		}
	}
	if !bytes.Equal(got[1].frame, arp) {
		t.Error("the ARP frame came out changed")
	}
	if c.Offload.MergedWrites.Load() != 1 || c.Offload.MergedPackets.Load() != 10 || c.ToKernelPackets.Load() != 11 || out.Delivered != 11 {
		t.Errorf("merged writes %d, merged packets %d, to kernel %d, delivered %d",
			c.Offload.MergedWrites.Load(), c.Offload.MergedPackets.Load(), c.ToKernelPackets.Load(), out.Delivered)
	}
	if o := c.Offload.Snapshot(); o.CoalescePackets != 11 || o.CoalesceWrites != 2 || o.BadCsum != 0 {
		t.Errorf("coalescer saw %d packets, planned %d writes, %d bad checksums: want 11, 2, 0",
			o.CoalescePackets, o.CoalesceWrites, o.BadCsum)
	}
}

// A segment with a wrong TCP checksum is not merged (the kernel would take a
// NEEDS_CSUM write as verified): it goes down alone and the coalescer's
// count of bad checksums, exported to operators, says so.
func TestBadChecksumIsCountedAndNotMerged(t *testing.T) {
	q, peer := newTestQueue(t, true)
	out := bridgetest.NewOut(32, 4)
	w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
	seq := uint32(1)
	for i := range 3 {
		f := tcpFrame(seq, uint16(i), 1000, ack)
		if i == 1 {
			f[14+20+16] ^= 0xff // the TCP checksum
		}
		seq += 1000
		out.Enqueue(bridgetest.Frame(f))
	}
	w.ToKernel()
	got := readAll(t, peer)
	o := w.Counters().Offload.Snapshot()
	if len(got) != 3 || o.BadCsum != 1 || o.MergedWrites != 0 || o.CoalescePackets != 3 {
		t.Errorf("%d writes, %d bad checksums, %d merged writes, %d packets coalesced: want 3, 1, 0, 3",
			len(got), o.BadCsum, o.MergedWrites, o.CoalescePackets)
	}
}

// A kernel that refuses the merged write gets the same frames one by one,
// and the queue stops merging.
func TestRefusedMergedWriteIsRedoneFrameByFrame(t *testing.T) {
	q, peer := newTestQueue(t, true)
	refuseGSO(t)
	out := bridgetest.NewOut(32, 4)
	w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
	c := w.Counters()
	seq := uint32(1)
	for range 4 {
		out.Enqueue(bridgetest.Frame(tcpFrame(seq, 1, 1000, ack)))
		seq += 1000
	}
	w.ToKernel()
	got := readAll(t, peer)
	if len(got) != 4 || c.Offload.Fallbacks.Load() != 1 || c.ToKernelPackets.Load() != 4 || q.Merging() {
		t.Fatalf("%d writes, %d fallbacks, %d packets, merging %v: want 4, 1, 4, false",
			len(got), c.Offload.Fallbacks.Load(), c.ToKernelPackets.Load(), q.Merging())
	}
	for _, w := range got {
		if w.hdr != (vnet.Hdr{}) {
			t.Errorf("frame-by-frame write with header %+v", w.hdr)
		}
	}
}

// refuseGSO makes writev refuse GSO writes with EINVAL, as some kernels do,
// until the test ends.
func refuseGSO(t *testing.T) {
	real := sysWritev
	sysWritev = func(fd int, iov []unix.Iovec) unix.Errno {
		if vnet.Decode(unsafe.Slice(iov[0].Base, iov[0].Len)).GSOType != vnet.GSONone {
			return unix.EINVAL
		}
		return real(fd, iov)
	}
	t.Cleanup(func() { sysWritev = real })
}

func TestWriteErrorCountsAndGoesOn(t *testing.T) {
	q, _ := newTestQueue(t, true)
	if err := unix.Shutdown(q.Fd(), unix.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	out := bridgetest.NewOut(32, 4)
	w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
	c := w.Counters()
	out.Enqueue(bridgetest.Frame(frame(100, 1)), bridgetest.Frame(frame(100, 2)))
	w.ToKernel()
	if got := c.Drops[bridge.DropTAPWriteError].Load(); got != 2 {
		t.Fatalf("tap_write_error = %d, want 2", got)
	}
	out.Next()
	if out.Released != 2 {
		t.Errorf("released %d, want 2: failed writes must still free their mbufs", out.Released)
	}
}

func send(t *testing.T, fd int, h vnet.Hdr, f []byte) {
	t.Helper()
	b := make([]byte, vnet.HdrLen+len(f))
	h.Encode(b)
	copy(b[vnet.HdrLen:], f)
	if _, err := unix.Write(fd, b); err != nil {
		t.Fatal(err)
	}
}

func TestReadAppliesFrameRules(t *testing.T) {
	q, peer := newTestQueue(t, true)
	slots, frames := slotsOf(bridgetest.NewIn(32, FrameLen(mtu)))
	var r bridge.Result
	f1, f2 := frame(64, 1), frame(mtu+14, 2)
	send(t, peer, vnet.Hdr{}, f1)
	send(t, peer, vnet.Hdr{}, f2)
	send(t, peer, vnet.Hdr{}, frame(mtu+15, 3))                             // oversize
	send(t, peer, vnet.Hdr{}, frame(10, 4))                                 // runt
	send(t, peer, vnet.Hdr{GSOType: vnet.GSOTCPv4 | vnet.GSOECN}, f1)       // bad header
	send(t, peer, vnet.Hdr{Flags: vnet.FlagNeedsCsum, CsumStart: 9999}, f1) // bad header
	n := q.Read(slots, frames, 0, &r)
	if n != 2 || r.Dropped != 4 {
		t.Fatalf("Read filled %d, dropped %d, want 2 and 4", n, r.Dropped)
	}
	if !bytes.Equal(slots[0][:frames[0].Len], f1) || !bytes.Equal(slots[1][:frames[1].Len], f2) {
		t.Error("legal frames changed on the way")
	}
	for reason, want := range map[int]uint64{bridge.DropOversize: 1, bridge.DropRunt: 1, bridge.DropBadVnetHdr: 2} {
		if got := r.Drops[reason]; got != want {
			t.Errorf("drops[%s] = %d, want %d", bridge.DropNames[reason], got, want)
		}
	}
}

// A frame whose checksum the kernel left partial is finished by the kernel
// side, or, with ReadCsum (an app side that finishes it in C), left as the
// kernel wrote it with its checksum's place in the Frame; counted either way.
func TestReadLeavesAPartialChecksumToAnAppSideThatFinishesIt(t *testing.T) {
	q, peer := newTestQueue(t, true)
	slots, frames := slotsOf(bridgetest.NewIn(32, FrameLen(mtu)))
	for _, payload := range []int{0, 101, 1400} {
		partial := flow.Partial(9, 3, payload, psh|0x10)
		whole := flow.Segment(9, 3, payload, psh|0x10)
		for _, flags := range []bridge.ReadFlags{0, bridge.ReadCsum} {
			var r bridge.Result
			if _, err := unix.Write(peer, partial); err != nil {
				t.Fatal(err)
			}
			if n := q.Read(slots, frames, flags, &r); n != 1 {
				t.Fatalf("payload %d, flags %d: Read filled %d, want 1", payload, flags, n)
			}
			got, f := slots[0][:frames[0].Len], frames[0]
			if r.Offload.CsumFromKernel != 1 {
				t.Errorf("payload %d, flags %d: csum_from_kernel %d, want 1", payload, flags, r.Offload.CsumFromKernel)
			}
			if flags == 0 {
				if !bytes.Equal(got, whole) || f.CsumStart != 0 {
					t.Errorf("payload %d: the kernel side did not finish the checksum (start %d)", payload, f.CsumStart)
				}
				continue
			}
			if !bytes.Equal(got, partial[vnet.HdrLen:]) || f.CsumStart != 34 || f.CsumOffset != 16 {
				t.Errorf("payload %d: with ReadCsum got start %d offset %d, the frame unchanged: %v; want 34, 16, true",
					payload, f.CsumStart, f.CsumOffset, bytes.Equal(got, partial[vnet.HdrLen:]))
			}
		}
	}
}

// A 64 KiB super-frame is split across bursts: what does not fit in one
// waits for the next Read, in order.
func TestReadSplitsSuperFramesAcrossBursts(t *testing.T) {
	q, peer := newTestQueue(t, true)
	slots, frames := slotsOf(bridgetest.NewIn(8, FrameLen(mtu)))
	var r bridge.Result
	const segs, mss = 20, 1448
	want := flow.Stream(5000, 1, segs, mss, psh)
	if _, err := unix.Write(peer, flow.Super(5000, 1, segs, mss, psh)); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for range 5 {
		n := q.Read(slots, frames, 0, &r)
		for i := range n {
			got = append(got, append([]byte(nil), slots[i][:frames[i].Len]...))
		}
	}
	if len(got) != segs {
		t.Fatalf("got %d frames, want %d", len(got), segs)
	}
	for k := range want {
		if !bytes.Equal(got[k], want[k]) {
			t.Errorf("frame %d differs", k)
		}
	}
	if r.Offload.SplitReads != 1 || r.Offload.SplitFrames != segs {
		t.Errorf("split reads %d frames %d", r.Offload.SplitReads, r.Offload.SplitFrames)
	}
}

// The kernel side's part of the hot path allocates nothing, merged and split
// bursts included.
func TestQueueHotPathDoesNotAllocate(t *testing.T) {
	q, peer := newTestQueue(t, true)
	out := bridgetest.NewOut(32, 4)
	in := bridgetest.NewIn(32, FrameLen(mtu))
	in.Discard = true
	w := newTestWorker(t, q, out, in)
	c := w.Counters()
	var burst []bridgetest.Packet
	seq := uint32(1)
	for range 16 {
		burst = append(burst, bridgetest.Frame(tcpFrame(seq, 1, 1000, ack)))
		seq += 1000
	}
	burst = append(burst, bridgetest.Frame(frame(60, 1)))
	wireSuper := flow.Super(1, 1, 10, 1448, 0)
	buf := make([]byte, maxRead)
	round := func() {
		out.Enqueue(burst...)
		w.ToKernel()
		drain(peer, buf)
		_, _ = unix.Write(peer, wireSuper)
		w.FromKernel()
	}
	round()
	if allocs := testing.AllocsPerRun(500, round); allocs != 0 {
		t.Errorf("%.2f allocations per round, want 0", allocs)
	}
	if c.Offload.MergedWrites.Load() != 502 || c.Offload.SplitFrames.Load() != 5020 {
		t.Errorf("merged writes %d, split frames %d: the rounds did not exercise the offloads",
			c.Offload.MergedWrites.Load(), c.Offload.SplitFrames.Load())
	}
}

// An app that declared TSO gets a super-frame whole, after the frames read
// before it and in the same poll; one its port cannot take whole is split as
// for any app. A poll that only handed a super-frame over is work: the
// worker is busy, not idle.
func TestReadHandsSuperFramesToATSOApp(t *testing.T) {
	q, peer := newTestQueue(t, true)
	in := bridgetest.NewIn(8, FrameLen(mtu))
	in.TSO = true
	w := newTestWorker(t, q, bridgetest.NewOut(8, 4), in)
	c := w.Counters()
	arp := frame(60, 1)
	send(t, peer, vnet.Hdr{}, arp)
	if _, err := unix.Write(peer, flow.Super(5000, 1, 20, 1448, psh)); err != nil {
		t.Fatal(err)
	}
	if n := w.FromKernel(); n != 2 {
		t.Fatalf("FromKernel moved %d, want 2: the ARP frame and the super-frame", n)
	}
	if got := in.Received(); len(got) != 1 || !bytes.Equal(got[0], arp) || len(in.Supers) != 1 {
		t.Fatalf("%d frames, %d super-frames: want the ARP frame, then the super-frame", len(got), len(in.Supers))
	}
	got := in.Supers[0]
	if got.L2 != 14 || got.L3 != 20 || got.L4 != 20 || got.MSS != 1448 || got.IPv6 || len(got.Frame) != 14+40+20*1448 {
		t.Errorf("super-frame handed over as %+v, %d bytes", got.TSOFrame, len(got.Frame))
	}
	if c.Offload.TSOToApp.Load() != 1 || c.FromKernelPackets.Load() != 2 || c.FromKernelBytes.Load() != uint64(len(arp)+len(got.Frame)) {
		t.Errorf("tso_to_app %d, from_kernel_packets %d, bytes %d, want 1, 2 and %d", c.Offload.TSOToApp.Load(),
			c.FromKernelPackets.Load(), c.FromKernelBytes.Load(), len(arp)+len(got.Frame))
	}

	// A poll that moved nothing but a super-frame counts as work.
	if _, err := unix.Write(peer, flow.Super(1, 1, 4, 1448, 0)); err != nil {
		t.Fatal(err)
	}
	if n := w.FromKernel(); n != 1 || len(in.Supers) != 2 {
		t.Fatalf("a super-frame alone: FromKernel moved %d, %d super-frames, want 1 and 2", n, len(in.Supers))
	}

	in.TSOMaxBytes = 10000 // a port that takes fewer segments: split
	if _, err := unix.Write(peer, flow.Super(1, 1, 8, 1448, 0)); err != nil {
		t.Fatal(err)
	}
	if n := w.FromKernel(); n != 8 || len(in.Supers) != 2 || len(in.Received()) != 9 {
		t.Errorf("a super-frame too large for the port: moved %d, %d super-frames, %d frames, want 8, 2 and 9",
			n, len(in.Supers), len(in.Received()))
	}
	if c.Offload.SplitReads.Load() != 1 || c.Offload.SplitFrames.Load() != 8 || c.Offload.TSOToApp.Load() != 2 {
		t.Errorf("split reads %d, split frames %d, tso_to_app %d, want 1, 8 and 2",
			c.Offload.SplitReads.Load(), c.Offload.SplitFrames.Load(), c.Offload.TSOToApp.Load())
	}
}

// Read hands a super-frame to an app that takes TSO as the batch's last
// frame, in the kernel side's buffer, and splits it when the next Read says
// the app refused it.
func TestReadEndsABatchWithASuperFrame(t *testing.T) {
	q, peer := newTestQueue(t, true)
	slots, frames := slotsOf(bridgetest.NewIn(8, FrameLen(mtu)))
	var r bridge.Result
	arp := frame(60, 1)
	send(t, peer, vnet.Hdr{}, arp)
	super := flow.Super(5000, 1, 6, 1448, psh)
	if _, err := unix.Write(peer, super); err != nil {
		t.Fatal(err)
	}
	send(t, peer, vnet.Hdr{}, arp)
	n := q.Read(slots, frames, bridge.ReadTSO, &r)
	if n != 2 || !bytes.Equal(slots[0][:frames[0].Len], arp) || frames[0].Super != nil {
		t.Fatalf("Read made %d frames, want the ARP frame and then the super-frame", n)
	}
	f := frames[1]
	if !bytes.Equal(f.Super, super[vnet.HdrLen:]) || f.TSO.MSS != 1448 || f.TSO.L4 != 20 {
		t.Fatalf("super-frame %d bytes, %+v", len(f.Super), f.TSO)
	}
	n = q.Read(slots, frames, bridge.ReadTSO|bridge.ReadSplit, &r)
	if n != 7 || r.Offload.SplitReads != 1 || r.Offload.SplitFrames != 6 {
		t.Fatalf("after a refusal: %d frames, split reads %d frames %d, want 7 (6 segments, the ARP frame), 1, 6",
			n, r.Offload.SplitReads, r.Offload.SplitFrames)
	}
	if !bytes.Equal(slots[6][:frames[6].Len], arp) {
		t.Error("the frame after the super-frame came out of order")
	}
}

// lroPacket is an LRO packet of n segments of mss bytes, as the app's NIC
// (or a vhost-user frontend with HOST_TSO) hands it over: one TCP frame,
// in mbufs of 2 KiB.
func lroPacket(seq uint32, n, mss int) bridgetest.Packet {
	b := flow.Segment(seq, 7, n*mss, ack|psh)
	var sizes []int
	for off := 2048; off < len(b); off += 2048 {
		sizes = append(sizes, 2048)
	}
	return bridgetest.Packet{Segs: split(b, sizes...), LROSegSize: uint16(mss)}
}

// Consecutive LRO packets of a flow, checksums verified by the app's NIC,
// go down as one GSO write of their segment size that the kernel's side
// cuts at every segment the NIC merged; the counters say so. Unverified
// ones (mode vhost's TSO packets, whose checksum is partial) go down in a
// GSO write each, merged with nothing.
func TestLROPacketsOfAFlowGoDownAsOneGSOWriteWhenVerified(t *testing.T) {
	for _, verified := range []bool{true, false} {
		t.Run("verified="+strconv.FormatBool(verified), func(t *testing.T) {
			q, peer := newTestQueue(t, true)
			out := bridgetest.NewOut(32, 4)
			w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
			c := w.Counters()
			const segs, mss = 5, 1448
			seq := uint32(1000)
			for k := range uint32(2) {
				b := flow.Segment(seq+k*segs*mss, 7, segs*mss, ack) // no PSH: the first may take the second
				out.Enqueue(bridgetest.Packet{Segs: split(b, 2048, 2048, 2048), LROSegSize: mss, CsumGood: verified})
			}
			w.ToKernel()
			got := readAll(t, peer)
			writes, merged := 1, uint64(2)
			if !verified {
				writes, merged = 2, 0
			}
			if len(got) != writes {
				t.Fatalf("%d writes, want %d", len(got), writes)
			}
			for _, g := range got {
				s, err := vnet.Parse(g.hdr, g.frame, mtu)
				if err != nil || g.hdr.GSOSize != mss || s.N() != 2*segs/writes {
					t.Fatalf("a write of gso_size %d splits into %d frames (%v), want %d of %d", g.hdr.GSOSize, s.N(), err, 2*segs/writes, mss)
				}
			}
			o := c.Offload.Snapshot()
			if o.LROWrites != 2 || o.LROMerged != merged || o.MergedWrites != merged/2 || o.MergedPackets != merged || out.Delivered != 2 {
				t.Errorf("lro_writes %d, lro_merged %d, merged writes %d of %d packets, delivered %d: want 2, %d, %d, %d, 2",
					o.LROWrites, o.LROMerged, o.MergedWrites, o.MergedPackets, out.Delivered, merged, merged/2, merged)
			}
		})
	}
}

// checkSegments checks that got are the MTU frames of the LRO packets that
// began at seq: plain headers, in order, each a TCP frame with a right
// checksum, PSH on the last only; it returns the payload bytes they carry.
func checkSegments(t *testing.T, got []wire, seq uint32) int {
	t.Helper()
	payload := 0
	for i, w := range got {
		if w.hdr != (vnet.Hdr{}) {
			t.Fatalf("frame %d: header %+v, want a plain write", i, w.hdr)
		}
		if len(w.frame) > mtu+14 {
			t.Fatalf("frame %d: %d bytes over a %d MTU", i, len(w.frame), mtu)
		}
		ip, tcp := w.frame[14:], w.frame[34:]
		if s := binary.BigEndian.Uint32(tcp[4:]); s != seq+uint32(payload) {
			t.Fatalf("frame %d: seq %d, want %d", i, s, seq+uint32(payload))
		}
		acc := vnet.PseudoHeaderSum(6, ip[12:16], ip[16:20], len(tcp))
		if vnet.Fold(vnet.Sum(tcp, acc)) != 0xffff {
			t.Fatalf("frame %d: bad TCP checksum", i)
		}
		if vnet.Fold(vnet.Sum(ip[:20], 0)) != 0xffff {
			t.Fatalf("frame %d: bad IPv4 header checksum", i)
		}
		payload += len(tcp) - 20
	}
	return payload
}

// Once the kernel refused a GSO write, LRO packets are cut into MTU frames
// in software and written plainly, that burst and every later one: bulk TCP
// keeps flowing.
func TestLROAfterRefusedGSOWriteIsSplit(t *testing.T) {
	q, peer := newTestQueue(t, true)
	refuseGSO(t)
	out := bridgetest.NewOut(32, 40)
	w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
	c := w.Counters()
	const segs, mss = 20, 1448
	seq := uint32(1000)
	for burst := range 3 {
		out.Enqueue(lroPacket(seq, segs, mss), lroPacket(seq+segs*mss, segs, mss))
		w.ToKernel()
		got := readAll(t, peer)
		if len(got) != 2*segs {
			t.Fatalf("burst %d: %d frames written, want %d", burst, len(got), 2*segs)
		}
		if n := checkSegments(t, got, seq); n != 2*segs*mss {
			t.Fatalf("burst %d: %d payload bytes, want %d", burst, n, 2*segs*mss)
		}
		seq += 2 * segs * mss
	}
	o := c.Offload.Snapshot()
	// Both GSO writes of the first burst were tried (the second was
	// planned before the first was refused); none after.
	if o.Fallbacks != 2 || o.SplitWrites != 6 || o.SplitWriteFrames != 6*segs || c.ToKernelPackets.Load() != 6 {
		t.Errorf("fallbacks %d, split writes %d, split frames %d, packets %d: want 2, 6, %d, 6",
			o.Fallbacks, o.SplitWrites, o.SplitWriteFrames, c.ToKernelPackets.Load(), 6*segs)
	}
	if d := c.Snapshot().TotalDrops(); d != 0 {
		t.Errorf("%d drops, want 0", d)
	}
}

// An LRO packet whose IP length the NIC left at its first segment's goes
// down with the length of its frame, merged or not, even when it holds no
// more than its segment size: written as it is, the kernel would cut it to
// the IP length and lose the rest.
func TestAnLROPacketWithAStaleIPLengthLosesNothingWithinItsSegmentSize(t *testing.T) {
	for _, merge := range []bool{true, false} {
		q, peer := newTestQueue(t, merge)
		out := bridgetest.NewOut(32, 4)
		w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
		const seq = 1000
		b := flow.Segment(seq, 7, 2*300, ack|psh) // two segments of 300 merged
		ip := b[14:]
		binary.BigEndian.PutUint16(ip[2:], 20+20+300)
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], vnet.Checksum(ip[:20], 0))
		out.Enqueue(bridgetest.Packet{Segs: [][]byte{b}, LROSegSize: 1448, CsumGood: true})
		w.ToKernel()
		got := readAll(t, peer)
		if len(got) != 1 || got[0].hdr.GSOType != vnet.GSONone {
			t.Fatalf("merge %v: %d writes, want one plain frame", merge, len(got))
		}
		if l := int(binary.BigEndian.Uint16(got[0].frame[16:])); l != len(got[0].frame)-14 {
			t.Fatalf("merge %v: IP length %d in a frame of %d bytes: the kernel keeps %d payload bytes of 600",
				merge, l, len(got[0].frame), l-40)
		}
		f := got[0].frame
		acc := vnet.PseudoHeaderSum(6, f[26:30], f[30:34], len(f)-34)
		if vnet.Fold(vnet.Sum(f[34:], acc)) != 0xffff || vnet.Fold(vnet.Sum(f[14:34], 0)) != 0xffff {
			t.Fatalf("merge %v: a bad checksum", merge)
		}
		if !bytes.Equal(f[54:], flow.Segment(seq, 7, 600, ack)[54:]) {
			t.Fatalf("merge %v: the payload differs", merge)
		}
	}
}

// An LRO flag does not lift the MTU rule: a frame that is not a TCP
// super-frame the kernel would segment (librte_vhost sets RX_LRO for any
// gso_type a frontend claims) is dropped as oversize when it does not fit,
// written when it does, with merging on or off.
func TestLROFlagDoesNotLiftTheMTU(t *testing.T) {
	for _, merge := range []bool{true, false} {
		q, peer := newTestQueue(t, merge)
		out := bridgetest.NewOut(32, 8)
		w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
		c := w.Counters()
		big := frame(9000, 1) // ARP: not TCP
		out.Enqueue(bridgetest.Packet{Segs: split(big, 2048, 2048, 2048, 2048), LROSegSize: 1448},
			bridgetest.Packet{Segs: [][]byte{frame(1000, 2)}, LROSegSize: 1448})
		w.ToKernel()
		got := readAll(t, peer)
		if len(got) != 1 || len(got[0].frame) != 1000 {
			t.Fatalf("merge %v: %d frames written, want the 1000-byte one alone", merge, len(got))
		}
		if d := c.Drops[bridge.DropOversize].Load(); d != 1 {
			t.Errorf("merge %v: oversize %d, want 1", merge, d)
		}
		out.Next()
		if out.Released != 2 {
			t.Errorf("merge %v: released %d, want 2", merge, out.Released)
		}
	}
}

// The software split allocates nothing either.
func TestSplitWritePathDoesNotAllocate(t *testing.T) {
	q, peer := newTestQueue(t, false) // as after a refused GSO write
	out := bridgetest.NewOut(32, 40)
	w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(mtu)))
	c := w.Counters()
	burst := []bridgetest.Packet{lroPacket(1, 20, 1448), lroPacket(1+20*1448, 20, 1448)}
	buf := make([]byte, maxRead)
	round := func() {
		out.Enqueue(burst...)
		w.ToKernel()
		drain(peer, buf)
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%.2f allocations per round, want 0", allocs)
	}
	// AllocsPerRun runs round once more to warm up.
	if got := c.Offload.SplitWriteFrames.Load(); got != 202*2*20 {
		t.Errorf("split frames %d, want %d: the rounds did not split", got, 202*2*20)
	}
}

// drain reads what the TAP queue wrote to the socket pair's peer end until
// it would block.
func drain(peer int, buf []byte) {
	for {
		if _, err := unix.Read(peer, buf); err != nil {
			return
		}
	}
}

const jumbo = 9000

// SetMTU moves the oversize rule from the next burst, both ways, merged or
// not.
func TestSetMTUMovesTheOversizeRule(t *testing.T) {
	for _, merge := range []bool{false, true} {
		q, peer := newTestQueueMax(t, merge, jumbo)
		out := bridgetest.NewOut(32, 4)
		w := newTestWorker(t, q, out, bridgetest.NewIn(32, FrameLen(jumbo)))
		c := w.Counters()
		big := frame(jumbo+14, 1) // a 9000-byte payload; ARP: never merged
		small := frame(60, 2)
		for _, step := range []struct {
			mtu     int // 0: the queue's own, 1500
			written bool
		}{{0, false}, {jumbo, true}, {mtu, false}} {
			if step.mtu != 0 {
				if err := q.SetMTU(step.mtu); err != nil {
					t.Fatal(err)
				}
			}
			before := c.Drops[bridge.DropOversize].Load()
			out.Enqueue(bridgetest.Frame(big), bridgetest.Frame(small))
			w.ToKernel()
			got := readAll(t, peer)
			oversize := c.Drops[bridge.DropOversize].Load() - before
			want := [][]byte{small}
			if step.written {
				want = [][]byte{big, small}
			}
			if len(got) != len(want) || oversize != uint64(2-len(want)) {
				t.Fatalf("merge %v, SetMTU(%d): %d frames written, %d oversize: want %d and %d",
					merge, step.mtu, len(got), oversize, len(want), 2-len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i].frame, want[i]) {
					t.Errorf("merge %v, SetMTU(%d): frame %d differs", merge, step.mtu, i)
				}
			}
		}
	}
}

// Read cuts super-frames to the MTU SetMTU set, from the next Read on; a
// split already under way goes on at the MTU it began with, and plain frames
// are held to the new MTU.
func TestReadSplitsToTheNewMTU(t *testing.T) {
	q, peer := newTestQueueMax(t, true, jumbo)
	slots, frames := slotsOf(bridgetest.NewIn(8, FrameLen(jumbo)))
	var r bridge.Result
	const kmss = jumbo - 40 // what a kernel at MTU 9000 sends
	// 2*8960 bytes: 13 frames at MTU 1500, 12 of 1460 bytes and one of 400.
	if _, err := unix.Write(peer, flow.Super(1, 1, 2, kmss, 0)); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	collect := func(n int) {
		for i := range n {
			got = append(got, append([]byte(nil), slots[i][:frames[i].Len]...))
		}
	}
	if n := q.Read(slots, frames, 0, &r); n != 8 {
		t.Fatalf("first Read: %d frames, want 8", n)
	}
	collect(8)
	if err := q.SetMTU(jumbo); err != nil {
		t.Fatal(err)
	}
	seq2 := uint32(1 + 2*kmss)
	if _, err := unix.Write(peer, flow.Super(seq2, 100, 3, kmss, 0)); err != nil {
		t.Fatal(err)
	}
	if n := q.Read(slots, frames, 0, &r); n != 8 {
		t.Fatalf("Read after SetMTU: %d frames, want 8 (the 5 left of the first super-frame, 3 of the second)", n)
	}
	collect(8)
	want := flow.Stream(1, 1, 12, mtu-40, 0)
	want = append(want, flow.Segment(1+12*(mtu-40), 13, 2*kmss-12*(mtu-40), ack))
	want = append(want, flow.Stream(seq2, 100, 3, kmss, 0)...)
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for k := range want {
		if !bytes.Equal(got[k], want[k]) {
			t.Errorf("frame %d: %d bytes, want %d, or different", k, len(got[k]), len(want[k]))
		}
	}

	// Plain frames follow the MTU too.
	big := frame(jumbo+14, 1)
	send(t, peer, vnet.Hdr{}, big)
	if n := q.Read(slots, frames, 0, &r); n != 1 || !bytes.Equal(slots[0][:frames[0].Len], big) {
		t.Fatalf("a jumbo frame at MTU %d: Read made %d frames", jumbo, n)
	}
	if err := q.SetMTU(mtu); err != nil {
		t.Fatal(err)
	}
	send(t, peer, vnet.Hdr{}, big)
	if n := q.Read(slots, frames, 0, &r); n != 0 || r.Drops[bridge.DropOversize] != 1 {
		t.Fatalf("a jumbo frame at MTU %d: Read made %d frames, %d oversize: want 0 and 1", mtu, n, r.Drops[bridge.DropOversize])
	}
}

// An MTU out of range is refused, names both numbers and changes nothing.
func TestSetMTUOutOfRange(t *testing.T) {
	q, _ := newTestQueueMax(t, true, jumbo)
	for _, m := range []int{jumbo + 1, limits.MinMTU - 1} {
		err := q.SetMTU(m)
		if !errors.Is(err, ErrMTURange) || !strings.Contains(err.Error(), strconv.Itoa(m)) ||
			!strings.Contains(err.Error(), strconv.Itoa(jumbo)) {
			t.Errorf("SetMTU(%d): %v, want ErrMTURange naming %d and %d", m, err, m, jumbo)
		}
		q.loadMTU() // as the next burst would
		if q.mtu != mtu || q.maxFrame != mtu+14 {
			t.Errorf("after SetMTU(%d): mtu %d, max frame %d, want %d and %d", m, q.mtu, q.maxFrame, mtu, mtu+14)
		}
	}
	for _, m := range []int{limits.MinMTU, jumbo} {
		if err := q.SetMTU(m); err != nil {
			t.Errorf("SetMTU(%d): %v", m, err)
		}
	}
	// Without MaxMTU the configured MTU is the bound.
	q, _ = newTestQueue(t, true)
	if err := q.SetMTU(mtu + 1); !errors.Is(err, ErrMTURange) {
		t.Errorf("no MaxMTU: SetMTU(%d): %v, want ErrMTURange", mtu+1, err)
	}
}

// A burst after SetMTU allocates nothing: the split buffer was sized for
// MaxMTU, and a frame split at MTU 9000 fits it.
func TestWriteAfterSetMTUDoesNotAllocate(t *testing.T) {
	q, peer := newTestQueueMax(t, false, jumbo) // false: LRO packets over the MTU are split
	out := bridgetest.NewOut(32, 40)
	in := bridgetest.NewIn(32, FrameLen(jumbo))
	in.Discard = true
	w := newTestWorker(t, q, out, in)
	c := w.Counters()
	const kmss = jumbo - 40
	burst := []bridgetest.Packet{bridgetest.Frame(frame(jumbo+14, 1)), lroPacket(1, 4, kmss)}
	wireSuper := flow.Super(1, 1, 4, kmss, 0)
	buf := make([]byte, maxRead)
	round := func() {
		for _, m := range []int{jumbo, mtu} {
			_ = q.SetMTU(m)
			out.Enqueue(burst...)
			w.ToKernel()
			drain(peer, buf)
			_, _ = unix.Write(peer, wireSuper)
			w.FromKernel()
		}
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%.2f allocations per round, want 0", allocs)
	}
	// Per round: at 9000 the jumbo frame goes and the LRO packet is cut
	// into 4 frames; at 1500 the jumbo frame is oversize and the LRO
	// packet cut into 25 (4*8960 bytes by 1460).
	const rounds = 202
	o := c.Offload.Snapshot()
	if d := c.Drops[bridge.DropOversize].Load(); d != rounds || o.SplitWriteFrames != rounds*(4+25) ||
		o.SplitFrames != rounds*(4+25) {
		t.Errorf("oversize %d, split write frames %d, split read frames %d: want %d, %d, %d",
			d, o.SplitWriteFrames, o.SplitFrames, rounds, rounds*(4+25), rounds*(4+25))
	}
}

// An adopted queue counts as its backlog the frames it reads up to its
// first empty read, those the kernel queued while no kbridge read it, and
// nothing after; a queue that was not adopted counts none.
func TestAdoptedQueueCountsItsBacklogUntilItsFirstEmptyRead(t *testing.T) {
	send := func(peer, n int) {
		for i := range n {
			if _, err := unix.Write(peer, append(make([]byte, vnet.HdrLen), frame(60, byte(i))...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	in := bridgetest.NewIn(32, FrameLen(mtu))
	slots, frames := slotsOf(in)
	read := func(q *Queue) int { return q.Read(slots, frames, 0, &bridge.Result{}) }

	q, peer := newTestQueue(t, false)
	send(peer, 40)
	q.drainBacklog()
	if got := read(q); got != 32 {
		t.Fatalf("read %d frames, want 32", got)
	}
	if n, drained := q.Backlog(); n != 32 || drained {
		t.Errorf("after a full read: backlog %d, drained %v; want 32, false", n, drained)
	}
	if got := read(q); got != 8 {
		t.Fatalf("read %d frames, want 8", got)
	}
	if n, drained := q.Backlog(); n != 40 || !drained {
		t.Errorf("after the read that emptied it: backlog %d, drained %v; want 40, true", n, drained)
	}
	send(peer, 5)
	if got := read(q); got != 5 {
		t.Fatalf("read %d frames, want 5", got)
	}
	if n, _ := q.Backlog(); n != 40 {
		t.Errorf("frames after the first empty read counted as backlog: %d, want 40", n)
	}

	plain, peer2 := newTestQueue(t, false)
	send(peer2, 3)
	read(plain)
	if n, _ := plain.Backlog(); n != 0 {
		t.Errorf("a queue not adopted counts a backlog of %d", n)
	}
}

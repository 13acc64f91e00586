package tap

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/bridge/bridgetest"
	"github.com/kbridge/kbridge/tap/vnet"
	"github.com/kbridge/kbridge/tap/vnet/vnettest"
)

const mtu = 1500

// newTestQueue returns a Queue over one end of a SOCK_SEQPACKET pair, which
// keeps frame boundaries like a TAP fd, and the other end for the test.
func newTestQueue(t *testing.T, merge bool) (*Queue, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	}
	q := NewQueue(fds[0], QueueConfig{MTU: mtu, Batch: 32, MaxSegs: 4, Merge: merge})
	t.Cleanup(func() { q.Close(); unix.Close(fds[1]) })
	return q, fds[1]
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
		var c bridge.Counters
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
		q.Write(out, out.Next(), &c)
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
	var c bridge.Counters
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
	q.Write(out, out.Next(), &c)
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
}

// A kernel that refuses the merged write gets the same frames one by one,
// and the queue stops merging.
func TestRefusedMergedWriteIsRedoneFrameByFrame(t *testing.T) {
	q, peer := newTestQueue(t, true)
	q.refuseGSO = true
	out := bridgetest.NewOut(32, 4)
	var c bridge.Counters
	seq := uint32(1)
	for range 4 {
		out.Enqueue(bridgetest.Frame(tcpFrame(seq, 1, 1000, ack)))
		seq += 1000
	}
	q.Write(out, out.Next(), &c)
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

func TestWriteErrorCountsAndGoesOn(t *testing.T) {
	q, _ := newTestQueue(t, true)
	if err := unix.Shutdown(q.Fd(), unix.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	out := bridgetest.NewOut(32, 4)
	var c bridge.Counters
	out.Enqueue(bridgetest.Frame(frame(100, 1)), bridgetest.Frame(frame(100, 2)))
	q.Write(out, out.Next(), &c)
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
	in := bridgetest.NewIn(32, FrameLen(mtu))
	var c bridge.Counters
	f1, f2 := frame(64, 1), frame(mtu+14, 2)
	send(t, peer, vnet.Hdr{}, f1)
	send(t, peer, vnet.Hdr{}, f2)
	send(t, peer, vnet.Hdr{}, frame(mtu+15, 3))                             // oversize
	send(t, peer, vnet.Hdr{}, frame(10, 4))                                 // runt
	send(t, peer, vnet.Hdr{GSOType: vnet.GSOTCPv4 | vnet.GSOECN}, f1)       // bad header
	send(t, peer, vnet.Hdr{Flags: vnet.FlagNeedsCsum, CsumStart: 9999}, f1) // bad header
	lens := make([]int, 32)
	n, dropped := q.Read(in, lens, &c)
	if n != 2 || dropped != 4 {
		t.Fatalf("Read filled %d, dropped %d, want 2 and 4", n, dropped)
	}
	if !bytes.Equal(in.Slot(0)[:lens[0]], f1) || !bytes.Equal(in.Slot(1)[:lens[1]], f2) {
		t.Error("legal frames changed on the way")
	}
	for reason, want := range map[int]uint64{bridge.DropOversize: 1, bridge.DropRunt: 1, bridge.DropBadVnetHdr: 2} {
		if got := c.Drops[reason].Load(); got != want {
			t.Errorf("drops[%s] = %d, want %d", bridge.DropNames[reason], got, want)
		}
	}
}

// A 64 KiB super-frame is split across bursts: what does not fit in one
// waits for the next Read, in order.
func TestReadSplitsSuperFramesAcrossBursts(t *testing.T) {
	q, peer := newTestQueue(t, true)
	in := bridgetest.NewIn(8, FrameLen(mtu))
	var c bridge.Counters
	const segs, mss = 20, 1448
	want := flow.Stream(5000, 1, segs, mss, psh)
	if _, err := unix.Write(peer, flow.Super(5000, 1, segs, mss, psh)); err != nil {
		t.Fatal(err)
	}
	lens := make([]int, 8)
	var got [][]byte
	for range 5 {
		n, _ := q.Read(in, lens, &c)
		for i := range n {
			got = append(got, append([]byte(nil), in.Slot(i)[:lens[i]]...))
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
	if c.Offload.SplitReads.Load() != 1 || c.Offload.SplitFrames.Load() != segs {
		t.Errorf("split reads %d frames %d", c.Offload.SplitReads.Load(), c.Offload.SplitFrames.Load())
	}
}

// The kernel side's part of the hot path allocates nothing, merged and split
// bursts included.
func TestQueueHotPathDoesNotAllocate(t *testing.T) {
	q, peer := newTestQueue(t, true)
	out := bridgetest.NewOut(32, 4)
	in := bridgetest.NewIn(32, FrameLen(mtu))
	in.Discard = true
	var c bridge.Counters
	var burst []bridgetest.Packet
	seq := uint32(1)
	for range 16 {
		burst = append(burst, bridgetest.Frame(tcpFrame(seq, 1, 1000, ack)))
		seq += 1000
	}
	burst = append(burst, bridgetest.Frame(frame(60, 1)))
	wireSuper := flow.Super(1, 1, 10, 1448, 0)
	buf := make([]byte, maxRead)
	lens := make([]int, 32)
	round := func() {
		out.Enqueue(burst...)
		q.Write(out, out.Next(), &c)
		for {
			if _, err := unix.Read(peer, buf); err != nil {
				break
			}
		}
		_, _ = unix.Write(peer, wireSuper)
		n, _ := q.Read(in, lens, &c)
		in.Put(lens[:n])
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
// before it; one its port cannot take whole is split as for any app.
func TestReadHandsSuperFramesToATSOApp(t *testing.T) {
	q, peer := newTestQueue(t, true)
	in := bridgetest.NewIn(8, FrameLen(mtu))
	in.TSO = true
	var c bridge.Counters
	arp := frame(60, 1)
	send(t, peer, vnet.Hdr{}, arp)
	if _, err := unix.Write(peer, flow.Super(5000, 1, 20, 1448, psh)); err != nil {
		t.Fatal(err)
	}
	lens := make([]int, 8)
	n, _ := q.Read(in, lens, &c)
	if n != 1 || !bytes.Equal(in.Slot(0)[:lens[0]], arp) || len(in.Supers) != 0 {
		t.Fatalf("first Read: %d frames, %d super-frames: want the ARP frame alone first", n, len(in.Supers))
	}
	if n, _ = q.Read(in, lens, &c); n != 0 || len(in.Supers) != 1 {
		t.Fatalf("second Read: %d frames, %d super-frames, want 0 and 1", n, len(in.Supers))
	}
	got := in.Supers[0]
	if got.L2 != 14 || got.L3 != 20 || got.L4 != 20 || got.MSS != 1448 || got.IPv6 || len(got.Frame) != 14+40+20*1448 {
		t.Errorf("super-frame handed over as %+v, %d bytes", got.TSOFrame, len(got.Frame))
	}
	if c.Offload.TSOToApp.Load() != 1 || c.FromKernelPackets.Load() != 1 {
		t.Errorf("tso_to_app %d, from_kernel_packets %d, want 1 and 1", c.Offload.TSOToApp.Load(), c.FromKernelPackets.Load())
	}

	in.TSOMaxBytes = 10000 // a port that takes fewer segments: split
	if _, err := unix.Write(peer, flow.Super(1, 1, 8, 1448, 0)); err != nil {
		t.Fatal(err)
	}
	if n, _ = q.Read(in, lens, &c); n != 8 || len(in.Supers) != 1 {
		t.Errorf("a super-frame too large for the port: %d frames, %d super-frames, want 8 and 1", n, len(in.Supers))
	}
}

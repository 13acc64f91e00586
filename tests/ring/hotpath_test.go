package ring

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/bridge/bridgetest"
	"github.com/kbridge/kbridge/policy"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tap"
	"github.com/kbridge/kbridge/tap/vnet"
	"github.com/kbridge/kbridge/tap/vnet/vnettest"
)

// realWorker is a worker over queue 0 of a bed's real rings (bursts of 32,
// 16 segments) and the real kernel side (tap.Queue, offloads on, merging
// TCP segments when merge) over a socket pair that keeps frame boundaries
// like a TAP fd: the test plays the kernel through peer.
func realWorker(t *testing.T, b *bed, merge bool) (w *bridge.Worker, peer int) {
	t.Helper()
	q := queue0(t, b)
	out, err := q.Out(32, 16)
	if err != nil {
		t.Fatal(err)
	}
	in, err := q.In(32, 1600)
	if err != nil {
		t.Fatal(err)
	}
	fd, peer, err := bridgetest.SeqPacket()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(peer) })
	kq := tap.NewQueue(fd, tap.QueueConfig{MTU: 1500, Batch: 32, MaxSegs: 16, Merge: merge})
	t.Cleanup(func() { kq.Close() })
	w, err = bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: policy.Default()}, q.App(out, in), kq)
	if err != nil {
		t.Fatal(err)
	}
	// Run returns at once: it frees the current burst and closes.
	t.Cleanup(func() { w.Stop(); _ = w.Run() })
	return w, peer
}

// drain reads what the worker wrote to the kernel side and counts it.
func drain(peer int, buf []byte) int {
	n := 0
	for {
		if _, err := unix.Read(peer, buf); err != nil {
			return n
		}
		n++
	}
}

// The worker over the real DPDK binding: no allocation per burst, and one
// cgo call per burst in each direction, whatever the number of packets.
func TestHotPathOnRealRings(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true})
	w, peer := realWorker(t, b, true)

	const burst = 32
	frames := make([][]byte, burst)
	for i := range frames {
		frames[i] = testFrame(200, uint32(i))
	}
	buf := make([]byte, 1<<17)
	drainPeer := func() int { return drain(peer, buf) }

	// App -> kernel: a burst of 32 in the ring, one ToKernel call.
	if _, err := b.Port.Inject(0, frames, ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	c0 := runtime.NumCgoCall()
	if n := w.ToKernel(); n != burst {
		t.Fatalf("ToKernel moved %d, want %d", n, burst)
	}
	if calls := runtime.NumCgoCall() - c0; calls != 1 {
		t.Errorf("ToKernel made %d cgo calls for a burst of %d, want 1", calls, burst)
	}
	if got := drainPeer(); got != burst {
		t.Fatalf("kernel side got %d frames, want %d", got, burst)
	}

	// Kernel -> app: 32 frames waiting on the fd, one FromKernel call.
	hdr := make([]byte, vnet.HdrLen) // a plain frame: all-zero header
	for _, f := range frames {
		if _, err := unix.Writev(peer, [][]byte{hdr, f}); err != nil {
			t.Fatal(err)
		}
	}
	c0 = runtime.NumCgoCall()
	if n := w.FromKernel(); n != burst {
		t.Fatalf("FromKernel moved %d, want %d", n, burst)
	}
	if calls := runtime.NumCgoCall() - c0; calls != 1 {
		t.Errorf("FromKernel made %d cgo calls for a burst of %d, want 1", calls, burst)
	}
	if got := len(onlyTest(b.Port.Collect(0, 64))); got != burst {
		t.Fatalf("app collected %d, want %d", got, burst)
	}

	// Offloaded bursts: 32 segments of one TCP flow go down as one merged
	// write, and a 32-segment super-frame comes up as 32 frames, each
	// direction still one cgo call.
	flow := vnettest.DefaultFlow()
	segs := flow.Stream(1, 1, burst, 1400, 0)
	if _, err := b.Port.Inject(0, segs, ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	c0 = runtime.NumCgoCall()
	if n := w.ToKernel(); n != burst {
		t.Fatalf("ToKernel moved %d TCP segments, want %d", n, burst)
	}
	if calls := runtime.NumCgoCall() - c0; calls != 1 {
		t.Errorf("ToKernel made %d cgo calls for a merged burst, want 1", calls)
	}
	if got := drainPeer(); got != 1 {
		t.Errorf("kernel side got %d writes for one flow's burst, want 1 merged write", got)
	}
	if _, err := unix.Write(peer, flow.Super(1, 1, burst, 1400, 0)); err != nil {
		t.Fatal(err)
	}
	c0 = runtime.NumCgoCall()
	if n := w.FromKernel(); n != burst {
		t.Fatalf("FromKernel moved %d frames of a super-frame, want %d", n, burst)
	}
	if calls := runtime.NumCgoCall() - c0; calls != 1 {
		t.Errorf("FromKernel made %d cgo calls for a split burst, want 1", calls)
	}
	b.Port.Drain(0)
	o := w.Counters().Offload.Snapshot()
	if o.MergedWrites != 1 || o.MergedPackets != burst || o.SplitFrames != burst {
		t.Errorf("offload counters %+v, want one merged write of %d and %d split frames", o, burst, burst)
	}

	// Allocations: none per round trip through the real binding, with a
	// packet each way each round. The test's own side (inject, drain, the
	// fake kernel's reads and writes) does not allocate either, so the
	// whole round must show 0.
	ringtest.Preload(frames[0])
	var moved int
	allocs := testing.AllocsPerRun(500, func() {
		b.Port.InjectPreloaded(0, 1)
		moved += w.ToKernel()
		drainPeer()
		_, _ = unix.Writev(peer, [][]byte{hdr, frames[1]})
		moved += w.FromKernel()
		b.Port.Drain(0)
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per round trip on real rings, want 0", allocs)
	}
	if moved != 2*501 {
		t.Errorf("moved %d packets in 501 rounds, want %d", moved, 2*501)
	}
}

// An app that declared TSO (kbridge.h version 2) gets a TCP super-frame from
// the kernel as one mbuf chain its port segments: RTE_MBUF_F_TX_TCP_SEG,
// the header lengths, tso_segsz, the IPv4 checksum left to the port and the
// pseudo-header sum without the length in the TCP checksum, as DPDK's TSO
// wants. A port that takes fewer segments gets MTU frames instead.
func TestSuperFrameToATSOApp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxSegs int
		whole   bool
	}{{"whole", 64, true}, {"split when the chain is too long", 4, false}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t, bedOpts{noStart: true})
			b.Port.DeclareTSO(tc.maxSegs)
			port, err := ring.OpenPort(b.Name)
			if err != nil {
				t.Fatal(err)
			}
			if ok, n := port.AppTSO(); !ok || n != tc.maxSegs {
				t.Fatalf("AppTSO = %v, %d; want true, %d", ok, n, tc.maxSegs)
			}
			q, err := port.Queue(0)
			if err != nil {
				t.Fatal(err)
			}
			out, err := q.Out(32, 16)
			if err != nil {
				t.Fatal(err)
			}
			in, err := q.In(32, tap.FrameLen(1500))
			if err != nil {
				t.Fatal(err)
			}
			fd, peer, err := bridgetest.SeqPacket()
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(peer)
			kq := tap.NewQueue(fd, tap.QueueConfig{MTU: 1500, Batch: 32, MaxSegs: 16, Merge: true})
			defer kq.Close()
			w, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: policy.Default()}, q.App(out, in), kq)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { w.Stop(); _ = w.Run() }()

			const segs, mss = 20, 1448
			flow := vnettest.DefaultFlow()
			if _, err := unix.Write(peer, flow.Super(1, 7, segs, mss, vnettest.PSH)); err != nil {
				t.Fatal(err)
			}
			w.FromKernel()
			w.FromKernel()
			var got [][]byte
			var metas []ringtest.Meta
			for {
				f, m, ok := b.Port.CollectOne(0)
				if !ok {
					break
				}
				got, metas = append(got, f), append(metas, m)
			}
			if !tc.whole {
				if len(got) != segs || metas[0].OlFlags&ringtest.TxTCPSeg != 0 {
					t.Fatalf("got %d packets (first flags %#x), want %d MTU frames", len(got), metas[0].OlFlags, segs)
				}
				want := flow.Stream(1, 7, segs, mss, vnettest.PSH)
				for k := range want {
					if !bytes.Equal(got[k], want[k]) {
						t.Errorf("frame %d differs from the segment the port would have cut", k)
					}
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %d packets, want 1 super-frame", len(got))
			}
			m := metas[0]
			if m.OlFlags&ringtest.TxTCPSeg == 0 || m.TSOSegSize != mss || m.L2 != 14 || m.L3 != 20 || m.L4 != 20 ||
				m.PktLen != 54+segs*mss || m.NbSegs < 2 {
				t.Fatalf("super-frame mbuf %+v", m)
			}
			f := got[0]
			ip, tcp := f[14:34], f[34:54]
			if binary.BigEndian.Uint16(ip[10:]) != 0 {
				t.Error("IPv4 header checksum not left to the port (0)")
			}
			// The pseudo-header sum without the L4 length, folded, not inverted.
			phdr := vnet.Fold(vnet.PseudoHeaderSum(unix.IPPROTO_TCP, ip[12:16], ip[16:20], 0))
			if got := binary.BigEndian.Uint16(tcp[16:]); got != phdr {
				t.Errorf("TCP checksum field %#04x, want the pseudo-header sum %#04x", got, phdr)
			}
			want := flow.Segment(1, 7, segs*mss, vnettest.ACK|vnettest.PSH)
			if !bytes.Equal(f[54:], want[54:]) {
				t.Error("the super-frame's payload changed on the way")
			}
			if w.Counters().Offload.TSOToApp.Load() != 1 {
				t.Errorf("tso_to_app = %d, want 1", w.Counters().Offload.TSOToApp.Load())
			}
		})
	}
}

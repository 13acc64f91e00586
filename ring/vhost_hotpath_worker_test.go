package ring

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/bridge/bridgetest"
	"github.com/kbridge/kbridge/policy"
	"github.com/kbridge/kbridge/tap"
	"github.com/kbridge/kbridge/tap/vnet"
	"github.com/kbridge/kbridge/tap/vnet/vnettest"
)

// TestVhostHotPathThroughTheWorker is mode vhost's half of the engine's cost
// promise (tests/ring's TestHotPathOnRealRings is ring mode's): the
// worker between this app side and the real kernel side (tap.Queue over a
// socket pair) makes one cgo call per burst each way, whatever the number
// of frames, and allocates nothing. Without a frontend, ToKernel finds no
// burst and FromKernel's frames find no vring (counted as ring_full, their
// mbufs back in the pool). Root only (hugepages).
func TestVhostHotPathThroughTheWorker(t *testing.T) {
	testVhostEAL(t)
	const burst = 32
	w, _, peer := vhostWorker(t, 1, burst)

	frame := make([]byte, vnet.HdrLen+200)
	frame[vnet.HdrLen+12], frame[vnet.HdrLen+13] = 0x08, 0x06 // ARP
	fill := func() {
		for range burst {
			if _, err := unix.Write(peer, frame); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill()
	calls := runtime.NumCgoCall()
	if n := w.FromKernel(); n != burst {
		t.Fatalf("FromKernel moved %d, want %d", n, burst)
	}
	if c := runtime.NumCgoCall() - calls; c != 1 {
		t.Errorf("FromKernel made %d cgo calls for a burst of %d, want 1", c, burst)
	}
	calls = runtime.NumCgoCall()
	if n := w.ToKernel(); n != 0 {
		t.Fatalf("ToKernel without a frontend moved %d", n)
	}
	if c := runtime.NumCgoCall() - calls; c != 1 {
		t.Errorf("an idle ToKernel made %d cgo calls, want 1", c)
	}
	allocs := testing.AllocsPerRun(100, func() {
		fill()
		w.FromKernel()
		w.ToKernel()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per round", allocs)
	}
	s := w.Counters().Snapshot()
	if s.Drops["ring_full"] != 102*burst || s.FromKernelPackets != 0 || s.FromKernelBytes != 0 {
		t.Errorf("ring_full %d, from_kernel %d packets %d bytes: want %d, 0, 0", s.Drops["ring_full"],
			s.FromKernelPackets, s.FromKernelBytes, 102*burst)
	}
	if n := VhostPoolInUse(); n != 0 {
		t.Errorf("%d mbufs not freed", n)
	}
}

// TestVhostCutsASuperFrameInC: mode vhost has the burst core cut a TCP
// super-frame for a frontend without TSO (burst_cut.h, as ring mode does),
// not the kernel side's Go fallback: 45 segments, more than a burst holds,
// in one FromKernel and one cgo call, with no allocation, counted as one
// split read of 45 frames. Without a frontend every segment counts as
// ring_full and its mbuf goes back to the pool. Root only (hugepages).
func TestVhostCutsASuperFrameInC(t *testing.T) {
	testVhostEAL(t)
	const burst, segs = 32, 45
	w, app, peer := vhostWorker(t, 2, burst)
	if app.Split == nil {
		t.Fatal("mode vhost's app side offers no cut (bridge.App.Split)")
	}
	super := vnettest.DefaultFlow().Super(1, 1, segs, 1448, vnettest.PSH)
	if _, err := unix.Write(peer, super); err != nil {
		t.Fatal(err)
	}
	calls := runtime.NumCgoCall()
	if n := w.FromKernel(); n != segs {
		t.Fatalf("FromKernel moved %d, want the %d segments at once", n, segs)
	}
	if c := runtime.NumCgoCall() - calls; c != 1 {
		t.Errorf("FromKernel made %d cgo calls for a super-frame of %d segments, want 1", c, segs)
	}
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = unix.Write(peer, super)
		w.FromKernel()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per super-frame", allocs)
	}
	s := w.Counters().Snapshot()
	if s.Offload.SplitReads != 102 || s.Offload.SplitFrames != 102*segs || s.Drops["ring_full"] != 102*segs {
		t.Errorf("split reads %d, frames %d, ring_full %d; want 102, %d, %d", s.Offload.SplitReads,
			s.Offload.SplitFrames, s.Drops["ring_full"], 102*segs, 102*segs)
	}
	if n := VhostPoolInUse(); n != 0 {
		t.Errorf("%d mbufs not freed", n)
	}
}

// vhostWorker is a worker between queue pair q's app side, with bursts of
// burst frames, and a real kernel side (tap.Queue) over a socket pair whose
// other end it returns: the test writes to it what the kernel would.
func vhostWorker(t *testing.T, q, burst int) (*bridge.Worker, bridge.App, int) {
	t.Helper()
	vq, err := NewVhostQueue(q, burst, 16)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewVhostIn(q, burst, tap.FrameLen(1500))
	if err != nil {
		t.Fatal(err)
	}
	fd, peer, err := bridgetest.SeqPacket()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(peer) })
	kq := tap.NewQueue(fd, tap.QueueConfig{MTU: 1500, Batch: burst, MaxSegs: 16, Merge: true})
	t.Cleanup(func() { kq.Close() })
	app := VhostApp(vq, in)
	w, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: policy.Default()}, app, kq)
	if err != nil {
		t.Fatal(err)
	}
	// Run returns at once: it frees what the worker holds and closes.
	t.Cleanup(func() { w.Stop(); _ = w.Run() })
	return w, app, peer
}

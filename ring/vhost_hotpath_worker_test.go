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
	q, err := NewVhostQueue(1, burst, 16)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewVhostIn(1, burst, tap.FrameLen(1500))
	if err != nil {
		t.Fatal(err)
	}
	fd, peer, err := bridgetest.SeqPacket()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(peer)
	kq := tap.NewQueue(fd, tap.QueueConfig{MTU: 1500, Batch: burst, MaxSegs: 16, Merge: true})
	defer kq.Close()
	w, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: policy.Default()}, VhostApp(q, in), kq)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		w.Stop()
		_ = w.Run() // returns at once: frees what it holds and closes
	}()

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

package integration

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/bridge/bridgetest"
	"github.com/kbridge/kbridge/policy"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/ring/ringtest"
)

// The worker over the real DPDK binding: no allocation per burst, and one
// cgo call per burst in each direction, whatever the number of packets.
func TestHotPathOnRealRings(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true})
	port, err := ring.OpenPort(b.name)
	if err != nil {
		t.Fatal(err)
	}
	q, err := port.Queue(0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := q.Out(32, 16)
	if err != nil {
		t.Fatal(err)
	}
	in, err := q.In(32, 1600)
	if err != nil {
		t.Fatal(err)
	}
	k, err := bridgetest.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	w, err := bridge.NewWorker(bridge.WorkerConfig{MTU: 1500, CPU: -1, Policy: policy.Default()}, out, in, q, k.WorkerFd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		w.Stop()
		_ = w.Run() // returns at once: frees the current burst and closes
	}()

	const burst = 32
	frames := make([][]byte, burst)
	for i := range frames {
		frames[i] = testFrame(200, uint32(i))
	}
	buf := make([]byte, 2048)
	drainPeer := func() int {
		n := 0
		for {
			if _, err := unix.Read(k.Peer, buf); err != nil {
				return n
			}
			n++
		}
	}

	// App -> kernel: a burst of 32 in the ring, one ToKernel call.
	if _, err := b.port.Inject(0, frames, ringtestOpts(0, 0)); err != nil {
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
	for _, f := range frames {
		if _, err := unix.Write(k.Peer, f); err != nil {
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
	if got := len(onlyTest(b.port.Collect(0, 64))); got != burst {
		t.Fatalf("app collected %d, want %d", got, burst)
	}

	// Allocations: none per round trip through the real binding, with a
	// packet each way each round. The test's own side (inject, drain, the
	// fake kernel's reads and writes) does not allocate either, so the
	// whole round must show 0.
	ringtest.Preload(frames[0])
	var moved int
	allocs := testing.AllocsPerRun(500, func() {
		b.port.InjectPreloaded(0, 1)
		moved += w.ToKernel()
		drainPeer()
		_, _ = unix.Write(k.Peer, frames[1])
		moved += w.FromKernel()
		b.port.Drain(0)
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per round trip on real rings, want 0", allocs)
	}
	if moved != 2*501 {
		t.Errorf("moved %d packets in 501 rounds, want %d", moved, 2*501)
	}
}

package ring

import (
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
)

// A port with two queue pairs gets a multi-queue TAP and one worker per
// queue: both queues carry traffic each way, and nothing is lost.
func TestTwoQueues(t *testing.T) {
	b := newBed(t, bedOpts{queues: 2})
	st, err := daemon.ReadStatus(b.Sock)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Queues) != 2 {
		t.Fatalf("kbridge runs %d queues, want 2", len(st.Queues))
	}
	ps := b.PacketSocket()
	const per = 20
	for q := 0; q < 2; q++ {
		var frames [][]byte
		for i := 0; i < per; i++ {
			frames = append(frames, testFrame(200, uint32(q*per+i)))
		}
		if n, err := b.Port.Inject(q, frames, ringtestOpts(0, 0)); err != nil || n != per {
			t.Fatalf("inject on queue %d: %d, %v", q, n, err)
		}
	}
	if got := onlyTest(ps.Receive(2*per, 5*time.Second)); len(got) != 2*per {
		t.Fatalf("kernel got %d of %d frames from two queues", len(got), 2*per)
	}
	st, _ = daemon.ReadStatus(b.Sock)
	for q := 0; q < 2; q++ {
		if st.Queues[q].ToKernelPackets != per {
			t.Errorf("queue %d wrote %d frames to the kernel, want %d", q, st.Queues[q].ToKernelPackets, per)
		}
	}

	// Kernel -> app: the kernel spreads transmit over the TAP's queues; the
	// app must see every frame on one queue or the other.
	var out [][]byte
	for i := 0; i < 2*per; i++ {
		out = append(out, testFrame(100, uint32(1000+i)))
	}
	ps.Send(t, out)
	got := 0
	waitUntil(t, "every frame on one of the two queues", func() bool {
		got += len(onlyTest(b.Port.Collect(0, 64))) + len(onlyTest(b.Port.Collect(1, 64)))
		return got >= 2*per
	})
	if got != 2*per {
		t.Errorf("app got %d frames, want %d", got, 2*per)
	}
}

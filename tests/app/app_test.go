package app

import (
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// The app frees the port (kbridge_port_free) under a running kbridge: the
// free waits for kbridge to let go, kbridge exits non-zero naming the cause,
// and the pool is whole.
func TestAppFreesPortUnderKbridge(t *testing.T) {
	p := env.NewPort(t)
	k := env.NewKbridge(t, p)
	k.Ready()
	if q, err := p.Port.Inject(0, dpdkbed.Frames(32), ringtest.InjectOpts{}); err != nil || q != 32 {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	harness.WaitUntil(t, "kbridge to move the frames", 5*time.Second, func() bool {
		return k.Status().ToKernelPackets >= 32
	})

	k.Send(5) // some frames towards the app, left in from_kernel
	took := p.Free()
	if took >= 2*time.Second {
		t.Errorf("kbridge_port_free waited %v: kbridge did not let go (the wait is 2s)", took)
	}
	if !k.ExitedWithin(5 * time.Second) {
		t.Fatalf("kbridge still runs 5s after the app freed its port:\n%s", k.Log)
	}
	if code := k.ExitCode(); code <= 0 {
		t.Errorf("kbridge exited with %v, want a non-zero status", k.Err())
	}
	if out := k.Log.String(); !strings.Contains(out, "the DPDK app is freeing port "+p.Name) {
		t.Errorf("kbridge did not name the cause:\n%s", out)
	}
	if u := p.Pool.InUse(); u != 0 {
		t.Errorf("%d mbufs in use after the port was freed", u)
	}
	p.Pool.Audit()
	t.Logf("kbridge_port_free took %v", took)
}

// A version-1 app has no owner field: kbridge serves it as before and says
// that ownership cannot be enforced.
func TestVersion1AppWithoutOwnership(t *testing.T) {
	p := env.NewPort(t)
	p.Port.SetCtl(1, -1, -1)
	k := env.NewKbridge(t, p)
	k.Ready()
	if !strings.Contains(k.Log.String(), "one kbridge per port cannot be enforced") {
		t.Errorf("kbridge did not warn that ownership cannot be enforced:\n%s", k.Log)
	}
	if got := p.Port.OwnerPID(); got != 0 {
		t.Errorf("owner pid %d written into a version-1 block", got)
	}
	if q, err := p.Port.Inject(0, dpdkbed.Frames(4), ringtest.InjectOpts{}); err != nil || q != 4 {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	harness.WaitUntil(t, "kbridge to move the frames", 5*time.Second, func() bool {
		return k.Status().ToKernelPackets >= 4
	})
	k.Stop(true)
	p.Port.SetCtl(3, -1, -1)
}

// An insane control block is refused with a clear error, or its TSC rate
// turns residence times off with a warning instead of a SIGFPE.
func TestControlBlockValidation(t *testing.T) {
	t.Run("queues", func(t *testing.T) {
		p := env.NewPort(t)
		p.Port.SetCtl(-1, -1, 17)
		t.Cleanup(func() { p.Port.SetCtl(-1, -1, 1) })
		k := env.NewKbridge(t, p)
		if !k.ExitedWithin(15 * time.Second) {
			t.Fatalf("kbridge runs on a block with 17 queues:\n%s", k.Log)
		}
		if out := k.Log.String(); k.ExitCode() <= 0 || !strings.Contains(out, "invalid control block: the control block says 17 queues; 1 to 16 are possible") {
			t.Errorf("exit %v, want a non-zero exit naming the queue count:\n%s", k.Err(), out)
		}
		if got := p.Port.OwnerPID(); got != 0 {
			t.Errorf("a refused kbridge left owner pid %d", got)
		}
	})
	t.Run("tsc", func(t *testing.T) {
		p := env.NewPort(t)
		p.Port.SetCtl(-1, 999, -1)
		k := env.NewKbridge(t, p)
		k.Ready()
		if !strings.Contains(k.Log.String(), "a TSC of 999 Hz: residence times are off") {
			t.Errorf("no warning about the TSC rate:\n%s", k.Log)
		}
		if q, err := p.Port.Inject(0, dpdkbed.Frames(4), ringtest.InjectOpts{}); err != nil || q != 4 {
			t.Fatalf("inject: queued %d: %v", q, err)
		}
		harness.WaitUntil(t, "kbridge to move the frames", 5*time.Second, func() bool {
			return k.Status().ToKernelPackets >= 4
		})
		k.Stop(true)
	})
}

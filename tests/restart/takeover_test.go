package restart

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// A second kbridge on a served port refuses, exits non-zero and names the
// owner; the first keeps moving traffic. After a clean stop the owner is
// cleared and the port can be served again.
func TestSecondKbridgeRefuses(t *testing.T) {
	p := env.NewPort(t)
	first := env.NewKbridge(t, p)
	first.Ready()
	if got := p.Port.OwnerPID(); got != first.Pid() {
		t.Fatalf("control block owner pid %d, want the running kbridge's %d", got, first.Pid())
	}

	second := env.NewKbridge(t, p)
	if !second.ExitedWithin(15 * time.Second) {
		t.Fatalf("the second kbridge still runs after 15s:\n%s", second.Log)
	}
	if code := second.ExitCode(); code <= 0 {
		t.Errorf("the second kbridge exited with %v, want a non-zero status", second.Err())
	}
	want := fmt.Sprintf("port %s is served by kbridge pid %d (started ", p.Name, first.Pid())
	if out := second.Log.String(); !strings.Contains(out, want) || !strings.Contains(out, "stop it first") {
		t.Errorf("the second kbridge did not name the owner (want %q):\n%s", want, out)
	}
	if _, err := env.Link(second.Ifname); err == nil {
		t.Errorf("the refused kbridge created its interface %s", second.Ifname)
	}
	if got := p.Port.OwnerPID(); got != first.Pid() {
		t.Errorf("after the refusal the owner pid is %d, want %d", got, first.Pid())
	}

	// The first still moves traffic.
	before := first.Status().ToKernelPackets
	if q, err := p.Port.Inject(0, dpdkbed.Frames(16), ringtest.InjectOpts{}); err != nil || q != 16 {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	harness.WaitUntil(t, "the first kbridge to move the frames", 5*time.Second, func() bool {
		return first.Status().ToKernelPackets >= before+16
	})

	first.Stop(true)
	if got := p.Port.OwnerPID(); got != 0 {
		t.Errorf("owner pid %d after a clean stop, want 0 (released)", got)
	}
	third := env.NewKbridge(t, p)
	third.Ready()
	if strings.Contains(third.Log.String(), "taking the port over") {
		t.Errorf("a released port was taken over as if its owner had died:\n%s", third.Log)
	}
	third.Stop(true)
}

// kbridge killed (SIGKILL) while its worker holds a burst dequeued from
// to_kernel: the next kbridge takes the port over, frees the burst, and the
// pool's in-use count comes back to what sits in the rings.
func TestKillWithBurstInFlight(t *testing.T) {
	p := env.NewPort(t)
	victim := holdingKbridge(t, p, "out")
	victim.Ready()
	const n = 8
	if q, err := p.Port.Inject(0, dpdkbed.Frames(n), ringtest.InjectOpts{}); err != nil || q != n {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	victim.WaitLog(fmt.Sprintf("the worker holds %d mbufs (out)", n), 10*time.Second)
	if r, u := p.Port.InRings(0), p.Pool.InUse(); r != 0 || u != n {
		t.Fatalf("before the kill: %d mbufs in the rings and %d in use, want 0 and %d (held by the worker)", r, u, n)
	}
	victim.Kill()
	if got := p.Port.OwnerPID(); got != victim.Pid() {
		t.Fatalf("owner pid %d after the kill, want the dead kbridge's %d", got, victim.Pid())
	}
	if u := p.Pool.InUse(); u != n {
		t.Fatalf("%d mbufs in use after the kill, want the %d the dead worker held", u, n)
	}

	next := env.NewKbridge(t, p)
	next.Ready()
	tookOver(t, p, next, victim.Pid(), "", n)
	next.Stop(true)
	if u, r := p.Pool.InUse(), p.Port.InRings(0); u != r {
		t.Errorf("after stop %d mbufs in use, want the %d in the rings", u, r)
	}
	p.Pool.Audit()
}

// The same, from the kernel's side: kbridge killed between allocating mbufs
// for frames the kernel sent and enqueueing them to from_kernel.
func TestKillWithAllocatedInFlight(t *testing.T) {
	p := env.NewPort(t)
	victim := holdingKbridge(t, p, "in")
	victim.Ready()
	victim.Send(3)
	victim.WaitLog("mbufs (in)", 10*time.Second)
	held := p.Pool.InUse()
	if held == 0 || p.Port.InRings(0) != 0 {
		t.Fatalf("before the kill: %d in use, %d in the rings; want mbufs held by the worker and none queued", held, p.Port.InRings(0))
	}
	victim.Kill()

	next := env.NewKbridge(t, p)
	next.Ready()
	if out := next.Log.String(); !strings.Contains(out, fmt.Sprintf("to_kernel=0 from_kernel=%d", held)) {
		t.Errorf("the new kbridge did not say it freed the %d held mbufs:\n%s", held, out)
	}
	harness.WaitUntil(t, "the pool to be whole again", 5*time.Second, func() bool {
		return p.Pool.InUse() == p.Port.InRings(0)
	})
	next.Stop(true)
	p.Pool.Audit()
}

// tookOver checks what next, started on p after the kbridge dead (pid) was
// killed holding heldOut mbufs of to_kernel, must have done: said it took
// the port over (naming the dead one's fate, when fate is not ""), freed
// those mbufs, claimed the port, made the pool whole again, and that it
// moves traffic.
func tookOver(t *testing.T, p *dpdkbed.Port, next *dpdkbed.Kbridge, dead int, fate string, heldOut int) {
	t.Helper()
	out := next.Log.String()
	if !strings.Contains(out, "taking the port over from a kbridge that is gone") ||
		!strings.Contains(out, fmt.Sprintf("previous_pid=%d", dead)) || !strings.Contains(out, fate) {
		t.Errorf("the new kbridge did not say it took over from pid %d (%s):\n%s", dead, fate, out)
	}
	if !strings.Contains(out, fmt.Sprintf("to_kernel=%d from_kernel=0", heldOut)) {
		t.Errorf("the new kbridge did not say it freed the %d held mbufs:\n%s", heldOut, out)
	}
	if got := p.Port.OwnerPID(); got != next.Pid() {
		t.Errorf("owner pid %d, want the new kbridge's %d", got, next.Pid())
	}
	harness.WaitUntil(t, "the pool to be whole again", 5*time.Second, func() bool {
		return p.Pool.InUse() == p.Port.InRings(0)
	})
	if q, err := p.Port.Inject(0, dpdkbed.Frames(4), ringtest.InjectOpts{}); err != nil || q != 4 {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	harness.WaitUntil(t, "the new kbridge to move the frames", 5*time.Second, func() bool {
		return next.Status().ToKernelPackets >= 4
	})
}

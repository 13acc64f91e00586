package policy

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// SetSlice sets the calling thread's slice and 0 gives the default back
// (sched_getattr reports a SCHED_OTHER thread's slice since Linux 6.12),
// without touching the thread's nice value; the probe leaves the caller's
// threads alone.
func TestSetSlice(t *testing.T) {
	if !SliceSupported() {
		t.Skip("this kernel ignores sched_attr.sched_runtime for SCHED_OTHER (Linux < 6.12)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if before.Runtime == uint64(MinSlice) {
		t.Fatalf("the probe changed a caller's thread: runtime %d", before.Runtime)
	}
	if err := SetSlice(2 * MinSlice); err != nil {
		t.Fatal(err)
	}
	got, _ := unix.SchedGetAttr(0, 0)
	if got.Runtime != uint64(2*MinSlice) || got.Nice != before.Nice || got.Policy != before.Policy {
		t.Errorf("after SetSlice(%v): %+v (before %+v)", 2*MinSlice, got, before)
	}
	if err := SetSlice(0); err != nil {
		t.Fatal(err)
	}
	if got, _ := unix.SchedGetAttr(0, 0); got.Runtime != before.Runtime {
		t.Errorf("SetSlice(0) left slice %d, want the default %d", got.Runtime, before.Runtime)
	}
}

package restart

// kbridge restarted while the app keeps running. Every identifier here
// starts with rs.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// kbridge stopped (SIGTERM) and started again on the same port while the
// app runs: the app receives the new kbridge's eventfd (have_eventfd set
// again, the app's descriptor, still the same number, is one the new
// process holds, not the old one), frames the app queued meanwhile are
// delivered, and in interrupt mode with a one-minute park timeout every
// frame after the restart wakes the worker through a kick: a stale eventfd
// would leave it parked.
func TestRestartHandsTheAppTheNewEventfd(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{Iface: "", YAML: "policy:\n  mode: interrupt\n  park_timeout: 1m\n"})
	harness.WaitUntil(t, "the app to get the worker's eventfd", 10*time.Second, func() bool {
		return b.Port.Counters(0).HaveEventfd
	})
	pid1 := b.Kb.Pid()
	fd1 := b.Port.AppEventfd(0)
	id1 := rsEventfdID(t, os.Getpid(), fd1)
	if !rsHoldsEventfd(t, pid1, id1) {
		t.Fatalf("the app's eventfd (fd %d, eventfd-id %d) is not one kbridge pid %d holds", fd1, id1, pid1)
	}
	rsPingPong(t, b, 0, 100)
	st1, app1 := b.Status(), b.Port.Counters(0)
	if app1.Kicks == 0 || st1.Wakeups == 0 || st1.Timeouts != 0 {
		t.Fatalf("before the restart: app kicks %d, wakeups %d, timeouts %d; want kicks and wakeups, no timeout",
			app1.Kicks, st1.Wakeups, st1.Timeouts)
	}
	t.Logf("first kbridge (pid %d): app fd %d eventfd-id %d, %d kicks, %d wakeups", pid1, fd1, id1, app1.Kicks, st1.Wakeups)

	b.Stop(true)
	b.Port.ClearHaveEventfd(0)
	// The app keeps running and sends while no kbridge serves the port.
	const gap = 5
	for i := 0; i < gap; i++ {
		if q, err := b.Port.Inject(0, [][]byte{dpdkbed.TestFrame(64, uint32(1000+i))}, ringtest.InjectOpts{}); err != nil || q != 1 {
			t.Fatalf("inject while kbridge is down: queued %d: %v", q, err)
		}
	}

	b.Start()
	pid2 := b.Kb.Pid()
	harness.WaitUntil(t, "the app to get the new worker's eventfd", 10*time.Second, func() bool {
		return b.Port.Counters(0).HaveEventfd
	})
	fd2 := b.Port.AppEventfd(0)
	id2 := rsEventfdID(t, os.Getpid(), fd2)
	if id2 == id1 {
		t.Fatalf("the app still writes to the first kbridge's eventfd (eventfd-id %d)", id1)
	}
	if !rsHoldsEventfd(t, pid2, id2) {
		t.Fatalf("the app's eventfd (fd %d, eventfd-id %d) is not one the new kbridge pid %d holds", fd2, id2, pid2)
	}
	// The new eventfd replaced the old one behind the same number (dup2):
	// the number was never free, so an lcore that had just loaded it could
	// not write into a descriptor that took it.
	if fd2 != fd1 {
		t.Errorf("the app's eventfd moved from descriptor %d to %d: the old number was closed while lcores may hold it", fd1, fd2)
	}
	t.Logf("second kbridge (pid %d): app fd %d eventfd-id %d", pid2, fd2, id2)

	// What the app queued meanwhile crosses once the new kbridge runs.
	harness.WaitUntil(t, "the new kbridge to move the frames queued while it was down", 10*time.Second, func() bool {
		return b.Status().ToKernelPackets >= gap
	})
	harness.WaitUntil(t, "the new worker to park", 10*time.Second, func() bool { return b.Status().Parks > 0 })

	app2 := b.Port.Counters(0)
	rsPingPong(t, b, 2000, 200)
	st3, app3 := b.Status(), b.Port.Counters(0)
	t.Logf("after the restart: %d kicks, %d wakeups, %d parks, %d park timeouts",
		app3.Kicks-app2.Kicks, st3.Wakeups, st3.Parks, st3.Timeouts)
	if app3.Kicks == app2.Kicks {
		t.Errorf("the app never kicked after the restart: %+v", app3)
	}
	if st3.Wakeups == 0 {
		t.Errorf("the new worker never woke from a park: %+v", st3)
	}
	if st3.Timeouts != 0 {
		t.Errorf("%d parks of the new worker ended by the one-minute timeout", st3.Timeouts)
	}
	if d := st3.TotalDrops(); d != 0 {
		t.Errorf("the new kbridge dropped %d frames: %v", d, st3.Drops)
	}
}

// rsPingPong sends n frames one at a time, each only after the previous one
// arrived on the TAP side, each within 5 s: the worker parks in between, so
// each must be kicked awake (the park timeout is a minute).
func rsPingPong(t *testing.T, b *dpdkbed.Bed, seq0 uint32, n int) {
	t.Helper()
	ps := b.PacketSocket()
	for i := 0; i < n; i++ {
		f := dpdkbed.TestFrame(64, seq0+uint32(i))
		if q, err := b.Port.Inject(0, [][]byte{f}, ringtest.InjectOpts{}); err != nil || q != 1 {
			t.Fatalf("inject frame %d: queued %d: %v", i, q, err)
		}
		got := ps.Receive(1, 5*time.Second)
		if len(got) != 1 {
			st := b.Status()
			t.Fatalf("frame %d of %d did not arrive within 5s: the worker was not woken (stale eventfd?): "+
				"parks=%d wakeups=%d timeouts=%d app=%+v\n%s", i, n, st.Parks, st.Wakeups, st.Timeouts, b.Port.Counters(0), b.Out)
		}
		if !bytes.Equal(got[0], f) {
			t.Fatalf("frame %d differs", i)
		}
	}
}

// rsEventfdID reads the eventfd-id of pid's descriptor fd from fdinfo.
func rsEventfdID(t *testing.T, pid, fd int) int {
	t.Helper()
	if fd < 0 {
		t.Fatalf("pid %d has no eventfd (fd %d)", pid, fd)
	}
	id, ok := rsFdinfoEventfdID(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if !ok {
		t.Fatalf("fd %d of pid %d is not an eventfd (or the kernel shows no eventfd-id)", fd, pid)
	}
	return id
}

// rsHoldsEventfd reports whether pid holds an eventfd with the given id.
func rsHoldsEventfd(t *testing.T, pid, id int) bool {
	t.Helper()
	infos, err := filepath.Glob(fmt.Sprintf("/proc/%d/fdinfo/*", pid))
	if err != nil || len(infos) == 0 {
		t.Fatalf("reading pid %d's descriptors: %v", pid, err)
	}
	for _, p := range infos {
		if got, ok := rsFdinfoEventfdID(p); ok && got == id {
			return true
		}
	}
	return false
}

func rsFdinfoEventfdID(path string) (int, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "eventfd-id:"); ok {
			var id int
			if _, err := fmt.Sscan(strings.TrimSpace(v), &id); err == nil {
				return id, true
			}
		}
	}
	return 0, false
}

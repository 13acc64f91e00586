package tap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// inNewNetns runs f on a thread of its own in a network namespace of its
// own, which goes with the thread: f's interfaces never reach the host's.
// f reports failures with t.Error, not t.Fatal (another goroutine).
func inNewNetns(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes TAP interfaces in a namespace of its own")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare the network namespace: %v", err)
			return
		}
		f()
	}()
	<-done
}

// queuesOf is the number of queues the kernel counts attached to TAP name,
// and its MTU.
func queuesOf(name string) (queues, mtu int, err error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, 0, err
	}
	t, ok := l.(*netlink.Tuntap)
	if !ok {
		return 0, 0, fmt.Errorf("%s is a %s", name, l.Type())
	}
	return t.Queues + t.DisabledQueues, l.Attrs().MTU, nil
}

// A second Create of a TAP another kbridge (here: this process) holds is
// refused with ErrInUse, naming that kbridge, and joins none of its queues
// nor changes its MTU; once the first is closed, the name is free again.
func TestASecondCreateOfALiveTAPIsRefused(t *testing.T) {
	inNewNetns(t, func() {
		const name = "kbexcl0"
		first, err := Create(Config{Name: name, MTU: 1500, Up: true}, Options{Queues: 1, Batch: 8, MaxSegs: 4})
		if err != nil {
			t.Error(err)
			return
		}
		defer first.Close()
		second, err := Create(Config{Name: name, MTU: 1400, Up: true}, Options{Queues: 2, Batch: 8, MaxSegs: 4})
		if err == nil {
			second.Close()
			t.Error("the second Create of a live TAP succeeded")
		} else if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprint("kbridge pid ", os.Getpid())) {
			t.Errorf("the second Create: %v, want ErrInUse naming kbridge pid %d", err, os.Getpid())
		}
		t.Logf("the second Create: %v", err)
		if q, mtu, err := queuesOf(name); err != nil || q != 1 || mtu != 1500 {
			t.Errorf("the first TAP after the second Create: %d queues, MTU %d (%v), want 1 and 1500", q, mtu, err)
		}
		first.Close()
		again, err := Create(Config{Name: name, MTU: 1400, Up: true}, Options{Queues: 2, Batch: 8, MaxSegs: 4})
		if err != nil {
			t.Errorf("Create after the first closed: %v", err)
			return
		}
		again.Close()
	})
}

// A TAP a dead kbridge left behind (made persistent here, so that it
// outlives its queues) is an orphan: Create removes it and makes its own.
func TestCreateTakesOverAnOrphanOfADeadKbridge(t *testing.T) {
	inNewNetns(t, func() {
		const name = "kborph0"
		gone := exec.Command("true")
		if err := gone.Run(); err != nil {
			t.Error(err)
			return
		}
		fd, err := openQueue(name, true)
		if err == nil {
			err = unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1)
			unix.Close(fd)
		}
		var l netlink.Link
		if err == nil {
			l, err = netlink.LinkByName(name)
		}
		if err == nil {
			err = netlink.LinkSetAlias(l, fmt.Sprintf("%s%d start=1", aliasPrefix, gone.Process.Pid))
		}
		if err != nil {
			t.Errorf("the orphan: %v", err)
			return
		}
		d, err := Create(Config{Name: name, MTU: 1500}, Options{Queues: 1, Batch: 8, MaxSegs: 4})
		if err != nil {
			t.Errorf("Create over a dead kbridge's orphan: %v", err)
			return
		}
		defer d.Close()
		now, err := netlink.LinkByName(name)
		if err != nil {
			t.Error(err)
			return
		}
		if now.Attrs().Index == l.Attrs().Index || !now.(*netlink.Tuntap).NonPersist || now.Attrs().Alias != ownerAlias() {
			t.Errorf("the interface after Create: ifindex %d (the orphan's %d), persistent %v, alias %q: want a new, non-persistent one marked %q",
				now.Attrs().Index, l.Attrs().Index, !now.(*netlink.Tuntap).NonPersist, now.Attrs().Alias, ownerAlias())
		}
	})
}

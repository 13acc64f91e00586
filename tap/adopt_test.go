package tap

import (
	"errors"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// dupFds duplicates d's queue fds, as a successor receives them.
func dupFds(t *testing.T, d *Device) []int {
	t.Helper()
	var fds []int
	for _, fd := range d.Fds() {
		n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
		}
		fds = append(fds, n)
	}
	return fds
}

// An interface whose queue fds outlive the Device that made them is
// adopted as it is: the same ifindex, an address added by hand, the MTU
// an administrator set; queues are opened up to the count asked for.
func TestAdoptKeepsTheInterface(t *testing.T) {
	inNewNetns(t, func() {
		const name = "kbadopt0"
		cfg := Config{Name: name, MTU: 1500, Up: true, Offload: true}
		first, err := Create(cfg, Options{Queues: 2, Batch: 8, MaxSegs: 4})
		if err != nil {
			t.Error(err)
			return
		}
		l, _ := netlink.LinkByName(name)
		addr, _ := netlink.ParseAddr("198.18.66.1/24")
		if err := netlink.AddrAdd(l, addr); err != nil {
			t.Error(err)
		}
		if err := netlink.LinkSetMTU(l, 1400); err != nil {
			t.Error(err)
		}
		fds := dupFds(t, first)
		first.Close()
		d, a, err := Adopt(fds, cfg, Options{Queues: 3, Batch: 8, MaxSegs: 4})
		if err != nil {
			t.Error(err)
			return
		}
		defer d.Close()
		if a.From != os.Getpid() || a.Index != l.Attrs().Index || a.Handed != 2 || a.Opened != 1 {
			t.Errorf("adopted %+v, want from this pid, ifindex %d, 2 handed, 1 opened", a, l.Attrs().Index)
		}
		if q, mtu, err := queuesOf(name); q != 3 || mtu != 1400 || err != nil {
			t.Errorf("%d queues, MTU %d (%v); want 3 and the 1400 set by hand", q, mtu, err)
		}
		if d.MTU() != 1400 {
			t.Errorf("the queues hold frames to %d, want the interface's 1400", d.MTU())
		}
		addrs, _ := netlink.AddrList(l, unix.AF_INET)
		if len(addrs) != 1 || !addrs[0].IP.Equal(addr.IP) {
			t.Errorf("addresses %v, want the one added by hand", addrs)
		}
	})
}

// What is no queue of the named interface with kbridge's flags and mark is
// refused, and every fd given is closed.
func TestAdoptRefusesWhatIsNotItsInterface(t *testing.T) {
	inNewNetns(t, func() {
		cfg := Config{Name: "kbadopt1", MTU: 1500, Up: true}
		opt := Options{Queues: 1, Batch: 8, MaxSegs: 4}
		other, err := Create(Config{Name: "kbadopt2", MTU: 1500, Up: true}, opt)
		if err != nil {
			t.Error(err)
			return
		}
		defer other.Close()
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(p[1])
		unmarked, err := openQueue(cfg.Name, true) // a TAP of the name, without kbridge's mark
		if err != nil {
			t.Error(err)
			return
		}
		for what, fd := range map[string]int{"another interface's queue": dupFds(t, other)[0], "a pipe": p[0], "an unmarked TAP": unmarked} {
			if _, _, err := Adopt([]int{fd}, cfg, opt); !errors.Is(err, ErrNotAdoptable) {
				t.Errorf("%s: %v, want ErrNotAdoptable", what, err)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				t.Errorf("%s: fd %d left open", what, fd)
			}
		}
	})
}

// A persistent interface left by a kbridge that is gone (interface.on_stop:
// keep) is opened again and adopted, its ifindex kept; adopted, it is no
// longer persistent.
func TestAPersistentInterfaceIsAdoptedOnceItsKbridgeIsGone(t *testing.T) {
	inNewNetns(t, func() {
		const name = "kbadopt3"
		cfg := Config{Name: name, MTU: 1500, Up: true}
		opt := Options{Queues: 1, Batch: 8, MaxSegs: 4}
		first, err := Create(cfg, opt)
		if err != nil {
			t.Error(err)
			return
		}
		if err := first.Persist(true); err != nil {
			t.Error(err)
		}
		index := first.Index()
		first.Close()
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Errorf("the persistent interface went with its fds: %v", err)
			return
		}
		if fds, err := OpenPersistent(name, 1); !errors.Is(err, ErrInUse) || fds != nil {
			t.Errorf("while its kbridge (this process) lives: %v, %v; want ErrInUse", fds, err)
		}
		if err := netlink.LinkSetAlias(l, aliasPrefix+"999999999 start=1"); err != nil {
			t.Error(err)
		}
		fds, err := OpenPersistent(name, 1)
		if err != nil || len(fds) != 1 {
			t.Errorf("OpenPersistent: %v, %v", fds, err)
			return
		}
		d, a, err := Adopt(fds, cfg, opt)
		if err != nil {
			t.Error(err)
			return
		}
		if a.Index != index || a.From != 999999999 {
			t.Errorf("adopted %+v, want ifindex %d from pid 999999999", a, index)
		}
		d.Close()
		if _, err := netlink.LinkByName(name); err == nil {
			t.Error("the adopted interface is still persistent: it outlived its last fd")
		}
	})
}

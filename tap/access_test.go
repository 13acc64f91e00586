package tap

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tap/taptest"
	"github.com/kbridge/kbridge/tap/vnet"
)

// wantRefused checks that a process without privileges cannot attach a
// queue to TAP name of this thread's namespace.
func wantRefused(t *testing.T, name, when string) {
	t.Helper()
	if err := taptest.AttachAsNobody(taptest.NetnsOfThisThread(), name); !errors.Is(err, unix.EPERM) {
		t.Errorf("%s: an attach as uid %d: %v; want EPERM", when, taptest.Nobody, err)
	}
}

// wantOurs checks that TAP name's owner and group are this process's
// euid and egid, and that it has queues queues attached.
func wantOurs(t *testing.T, name string, queues int) {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Error(err)
		return
	}
	a, err := readAccess(l.Attrs().Index)
	if err != nil {
		t.Error(err)
		return
	}
	if !a.ours() || a.queues != queues {
		t.Errorf("%s: %s, %d queues; want owner %d, group %d, %d queues", name, a, a.queues, os.Geteuid(), os.Getegid(), queues)
	}
}

// The TAP kbridge makes, and makes again after a delete, is its own user's
// and group's before it is up: a process without privileges is refused a
// queue of it (any local user could attach one to a TAP without an owner).
func TestCreateLetsNoOtherUserAttach(t *testing.T) {
	inNewNetns(t, func() {
		const name = "kbacc0"
		d, err := Create(Config{Name: name, MTU: 1500, Up: true, Offload: true}, Options{Queues: 2, Batch: 8, MaxSegs: 4})
		if err != nil {
			t.Error(err)
			return
		}
		defer d.Close()
		wantOurs(t, name, 2)
		wantRefused(t, name, "made")
		l, _ := netlink.LinkByName(name)
		if err := netlink.LinkDel(l); err != nil {
			t.Error(err)
			return
		}
		if err := d.Recreate(); err != nil {
			t.Error(err)
			return
		}
		wantOurs(t, name, 2)
		wantRefused(t, name, "made again")
	})
}

// An adopted TAP that any user could join (made by a kbridge that set no
// owner) becomes kbridge's alone, logged; a queue attached that kbridge
// does not hold is counted and logged.
func TestAdoptTakesAnInterfaceOthersCouldJoin(t *testing.T) {
	inNewNetns(t, func() {
		const name = "kbacc1"
		first, err := openQueue(name, true) // as an older kbridge made it: no owner
		if err != nil {
			t.Error(err)
			return
		}
		l, err := netlink.LinkByName(name)
		if err == nil {
			markOwner(l)
			err = setOffloads(first, true)
		}
		intruder, ierr := openQueue(name, false) // held by someone else
		if err != nil || ierr != nil {
			t.Error(err, ierr)
			return
		}
		defer unix.Close(intruder)
		if err := taptest.AttachAsNobody(taptest.NetnsOfThisThread(), name); !errors.Is(err, taptest.ErrAttached) {
			t.Errorf("before the adoption an attach as uid %d: %v; want it attached", taptest.Nobody, err)
		}
		var buf strings.Builder
		log := slog.New(slog.NewTextHandler(&buf, nil))
		d, a, err := Adopt([]int{first}, Config{Name: name, MTU: 1500, Up: true, Offload: true},
			Options{Queues: 1, Batch: 8, MaxSegs: 4, Log: log})
		if err != nil {
			t.Error(err)
			return
		}
		defer d.Close()
		if a.Foreign != 1 {
			t.Errorf("adopted %+v: want 1 foreign queue", a)
		}
		wantOurs(t, name, 2)
		wantRefused(t, name, "adopted")
		for _, want := range []string{"the adopted interface let other users attach queues", "was=\"owner none, group none\"",
			"queues kbridge does not hold are attached", "foreign_queues=1"} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("the log lacks %q:\n%s", want, buf.String())
			}
		}
	})
}

// Fds are adopted only when each is an open /dev/net/tun attached to the
// interface of this network namespace, and no two are one open file.
func TestAdoptChecksEachFd(t *testing.T) {
	const name = "kbacc2"
	cfg := Config{Name: name, MTU: 1500, Up: true}
	opt := Options{Queues: 2, Batch: 8, MaxSegs: 4}
	refused := func(what string, fds []int, why string) {
		t.Helper()
		_, _, err := Adopt(fds, cfg, opt)
		if !errors.Is(err, ErrNotAdoptable) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want ErrNotAdoptable saying %q", what, err, why)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	inNewNetns(t, func() {
		other, err := Create(cfg, opt) // in another namespace, of the same name
		if err != nil {
			t.Error(err)
			return
		}
		defer other.Close()
		fromThere := dupFds(t, other)
		inNewNetns(t, func() {
			d, err := Create(cfg, opt)
			if err != nil {
				t.Error(err)
				return
			}
			defer d.Close()
			refused("a queue of the same name in another namespace", fromThere, "in another network namespace")
			fds := dupFds(t, d)
			twice, _ := unix.FcntlInt(uintptr(fds[0]), unix.F_DUPFD_CLOEXEC, 0)
			unix.Close(fds[1])
			refused("one queue's file twice", []int{fds[0], twice}, "are one open file")
			null, _ := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
			refused("a character device that is not /dev/net/tun", []int{null}, "not /dev/net/tun")
		})
	})
	inNewNetns(t, func() {
		fd, err := macvtap(name)
		if err != nil {
			t.Errorf("a macvtap queue: %v", err)
			return
		}
		refused("a macvtap queue with a TAP's name, flags and header", []int{fd}, "not /dev/net/tun")
	})
}

// macvtap makes a macvtap interface called name on a veth of this
// namespace and opens its queue with kbridge's flags and header size: an
// fd that answers TUNGETIFF as a queue of a TAP called name would, though
// it is no /dev/net/tun.
func macvtap(name string) (int, error) {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kbaccv0"}, PeerName: "kbaccv1"}
	if err := netlink.LinkAdd(veth); err != nil {
		return -1, err
	}
	parent, err := netlink.LinkByName("kbaccv0")
	if err != nil {
		return -1, err
	}
	mv := &netlink.Macvtap{Macvlan: netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: parent.Attrs().Index}}}
	if err := netlink.LinkAdd(mv); err != nil {
		return -1, err
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Open(fmt.Sprintf("/dev/tap%d", l.Attrs().Index), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, _ := unix.NewIfreq("")
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnet.HdrLen); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETVNETHDRSZ: %w", err)
	}
	return fd, nil
}

// One file's fds are one queue, however many: refused; distinct files pass.
func TestCheckDistinctRefusesOneFileTwice(t *testing.T) {
	var a, b [2]int
	if err := unix.Pipe2(a[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Pipe2(b[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	dup, err := unix.FcntlInt(uintptr(a[0]), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range append(a[:], append(b[:], dup)...) {
		defer unix.Close(fd)
	}
	if err := checkDistinct([]int{a[0], b[0], a[1]}); err != nil {
		t.Errorf("distinct files: %v", err)
	}
	if err := checkDistinct([]int{a[0], b[0], dup}); !errors.Is(err, ErrNotAdoptable) {
		t.Errorf("a file twice: %v, want ErrNotAdoptable", err)
	}
}

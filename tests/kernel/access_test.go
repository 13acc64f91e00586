package kernel

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// Mode ring: kb0 is kbridge's user's and group's alone from its making, so
// that a local user without privileges cannot attach a queue to it (and
// read a share of the frames the kernel sends toward the app, write frames
// as if from the wire, turn its carrier off); the same once kb0 was
// deleted and made again. The path works throughout.
func TestKernelOtherUsersCannotAttachAQueue(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{Queues: 2, Iface: kfIface})
	harness.NoOtherUserAttaches(t, env.NS, b.Ifname)
	kfRoundTrip(t, b, 1)

	old, err := b.Link()
	if err != nil {
		t.Fatal(err)
	}
	b.IP("link", "del", b.Ifname)
	harness.WaitUntil(t, "the interface made again", 5*time.Second, func() bool {
		l, err := b.Link()
		return err == nil && l.Attrs().Index != old.Attrs().Index
	})
	harness.NoOtherUserAttaches(t, env.NS, b.Ifname)
	kfRoundTrip(t, b, 10)
}

// kb0's carrier is the app's link: turned off outside kbridge (ip link set
// carrier off, or TUNSETCARRIER from a queue of someone else's), it comes
// back, logged and counted (carrier_restored).
func TestKernelCarrierTurnedOutsideIsSetBack(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{Iface: kfIface})
	carrier := func() bool {
		l, err := b.Link()
		return err == nil && l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
	}
	restored := func() uint64 {
		st, err := daemon.ReadStatus(b.Sock)
		if err != nil {
			t.Fatal(err)
		}
		return st.CarrierRestored
	}
	if !carrier() {
		t.Fatal("no carrier at start")
	}
	for i, turn := range []struct {
		how string
		off func()
	}{
		{"ip link set carrier off", func() { b.IP("link", "set", b.Ifname, "carrier", "off") }},
		{"TUNSETCARRIER 0 from another queue", func() { foreignCarrierOff(t, b) }},
	} {
		turn.off()
		took := harness.WaitUntil(t, "the carrier back after "+turn.how, 5*time.Second, func() bool {
			return carrier() && restored() == uint64(i+1)
		})
		t.Logf("%s: the carrier back after %v", turn.how, took)
		b.WaitLogCount("carrier was turned outside kbridge: set back", i+1)
	}
	if !strings.Contains(b.Out.String(), "was=false carrier=true") {
		t.Errorf("the log does not say what the carrier was and is:\n%s", b.Out)
	}
	kfRoundTrip(t, b, 1)
}

// foreignCarrierOff attaches a queue of its own to the bed's interface (as
// root, which may) and turns the carrier off from it.
func foreignCarrierOff(t *testing.T, b *dpdkbed.Bed) {
	t.Helper()
	err := dpdkbed.InNS(env.NS, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq(b.Ifname)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_MULTI_QUEUE | unix.IFF_VNET_HDR | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return err
		}
		// Closed with the carrier off: a detached queue leaves it so.
		return unix.IoctlSetPointerInt(fd, unix.TUNSETCARRIER, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
}

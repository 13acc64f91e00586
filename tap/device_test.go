package tap

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
)

// Device.SetMTU sets every queue and the MTU a re-made interface gets, all
// or none, and leaves the kernel interface's MTU to the caller.
func TestDeviceSetMTU(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a TAP interface")
	}
	name := fmt.Sprintf("kbmtu%d", os.Getpid()%100000)
	d, err := Create(Config{Name: name, MTU: mtu}, Options{Queues: 2, Batch: 8, MaxSegs: 4, MaxMTU: jumbo})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.MTU() != mtu || d.MaxMTU() != jumbo {
		t.Fatalf("MTU %d, MaxMTU %d, want %d and %d", d.MTU(), d.MaxMTU(), mtu, jumbo)
	}
	if err := d.SetMTU(jumbo + 1); !errors.Is(err, ErrMTURange) || d.MTU() != mtu {
		t.Errorf("SetMTU(%d): %v, MTU %d: want ErrMTURange and %d", jumbo+1, err, d.MTU(), mtu)
	}
	if err := d.SetMTU(jumbo); err != nil {
		t.Fatal(err)
	}
	for i, q := range d.queues {
		if m := q.nextMTU.Load(); m != jumbo {
			t.Errorf("queue %d: MTU %d, want %d", i, m, jumbo)
		}
	}
	if d.MTU() != jumbo || d.cfg.MTU != jumbo {
		t.Errorf("MTU %d, recorded %d, want %d", d.MTU(), d.cfg.MTU, jumbo)
	}
	if l, err := netlink.LinkByName(name); err != nil || l.Attrs().MTU != mtu {
		t.Errorf("the kernel interface: %v, want it left at MTU %d", err, mtu)
	}
	d.Close()
	if err := d.SetMTU(mtu); !errors.Is(err, ErrClosed) {
		t.Errorf("SetMTU on a closed device: %v, want ErrClosed", err)
	}
}

// A carrier change that fails because the interface was deleted under the
// device (its queues' fds dead until the keeper makes it again) is not
// lost: the re-made interface gets it, as it gets the speed.
func TestCarrierSetWhileTheInterfaceIsGoneReachesTheRemadeOne(t *testing.T) {
	d, l := rootDevice(t, "kbcar", true)
	name := l.Attrs().Name
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	if err := d.SetCarrier(false); err == nil {
		t.Fatal("SetCarrier on a deleted interface: no error")
	}
	if err := d.Recreate(); err != nil {
		t.Fatal(err)
	}
	carrier, err := os.ReadFile("/sys/class/net/" + name + "/carrier")
	if err != nil {
		t.Fatal(err)
	}
	if string(carrier) != "0\n" {
		t.Errorf("the re-made interface's carrier is %q, want the 0 set while it was gone", carrier)
	}
}

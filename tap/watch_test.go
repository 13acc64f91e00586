package tap

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// nextEvent waits for the watch's next event that has want.
func nextEvent(t *testing.T, w *Watch, want Event) Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("the events closed while waiting for %v", want)
			}
			if e&want == want {
				return e
			}
		case <-deadline:
			t.Fatalf("no %v event", want)
		}
	}
}

// rootDevice makes a TAP interface called prefix and the pid, with one
// queue, closed when the test ends, and returns it with its link.
func rootDevice(t *testing.T, prefix string, up bool) (*Device, netlink.Link) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a TAP interface")
	}
	name := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	d, err := Create(Config{Name: name, MTU: mtu, Up: up}, Options{Queues: 1, Batch: 8, MaxSegs: 4, MaxMTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return d, l
}

func TestTheWatchReportsWhatChangedAndTheDeviceSetsItBack(t *testing.T) {
	d, l := rootDevice(t, "kbwat", true)
	w, err := d.Watch(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	if err := netlink.LinkSetMTU(l, mtu+100); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, w, EventMTU)
	if s, err := d.State(); err != nil || s.MTU != mtu+100 || d.MTU() != mtu {
		t.Errorf("State %+v, %v; MTU %d: want the kernel's %d, the queues' %d", s, err, d.MTU(), mtu+100, mtu)
	}
	if err := d.Set(Change{Kind: ChangeMTU, MTU: mtu}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, w, EventMTU)

	if err := netlink.SetPromiscOn(l); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, w, EventPromisc)
	if err := d.Remember(Change{Kind: ChangePromisc, On: true}); err != nil || !d.Known(ChangePromisc).On {
		t.Errorf("Remember: %v, known %v: want promisc on", err, d.Known(ChangePromisc).On)
	}
	if err := d.Remember(Change{Kind: ChangeMTU, MTU: 9000}); !errors.Is(err, ErrUnknownChange) {
		t.Errorf("Remember of an MTU: %v, want ErrUnknownChange (SetMTU remembers it)", err)
	}

	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, w, EventDeleted)
	if _, err := d.State(); !errors.Is(err, ErrDeleted) {
		t.Fatalf("State of a deleted interface: %v, want ErrDeleted", err)
	}
	old := d.Index()
	if err := d.Recreate(); err != nil {
		t.Fatal(err)
	}
	s, err := d.State()
	if err != nil || s.Index == old || !s.Promisc || s.MTU != mtu {
		t.Errorf("the re-made interface: %+v, %v: want a new ifindex, promisc on (remembered), MTU %d", s, err, mtu)
	}
	if err := d.Set(Change{Kind: ChangeAllmulti, On: true}); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, w, EventAllmulti)
}

func TestRecreateLeavesAnInterfaceThatTookTheName(t *testing.T) {
	d, l := rootDevice(t, "kbtkn", false)
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	// Not a TAP, so Recreate cannot mistake it for its own.
	other := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: l.Attrs().Name}}
	if err := netlink.LinkAdd(other); err != nil {
		t.Fatal(err)
	}
	defer netlink.LinkDel(other)
	if err := d.Recreate(); !errors.Is(err, ErrNameTaken) {
		t.Errorf("Recreate over a bridge of the name: %v, want ErrNameTaken", err)
	}
}

// Watches share the process's one link subscription: each hears its own
// interface only, and one that closes leaves the others hearing theirs.
func TestWatchesShareOneSubscription(t *testing.T) {
	a, la := rootDevice(t, "kbsha", true)
	b, lb := rootDevice(t, "kbshb", true)
	wa, err := a.Watch(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	wb, err := b.Watch(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	links.mu.Lock()
	n := len(links.watches)
	links.mu.Unlock()
	if n != 2 {
		t.Fatalf("two watches, %d on the shared subscription", n)
	}

	if err := netlink.LinkSetMTU(la, mtu+100); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, wa, EventMTU)
	for quiet := time.After(200 * time.Millisecond); ; {
		select {
		case e := <-wb.Events():
			if e&EventMTU != 0 {
				t.Fatalf("%s's watch heard %v when %s's MTU changed", lb.Attrs().Name, e, la.Attrs().Name)
			}
			continue
		case <-quiet:
		}
		break
	}

	wa.Close()
	if err := netlink.LinkSetMTU(lb, mtu+100); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, wb, EventMTU)
	wb.Close()
	links.mu.Lock()
	running := links.stop != nil
	links.mu.Unlock()
	if running {
		t.Error("the subscription runs on after the last watch closed")
	}
}

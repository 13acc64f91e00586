package faults

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/ring/ringtest"
)

const kfIface = `  mtu: 1400
  addresses: [198.18.77.2/24]
  routes:
    - {to: 198.18.78.0/24, via: 198.18.77.1}
`

// kfRoundTrip checks that frames cross both ways: app -> kernel (seen on a
// packet socket) and kernel -> app (collected from the app's ring).
func kfRoundTrip(t *testing.T, b *kfBed, seq uint32) {
	t.Helper()
	ps := b.PacketSocket()
	frames := [][]byte{kfFrame(60, seq), kfFrame(1000, seq+1), kfFrame(1414, seq+2)}
	if q, err := b.Port.Inject(0, frames, ringtest.InjectOpts{}); err != nil || q != len(frames) {
		t.Fatalf("queued %d of %d: %v", q, len(frames), err)
	}
	got := ps.Receive(len(frames), 5*time.Second)
	if len(got) != len(frames) {
		t.Fatalf("app -> kernel: got %d frames, want %d\n%s", len(got), len(frames), b.Out)
	}
	for i := range frames {
		if !bytes.Equal(got[i], frames[i]) {
			t.Errorf("app -> kernel: frame %d differs", i)
		}
	}
	back := [][]byte{kfFrame(300, seq+10)}
	ps.Send(t, back)
	var in [][]byte
	kfWaitUntil(t, 5*time.Second, "the kernel's frame in the app's ring", func() bool {
		in = append(in, kfOnlyTest(b.Port.Collect(0, 64))...)
		return len(in) >= 1
	})
	if !bytes.Equal(in[0], back[0]) {
		t.Error("kernel -> app: the frame differs")
	}
}

// ip link del kb0 while kbridge runs: within a second the interface is
// back with the same name, MTU, MAC, address and route, traffic crosses
// both ways again, and the worker never spun on the dead fds.
func TestKernelDeletedInterfaceIsMadeAgain(t *testing.T) {
	b := kfNewBed(t, kfIface, "")
	kfRoundTrip(t, b, 1)
	old, err := b.Link()
	if err != nil {
		t.Fatal(err)
	}
	before := b.Status()

	kfIP(b, "link", "del", b.Ifname)
	took := kfWaitUntil(t, 5*time.Second, "the interface made again", func() bool {
		l, err := b.Link()
		return err == nil && l.Attrs().Index != old.Attrs().Index && l.Attrs().Flags&1 != 0 &&
			slices.Contains(kfRoutes(b), "198.18.78.0/24 via 198.18.77.1")
	})
	t.Logf("interface made again, with its route, %v after the delete", took)
	if took > time.Second {
		t.Errorf("the interface took %v to come back; want within a second", took)
	}
	l, _ := b.Link()
	if l.Attrs().MTU != 1400 {
		t.Errorf("MTU %d, want 1400", l.Attrs().MTU)
	}
	if l.Attrs().HardwareAddr.String() != old.Attrs().HardwareAddr.String() {
		t.Errorf("MAC %s, want the old one %s", l.Attrs().HardwareAddr, old.Attrs().HardwareAddr)
	}
	if a := kfAddrs(b); !slices.Contains(a, "198.18.77.2/24") {
		t.Errorf("addresses %v, want 198.18.77.2/24", a)
	}
	if !kfWaitLog(t, b, "deleted and made again") {
		t.Errorf("no log line says the interface was made again:\n%s", b.Out)
	}

	// No spin: an idle worker parks about 10 times a second (the 100ms
	// park timeout); one spinning on a dead fd parks (or fails reads)
	// hundreds of thousands of times.
	time.Sleep(time.Second)
	after := b.Status()
	parks := after.Parks - before.Parks
	readErrs := after.Drops["tap_read_error"] - before.Drops["tap_read_error"]
	t.Logf("over the delete and one second: %d parks, %d tap read errors", parks, readErrs)
	if parks > 500 || readErrs > 500 {
		t.Errorf("%d parks and %d read errors around the delete: the worker spun on the dead fd", parks, readErrs)
	}

	kfRoundTrip(t, b, 100)
	// And the worker still parks on the new fd: one frame from the kernel
	// wakes it at once rather than at the park timeout.
	time.Sleep(300 * time.Millisecond)
	ps := b.PacketSocket()
	wakeups := b.Status().Wakeups
	ps.Send(t, [][]byte{kfFrame(100, 500)})
	kfWaitUntil(t, 5*time.Second, "the frame in the app's ring", func() bool {
		return len(kfOnlyTest(b.Port.Collect(0, 64))) == 1
	})
	if w := b.Status().Wakeups; w == wakeups {
		t.Errorf("the frame reached the app without waking the parked worker: is the new fd watched?")
	}

	// Deleted a second time: made again a second time.
	l, _ = b.Link()
	kfIP(b, "link", "del", b.Ifname)
	kfWaitUntil(t, 5*time.Second, "the interface made again twice", func() bool {
		nl, err := b.Link()
		return err == nil && nl.Attrs().Index != l.Attrs().Index
	})
	kfRoundTrip(t, b, 200)
}

// ip link set down; ip link set up: the kernel drops the routes on the way
// down, kbridge adds the configured ones (and addresses) on the way up.
func TestKernelDownUpRestoresRoutes(t *testing.T) {
	b := kfNewBed(t, kfIface, "")
	const want = "198.18.78.0/24 via 198.18.77.1"
	if r := kfRoutes(b); !slices.Contains(r, want) {
		t.Fatalf("routes at start %v, want %q", r, want)
	}
	kfIP(b, "link", "set", b.Ifname, "down")
	kfWaitUntil(t, 5*time.Second, "the kernel to drop the route", func() bool {
		return !slices.Contains(kfRoutes(b), want)
	})
	kfIP(b, "addr", "flush", "dev", b.Ifname) // as if the addresses went too
	kfIP(b, "link", "set", b.Ifname, "up")
	took := kfWaitUntil(t, 5*time.Second, "the route back", func() bool {
		return slices.Contains(kfRoutes(b), want) && slices.Contains(kfAddrs(b), "198.18.77.2/24")
	})
	t.Logf("address and route back %v after the up", took)
	if !kfWaitLog(t, b, "addresses and routes re-applied") {
		t.Errorf("no log line says the routes were re-applied:\n%s", b.Out)
	}
	kfRoundTrip(t, b, 1)
}

// An admin's MTU change is refused: logged as an error and set back to
// interface.mtu, larger or smaller.
func TestKernelMTUChangeIsSetBack(t *testing.T) {
	b := kfNewBed(t, kfIface, "")
	for i, mtu := range []string{"9000", "1280"} {
		kfIP(b, "link", "set", b.Ifname, "mtu", mtu)
		took := kfWaitUntil(t, 5*time.Second, "the MTU set back to 1400", func() bool {
			l, err := b.Link()
			return err == nil && l.Attrs().MTU == 1400
		})
		t.Logf("mtu %s set back to 1400 after %v", mtu, took)
		kfWaitLogCount(t, b, "MTU was changed outside kbridge", i+1)
		if n := strings.Count(b.Out.String(), "MTU was changed outside kbridge"); n != i+1 {
			t.Errorf("%d log lines about the MTU change, want %d:\n%s", n, i+1, b.Out)
		}
		if !strings.Contains(b.Out.String(), "mtu="+mtu) {
			t.Errorf("the log does not name the MTU %s:\n%s", mtu, b.Out)
		}
	}
	kfRoundTrip(t, b, 1)
}

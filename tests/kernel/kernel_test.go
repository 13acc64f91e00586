package kernel

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

const kfIface = `  mtu: 1400
  addresses: [198.18.77.2/24]
  routes:
    - {to: 198.18.78.0/24, via: 198.18.77.1}
`

// kfRoundTrip checks that frames cross both ways: app -> kernel (seen on a
// packet socket) and kernel -> app (collected from the app's ring).
func kfRoundTrip(t *testing.T, b *dpdkbed.Bed, seq uint32) {
	t.Helper()
	ps := b.PacketSocket()
	frames := [][]byte{dpdkbed.TestFrame(60, seq), dpdkbed.TestFrame(1000, seq+1), dpdkbed.TestFrame(1414, seq+2)}
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
	back := [][]byte{dpdkbed.TestFrame(300, seq+10)}
	ps.Send(t, back)
	var in [][]byte
	harness.WaitUntil(t, "the kernel's frame in the app's ring", 5*time.Second, func() bool {
		in = append(in, dpdkbed.OnlyTest(b.Port.Collect(0, 64))...)
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
	b := env.NewBed(t, dpdkbed.Opts{Iface: kfIface, YAML: ""})
	kfRoundTrip(t, b, 1)
	old, err := b.Link()
	if err != nil {
		t.Fatal(err)
	}
	before := b.Status()

	b.IP("link", "del", b.Ifname)
	took := harness.WaitUntil(t, "the interface made again", 5*time.Second, func() bool {
		l, err := b.Link()
		return err == nil && l.Attrs().Index != old.Attrs().Index && l.Attrs().Flags&1 != 0 &&
			slices.Contains(b.Routes(), "198.18.78.0/24 via 198.18.77.1")
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
	if a := b.Addrs(); !slices.Contains(a, "198.18.77.2/24") {
		t.Errorf("addresses %v, want 198.18.77.2/24", a)
	}
	if !b.WaitLog("deleted and made again") {
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
	ps.Send(t, [][]byte{dpdkbed.TestFrame(100, 500)})
	harness.WaitUntil(t, "the frame in the app's ring", 5*time.Second, func() bool {
		return len(dpdkbed.OnlyTest(b.Port.Collect(0, 64))) == 1
	})
	if w := b.Status().Wakeups; w == wakeups {
		t.Errorf("the frame reached the app without waking the parked worker: is the new fd watched?")
	}

	// Deleted a second time: made again a second time.
	l, _ = b.Link()
	b.IP("link", "del", b.Ifname)
	harness.WaitUntil(t, "the interface made again twice", 5*time.Second, func() bool {
		nl, err := b.Link()
		return err == nil && nl.Attrs().Index != l.Attrs().Index
	})
	kfRoundTrip(t, b, 200)
}

// ip link set down; ip link set up: the kernel drops the routes on the way
// down, kbridge adds the configured ones (and addresses) on the way up.
func TestKernelDownUpRestoresRoutes(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{Iface: kfIface, YAML: ""})
	const want = "198.18.78.0/24 via 198.18.77.1"
	if r := b.Routes(); !slices.Contains(r, want) {
		t.Fatalf("routes at start %v, want %q", r, want)
	}
	b.IP("link", "set", b.Ifname, "down")
	harness.WaitUntil(t, "the kernel to drop the route", 5*time.Second, func() bool {
		return !slices.Contains(b.Routes(), want)
	})
	b.IP("addr", "flush", "dev", b.Ifname) // as if the addresses went too
	b.IP("link", "set", b.Ifname, "up")
	took := harness.WaitUntil(t, "the route back", 5*time.Second, func() bool {
		return slices.Contains(b.Routes(), want) && slices.Contains(b.Addrs(), "198.18.77.2/24")
	})
	t.Logf("address and route back %v after the up", took)
	if !b.WaitLog("addresses and routes re-applied") {
		t.Errorf("no log line says the routes were re-applied:\n%s", b.Out)
	}
	kfRoundTrip(t, b, 1)
}

// An admin's MTU change is refused: logged as an error and set back to
// interface.mtu, larger or smaller.
func TestKernelMTUChangeIsSetBack(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{Iface: kfIface, YAML: ""})
	for i, mtu := range []string{"9000", "1280"} {
		b.IP("link", "set", b.Ifname, "mtu", mtu)
		took := harness.WaitUntil(t, "the MTU set back to 1400", 5*time.Second, func() bool {
			l, err := b.Link()
			return err == nil && l.Attrs().MTU == 1400
		})
		t.Logf("mtu %s set back to 1400 after %v", mtu, took)
		b.WaitLogCount("MTU was changed outside kbridge", i+1)
		if n := strings.Count(b.Out.String(), "MTU was changed outside kbridge"); n != i+1 {
			t.Errorf("%d log lines about the MTU change, want %d:\n%s", n, i+1, b.Out)
		}
		if !strings.Contains(b.Out.String(), "mtu="+mtu) {
			t.Errorf("the log does not name the MTU %s:\n%s", mtu, b.Out)
		}
	}
	kfRoundTrip(t, b, 1)
}

// kb0 deleted while the worker is busy, not parked: traffic floods both
// ways (the kernel side through a packet socket, the app side through the
// ring) and a 200ms spin keeps the worker polling across the delete, so
// the keeper's dup3 closes the old file before any park saw its error and
// its epoll entry vanishes without an event. Then, with the traffic
// stopped and the worker parked, single frames from the kernel must reach
// the app by a wakeup from the new fd (the wakeups counter moves), never
// by the park timeout (one minute here: a missed fd shows as a stall).
func TestKernelDeletedUnderLoadKeepsTheFdWatched(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{Iface: kfIface, YAML: "policy:\n  mode: adaptive\n  spin: 200ms\n  park_timeout: 1m\n"})
	harness.WaitUntil(t, "the app to get the worker's eventfd", 10*time.Second, func() bool {
		return b.Port.Counters(0).HaveEventfd
	})
	old, err := b.Link()
	if err != nil {
		t.Fatal(err)
	}
	ps := b.PacketSocket()
	ringtest.Preload(dpdkbed.TestFrame(200, 1))

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the app side: a burst into the ring, what came back freed
		defer wg.Done()
		for !stop.Load() {
			b.Port.InjectPreloaded(0, 32)
			b.Port.Drain(0)
		}
	}()
	go func() { // the kernel side: frames out of kb0 (refused once it is gone)
		defer wg.Done()
		f := dpdkbed.TestFrame(200, 2)
		to := &unix.SockaddrLinklayer{Ifindex: old.Attrs().Index, Protocol: dpdkbed.Htons(dpdkbed.EthType), Halen: 6}
		copy(to.Addr[:], f[:6])
		for !stop.Load() {
			if err := unix.Sendto(ps.Fd, f, 0, to); err != nil {
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	flowing := b.Status()
	harness.WaitUntil(t, "traffic both ways", 5*time.Second, func() bool {
		s := b.Status()
		return s.ToKernelPackets > flowing.ToKernelPackets+1000 && s.FromKernelPackets > flowing.FromKernelPackets+1000
	})
	before := b.Status()
	b.IP("link", "del", b.Ifname)
	took := harness.WaitUntil(t, "the interface made again", 5*time.Second, func() bool {
		l, err := b.Link()
		return err == nil && l.Attrs().Index != old.Attrs().Index && l.Attrs().Flags&1 != 0
	})
	if !b.WaitLog("deleted and made again") {
		t.Fatalf("no log line says the interface was made again:\n%s", b.Out)
	}
	time.Sleep(100 * time.Millisecond) // the app side floods on over the new fd
	stop.Store(true)
	wg.Wait()
	during := b.Status()
	t.Logf("made again %v after the delete; meanwhile %d packets to the kernel, %d from it, %d parks",
		took, during.ToKernelPackets-before.ToKernelPackets, during.FromKernelPackets-before.FromKernelPackets,
		during.Parks-before.Parks)
	if during.Parks != before.Parks {
		t.Errorf("the worker parked %d times during the delete under load: this test wants it busy throughout (the flood stalled?)",
			during.Parks-before.Parks)
	}

	// Quiet now: each frame finds the worker parked on the new fd.
	ps2 := b.PacketSocket()
	var lat []time.Duration
	parks := during.Parks
	for i := range 10 {
		harness.WaitUntil(t, "the worker to park", 5*time.Second, func() bool { return b.Status().Parks > parks })
		time.Sleep(20 * time.Millisecond) // into epoll_pwait2
		b.Port.Drain(0)
		st := b.Status()
		seq := uint32(1000 + i)
		start := time.Now()
		ps2.Send(t, [][]byte{dpdkbed.TestFrame(100, seq)})
		found := false
		for !found && time.Since(start) < 5*time.Second {
			for _, f := range dpdkbed.OnlyTest(b.Port.Collect(0, 8)) {
				found = found || binary.BigEndian.Uint32(f[14:18]) == seq
			}
		}
		d := time.Since(start)
		if !found {
			t.Fatalf("frame %d from the kernel not in the app's ring after %v: the new fd is not watched (the park timeout is 1m)", i, d)
		}
		lat = append(lat, d)
		after := b.Status()
		if after.Wakeups == st.Wakeups {
			t.Errorf("frame %d reached the app without a wakeup of the parked worker", i)
		}
		if after.Timeouts != st.Timeouts {
			t.Errorf("frame %d: %d parks ended by the timeout", i, after.Timeouts-st.Timeouts)
		}
		parks = after.Parks
	}
	slices.Sort(lat)
	t.Logf("kernel -> app after the recreate, one frame into a parked worker (%d frames): min %v, median %v, max %v",
		len(lat), lat[0], lat[len(lat)/2], lat[len(lat)-1])
}

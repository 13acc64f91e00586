package bridge_test

import (
	"bytes"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/bridge/bridgetest"
	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/policy"
)

const mtu = 1500

type rig struct {
	w     *bridge.Worker
	out   *bridgetest.Out
	in    *bridgetest.In
	waker *bridgetest.Waker
	k     *bridgetest.Kernel
}

func newRig(t *testing.T, p policy.Policy) *rig {
	t.Helper()
	k, err := bridgetest.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	r := &rig{out: bridgetest.NewOut(32, 4), in: bridgetest.NewIn(32, mtu+18+64), k: k}
	r.waker = &bridgetest.Waker{Out: r.out}
	r.w, err = bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: p}, bridgetest.App(r.out, r.in, r.waker), k)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// frame returns an Ethernet frame of n bytes with a recognisable pattern.
func frame(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	if n >= 14 {
		b[12], b[13] = 0x08, 0x00
	}
	return b
}

func readPeer(t *testing.T, fd int) [][]byte {
	t.Helper()
	var got [][]byte
	buf := make([]byte, 1<<16)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, append([]byte(nil), buf[:n]...))
	}
}

func split(b []byte, sizes ...int) [][]byte {
	var segs [][]byte
	for _, s := range sizes {
		segs = append(segs, b[:s])
		b = b[s:]
	}
	if len(b) > 0 {
		segs = append(segs, b)
	}
	return segs
}

// The worker hands whole bursts to the kernel side and frees every packet
// exactly once; the frame rules are the kernel side's (see package tap).
func TestToKernelHandsBurstsOverAndFreesEachPacketOnce(t *testing.T) {
	r := newRig(t, policy.Default())
	good := frame(60, 1)
	chained := frame(1000, 3)
	r.out.Enqueue(
		bridgetest.Frame(good),
		bridgetest.Packet{Segs: split(chained, 100, 300, 500)},
		bridgetest.Packet{Segs: [][]byte{frame(100, 8)}, ClaimLen: 90},
		bridgetest.Packet{Segs: split(frame(500, 7), 50, 50, 50, 50)}, // 5 segments > 4
	)
	if n := r.w.ToKernel(); n != 4 {
		t.Fatalf("ToKernel moved %d packets, want 4", n)
	}
	got := readPeer(t, r.k.Peer)
	if len(got) != 2 || !bytes.Equal(got[0], good) || !bytes.Equal(got[1], chained) {
		t.Fatalf("kernel got %d frames, want the 2 whole ones byte for byte", len(got))
	}
	s := r.w.Counters().Snapshot()
	if s.Drops["malformed"] != 1 || s.Drops["too_many_segments"] != 1 || s.ToKernelPackets != 2 || r.out.Delivered != 2 {
		t.Errorf("malformed = %d, too_many_segments = %d, to_kernel_packets = %d, delivered = %d, want 1, 1, 2, 2",
			s.Drops["malformed"], s.Drops["too_many_segments"], s.ToKernelPackets, r.out.Delivered)
	}
	if want := uint64(len(good) + len(chained)); s.ToKernelBytes != want {
		t.Errorf("to_kernel_bytes = %d, want %d: the bytes of the packets written", s.ToKernelBytes, want)
	}
	r.out.Next()
	if r.out.Released != 4 {
		t.Errorf("released %d packets, want all 4 exactly once", r.out.Released)
	}
}

func TestToKernelWriteErrorCountsAndGoesOn(t *testing.T) {
	r := newRig(t, policy.Default())
	if err := unix.Shutdown(r.k.WorkerFd, unix.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	r.out.Enqueue(bridgetest.Frame(frame(100, 1)), bridgetest.Frame(frame(100, 2)))
	r.w.ToKernel()
	if got := r.w.Counters().Snapshot().Drops["tap_write_error"]; got != 2 {
		t.Fatalf("tap_write_error = %d, want 2", got)
	}
	r.out.Next()
	if r.out.Released != 2 {
		t.Errorf("released %d, want 2: failed writes must still free their mbufs", r.out.Released)
	}
}

func TestFromKernelQueuesFramesAndCountsDrops(t *testing.T) {
	r := newRig(t, policy.Default())
	write := func(b []byte) {
		if _, err := unix.Write(r.k.Peer, b); err != nil {
			t.Fatal(err)
		}
	}
	f1, f2 := frame(64, 1), frame(mtu+14, 2)
	write(f1)
	write(f2)
	r.w.FromKernel()
	got := r.in.Received()
	if len(got) != 2 || !bytes.Equal(got[0], f1) || !bytes.Equal(got[1], f2) {
		t.Fatalf("app got %d frames, want 2 byte for byte", len(got))
	}

	r.in.RingSpace = 1
	for i := range 3 {
		write(frame(100, byte(i)))
	}
	r.w.FromKernel()
	r.in.RingSpace, r.in.Mbufs = -1, 0
	write(frame(100, 9))
	r.w.FromKernel()
	s := r.w.Counters().Snapshot()
	if s.Drops["ring_full"] != 2 || s.Drops["no_mbuf"] != 1 || s.FromKernelPackets != 3 {
		t.Errorf("ring_full=%d no_mbuf=%d from_kernel=%d, want 2, 1, 3",
			s.Drops["ring_full"], s.Drops["no_mbuf"], s.FromKernelPackets)
	}
	// Bytes are counted after the app's drops: f1, f2 and the one frame
	// of 100 the ring took.
	if want := uint64(len(f1) + len(f2) + 100); s.FromKernelBytes != want {
		t.Errorf("from_kernel_bytes = %d, want %d", s.FromKernelBytes, want)
	}
}

// superKernel is a kernel side that reads one TCP super-frame and nothing
// else, as a TAP with TSO does for a bulk sender, and records the flags it
// is read with.
type superKernel struct {
	*bridgetest.Kernel
	super []byte
	left  int // super-frames still to read
	flags []bridge.ReadFlags
}

func (k *superKernel) Read(slots [][]byte, frames []bridge.Frame, flags bridge.ReadFlags, r *bridge.Result) int {
	k.flags = append(k.flags, flags)
	switch {
	case flags&bridge.ReadSplit != 0:
		r.Offload.SplitReads++
		r.Offload.SplitFrames += 2
		frames[0] = bridge.Frame{Len: copy(slots[0], k.super[:100])}
		frames[1] = bridge.Frame{Len: copy(slots[1], k.super[100:200])}
		return 2
	case k.left == 0:
		return 0
	}
	k.left--
	if flags&bridge.ReadTSO == 0 {
		frames[0] = bridge.Frame{Len: copy(slots[0], k.super[:100])}
		return 1
	}
	frames[0] = bridge.Frame{Super: k.super, TSO: bridge.TSOFrame{L2: 14, L3: 20, L4: 20, MSS: 100}}
	return 1
}

// superWorker is a worker over a superKernel that reads super left times,
// and the app side app makes.
func superWorker(t *testing.T, super []byte, left int, app func(*bridgetest.Out, *bridgetest.Waker) bridge.App) (*bridge.Worker, *superKernel) {
	t.Helper()
	fk, err := bridgetest.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fk.Close)
	k := &superKernel{Kernel: fk, super: super, left: left, flags: make([]bridge.ReadFlags, 0, 8)}
	out := bridgetest.NewOut(32, 4)
	w, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: policy.Default()}, app(out, &bridgetest.Waker{Out: out}), k)
	if err != nil {
		t.Fatal(err)
	}
	return w, k
}

// A poll that handed only a super-frame to a TSO app moved something: it is
// work for the ladder, counted by the worker; a super-frame the app refuses
// is split in the same poll.
func TestSuperFrameToATSOAppIsWork(t *testing.T) {
	in := bridgetest.NewIn(32, 2048)
	in.TSO = true
	w, k := superWorker(t, frame(3000, 5), 2, func(out *bridgetest.Out, wk *bridgetest.Waker) bridge.App {
		return bridgetest.App(out, in, wk)
	})
	if n := w.FromKernel(); n != 1 {
		t.Fatalf("FromKernel moved %d, want 1: the super-frame", n)
	}
	s := w.Counters().Snapshot()
	if len(in.Supers) != 1 || s.Offload.TSOToApp != 1 || s.FromKernelPackets != 1 || s.FromKernelBytes != 3000 {
		t.Errorf("%d super-frames, tso_to_app %d, from_kernel %d packets %d bytes, want 1, 1, 1, 3000",
			len(in.Supers), s.Offload.TSOToApp, s.FromKernelPackets, s.FromKernelBytes)
	}
	in.TSOMaxBytes = 1000 // the app's port cannot take it whole any more
	if n := w.FromKernel(); n != 2 {
		t.Fatalf("FromKernel moved %d after a refusal, want the 2 frames it was split into", n)
	}
	s = w.Counters().Snapshot()
	if len(in.Supers) != 1 || len(in.Received()) != 2 || s.Offload.SplitReads != 1 || s.Offload.TSOToApp != 1 {
		t.Errorf("after a refusal: %d super-frames, %d frames, split reads %d, tso_to_app %d, want 1, 2, 1, 1",
			len(in.Supers), len(in.Received()), s.Offload.SplitReads, s.Offload.TSOToApp)
	}
	want := []bridge.ReadFlags{bridge.ReadTSO, bridge.ReadTSO, bridge.ReadTSO | bridge.ReadSplit}
	if len(k.flags) != len(want) {
		t.Fatalf("reads with flags %v, want %v", k.flags, want)
	}
	for i := range want {
		if k.flags[i] != want[i] {
			t.Errorf("read %d with flags %v, want %v", i, k.flags[i], want[i])
		}
	}
}

// An app side that cuts super-frames itself (ring mode) gets every
// super-frame whole, counted as the kernel side counts a split: one split
// read, its segments as frames and as packets from the kernel with their
// bytes. When it cannot cut one (a segment larger than its buffers), the
// kernel side splits it into the slots in the same poll, as before.
func TestASuperFrameGoesToAnAppSideThatCutsItAndToTheKernelSideWhenItRefuses(t *testing.T) {
	// 54 bytes of headers and 250 of payload: segments of 100, 100, 50.
	in := &bridgetest.SplitIn{In: bridgetest.NewIn(32, 2048)}
	w, k := superWorker(t, frame(304, 5), 3, in.App)
	if n := w.FromKernel(); n != 3 {
		t.Fatalf("FromKernel moved %d, want the 3 segments the app side cut", n)
	}
	s := w.Counters().Snapshot()
	if len(in.Splits) != 1 || !bytes.Equal(in.Splits[0].Frame, k.super) || in.Splits[0].MSS != 100 {
		t.Fatalf("the app side cut %d super-frames, want 1 whole with mss 100", len(in.Splits))
	}
	if s.Offload.SplitReads != 1 || s.Offload.SplitFrames != 3 || s.Offload.TSOToApp != 0 ||
		s.FromKernelPackets != 3 || s.FromKernelBytes != 3*54+250 {
		t.Errorf("split reads %d, frames %d, tso_to_app %d, from_kernel %d packets %d bytes; want 1, 3, 0, 3, %d",
			s.Offload.SplitReads, s.Offload.SplitFrames, s.Offload.TSOToApp, s.FromKernelPackets, s.FromKernelBytes, 3*54+250)
	}

	// An app that takes TSO gets it whole; one whose port refuses it
	// whole has it cut by the app side all the same.
	in.TSO = true
	w.FromKernel()
	in.TSOMaxBytes = 100
	w.FromKernel()
	if len(in.Supers) != 1 || len(in.Splits) != 2 {
		t.Fatalf("%d super-frames whole, %d cut; want 1 and 2", len(in.Supers), len(in.Splits))
	}

	in.Refuse, k.left = true, 1
	if n := w.FromKernel(); n != 2 {
		t.Fatalf("FromKernel moved %d after the app side refused, want the 2 frames the kernel side split", n)
	}
	s = w.Counters().Snapshot()
	if len(in.Splits) != 2 || len(in.Received()) != 2 || s.Offload.SplitReads != 3 {
		t.Errorf("after a refusal: %d cut, %d frames, split reads %d; want 2, 2, 3",
			len(in.Splits), len(in.Received()), s.Offload.SplitReads)
	}
	want := []bridge.ReadFlags{bridge.ReadTSO, bridge.ReadTSO, bridge.ReadTSO, bridge.ReadTSO, bridge.ReadTSO | bridge.ReadSplit}
	if !slices.Equal(k.flags, want) {
		t.Errorf("reads with flags %v, want %v", k.flags, want)
	}
}

// Cutting a super-frame on the app's side allocates nothing in the worker.
func TestASuperFrameCutByTheAppSideDoesNotAllocate(t *testing.T) {
	in := &bridgetest.SplitIn{In: bridgetest.NewIn(32, 2048)}
	in.Discard = true
	w, k := superWorker(t, frame(304, 5), 0, in.App)
	allocs := testing.AllocsPerRun(1000, func() {
		k.left, k.flags = 1, k.flags[:0]
		w.FromKernel()
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per super-frame, want 0", allocs)
	}
	if got := w.Counters().Snapshot().Offload.SplitFrames; got != 3*1001 {
		t.Errorf("split frames %d, want %d", got, 3*1001)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	r := newRig(t, policy.Default())
	r.in.Discard = true
	single := bridgetest.Frame(frame(200, 1))
	chained := bridgetest.Packet{Segs: split(frame(600, 2), 200, 200)}
	f := frame(300, 3)
	buf := make([]byte, 2048)
	// One round: a burst each way through the worker, the fake kernel's
	// side read and written by the test with plain syscalls.
	round := func() {
		r.out.Enqueue(single, chained)
		r.w.ToKernel()
		for {
			if _, err := unix.Read(r.k.Peer, buf); err != nil {
				break
			}
		}
		_, _ = unix.Write(r.k.Peer, f)
		r.w.FromKernel()
	}
	round() // warm the fakes' capacity
	if allocs := testing.AllocsPerRun(1000, round); allocs != 0 {
		t.Errorf("%.2f allocations per round trip, want 0", allocs)
	}
	if s := r.w.Counters().Snapshot(); s.ToKernelPackets != 2*1002 || s.FromKernelPackets != 1002 || s.TotalDrops() != 0 {
		t.Errorf("counters after the rounds: %+v", s)
	}
}

// run starts the worker and returns a function that stops it and waits.
func run(t *testing.T, r *rig) func() {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.w.Run() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		r.w.Stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("worker did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestParkedWorkerWakesOnKick(t *testing.T) {
	p := policy.Default()
	p.Mode = policy.Interrupt
	p.ParkTimeout = time.Minute // only a kick can end this park
	r := newRig(t, p)
	if r.w.CanKick() {
		t.Fatal("CanKick before Run handed the app the eventfd")
	}
	run(t, r)
	<-r.w.Registered()
	if !r.w.CanKick() {
		t.Fatal("worker did not register its eventfd")
	}
	waitFor(t, "the worker to park", r.waker.Parked)
	r.out.Enqueue(bridgetest.Frame(frame(100, 1)))
	if !r.waker.Kick() {
		t.Fatal("kick refused")
	}
	waitFor(t, "the frame to reach the kernel", func() bool { return r.w.Counters().ToKernelPackets.Load() == 1 })
	s := r.w.Counters().Snapshot()
	if s.Wakeups == 0 || s.Timeouts != 0 {
		t.Errorf("wakeups=%d timeouts=%d: want a kick to have ended the park", s.Wakeups, s.Timeouts)
	}
}

func TestWorkerWithoutKicksBoundsItsParks(t *testing.T) {
	p := policy.Default()
	p.Mode = policy.Interrupt
	p.ParkTimeout = time.Minute
	p.Backoff = policy.Backoff{Min: 10 * time.Microsecond, Max: 100 * time.Microsecond}
	k, err := bridgetest.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	r := &rig{out: bridgetest.NewOut(32, 4), in: bridgetest.NewIn(32, 2048), k: k}
	r.waker = &bridgetest.Waker{Refuse: true, Out: r.out}
	r.w, err = bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: p}, bridgetest.App(r.out, r.in, r.waker), k)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	<-r.w.Registered()
	if r.w.CanKick() {
		t.Fatal("CanKick with an app that refused the eventfd")
	}
	r.out.Enqueue(bridgetest.Frame(frame(100, 1)))
	waitFor(t, "the frame without a kick", func() bool { return r.w.Counters().ToKernelPackets.Load() == 1 })
}

func TestWorkerWithoutKicksOrBackoffStillPolls(t *testing.T) {
	p := policy.Default()
	p.Backoff = policy.Backoff{} // spin, then park: but nobody kicks
	k, err := bridgetest.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	r := &rig{out: bridgetest.NewOut(32, 4), in: bridgetest.NewIn(32, 2048), k: k}
	r.waker = &bridgetest.Waker{Refuse: true, Out: r.out}
	if r.w, err = bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: p}, bridgetest.App(r.out, r.in, r.waker), k); err != nil {
		t.Fatal(err)
	}
	run(t, r)
	waitFor(t, "a few bounded parks", func() bool { return r.w.Counters().Timeouts.Load() > 3 })
	r.out.Enqueue(bridgetest.Frame(frame(100, 1)))
	waitFor(t, "the frame without a kick", func() bool { return r.w.Counters().ToKernelPackets.Load() == 1 })
}

// Fixed mode reproduces KNI: it sleeps after every poll and a kick does not
// cut the sleep short. Adaptive's backoff waits are kickable parks.
func TestFixedModeSleepsAndAdaptiveBackoffParks(t *testing.T) {
	for _, mode := range []policy.Mode{policy.Fixed, policy.Adaptive} {
		p := policy.Default()
		p.Mode = mode
		p.Interval = 200 * time.Microsecond
		p.Backoff = policy.Backoff{Min: 5 * time.Microsecond, Max: 50 * time.Microsecond}
		r := newRig(t, p)
		stop := run(t, r)
		waitFor(t, "some waits", func() bool { return r.w.Counters().Sleeps.Load() >= 3 })
		for i := 0; i < 20; i++ {
			r.out.Enqueue(bridgetest.Frame(frame(64, byte(i))))
			r.waker.Kick()
			time.Sleep(time.Millisecond)
		}
		waitFor(t, "the frames", func() bool { return r.w.Counters().ToKernelPackets.Load() == 20 })
		stop()
		s := r.w.Counters().Snapshot()
		switch mode {
		case policy.Fixed:
			if s.Parks != 0 || s.Wakeups != 0 {
				t.Errorf("fixed mode parked %d times (%d wakeups): its sleep must not be kickable", s.Parks, s.Wakeups)
			}
		case policy.Adaptive:
			if s.Parks == 0 {
				t.Errorf("adaptive backoff never parked: %+v", s)
			}
		}
	}
}

func TestKernelDataWakesParkedWorker(t *testing.T) {
	p := policy.Default()
	p.Mode = policy.Interrupt
	p.ParkTimeout = time.Minute
	r := newRig(t, p)
	run(t, r)
	waitFor(t, "the worker to park", r.waker.Parked)
	if _, err := unix.Write(r.k.Peer, frame(80, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the frame to reach the app", func() bool { return len(r.in.Received()) == 1 })
}

func TestSetPolicyUnderTrafficLosesNothing(t *testing.T) {
	r := newRig(t, policy.Default())
	stop := run(t, r)
	const total = 3000
	modes := []policy.Mode{policy.Busy, policy.Interrupt, policy.Adaptive, policy.Fixed, policy.Adaptive}
	sent := 0
	for i, m := range modes {
		p := policy.Default()
		p.Mode = m
		p.Interval = 50 * time.Microsecond
		if err := r.w.SetPolicy(p); err != nil {
			t.Fatal(err)
		}
		for ; sent < (i+1)*total/len(modes); sent++ {
			r.out.Enqueue(bridgetest.Frame(frame(64, byte(sent))))
			r.waker.Kick()
		}
	}
	got := 0
	buf := make([]byte, 2048)
	waitFor(t, "every frame", func() bool {
		for {
			if _, err := unix.Read(r.k.Peer, buf); err != nil {
				break
			}
			got++
		}
		return got == total
	})
	stop()
	if s := r.w.Counters().Snapshot(); s.TotalDrops() != 0 {
		t.Errorf("drops %v while switching policies", s.Drops)
	}
	if r.out.Released != total || !r.out.Closed || !r.in.Closed {
		t.Errorf("released %d of %d, closed out=%v in=%v", r.out.Released, total, r.out.Closed, r.in.Closed)
	}
}

func TestNewWorkerRejectsBadInput(t *testing.T) {
	k, err := bridgetest.NewKernel()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	out, in, wk := bridgetest.NewOut(8, 2), bridgetest.NewIn(8, 2048), &bridgetest.Waker{}
	p := policy.Default()
	p.Mode = "sleepy"
	if _, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: p}, bridgetest.App(out, in, wk), k); err == nil {
		t.Error("mode sleepy accepted")
	}
	if _, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: policy.Default()}, bridge.App{Out: out, In: in}, k); !errors.Is(err, bridge.ErrNoApp) {
		t.Errorf("an app side without a Waker: %v, want ErrNoApp", err)
	}
}

// policingOut is an app side whose policers free every frame while police
// is set: Next hands none of them over and Policed counts them.
type policingOut struct {
	*bridgetest.Out
	police atomic.Bool
	last   int
}

func (o *policingOut) Next() int {
	n := o.Out.Next()
	o.last = 0
	if o.police.Load() {
		o.last = n
		return 0
	}
	return n
}
func (o *policingOut) Policed() int                 { return o.last }
func (o *policingOut) SetCoPP(copp.Config) error    { return nil }
func (o *policingOut) CoPP(dst *copp.Snapshot) bool { return true }
func (o *policingOut) Pending() int                 { return o.Out.Pending() }

// A flood the policers free wakes an interrupt-mode worker once per
// policy.policed_sleep, unkicked, instead of a kicked park every few frames;
// frames it writes, or policed_sleep 0, leave the parks as they were, and
// once the flood ends the worker parks again.
func TestAWorkerWhoseFramesAreMostlyPolicedSleepsInsteadOfParking(t *testing.T) {
	for _, c := range []struct {
		name         string
		police       bool
		policedSleep time.Duration
		sleeps       bool
	}{
		{"policed", true, 200 * time.Microsecond, true},
		{"written", false, 200 * time.Microsecond, false},
		{"policed, policed_sleep 0", true, 0, false},
	} {
		p := policy.Default()
		p.Mode = policy.Interrupt
		p.ParkTimeout = time.Minute
		p.PolicedSleep = c.policedSleep
		k, err := bridgetest.NewKernel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Close)
		out := &policingOut{Out: bridgetest.NewOut(32, 4)}
		out.police.Store(c.police)
		r := &rig{out: out.Out, in: bridgetest.NewIn(32, 2048), k: k}
		r.waker = &bridgetest.Waker{Out: out.Out}
		app := bridgetest.App(r.out, r.in, r.waker)
		app.Out, app.Policer = out, out
		if r.w, err = bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: p}, app, k); err != nil {
			t.Fatal(err)
		}
		stop := run(t, r)
		waitFor(t, "the worker to park", r.waker.Parked)
		for i := range 50 {
			out.Enqueue(bridgetest.Frame(frame(64, byte(i))))
			r.waker.Kick()
			time.Sleep(50 * time.Microsecond)
		}
		waitFor(t, "the frames taken", func() bool { return out.Pending() == 0 })
		waitFor(t, "the worker to park again", r.waker.Parked)
		stop()
		s := r.w.Counters().Snapshot()
		if got := s.Sleeps > 0; got != c.sleeps {
			t.Errorf("%s: %d sleeps, %d parks, %d wakeups: want sleeps %v", c.name, s.Sleeps, s.Parks, s.Wakeups, c.sleeps)
		}
		if !c.police && s.ToKernelPackets != 50 {
			t.Errorf("%s: %d frames written, want 50", c.name, s.ToKernelPackets)
		}
	}
}

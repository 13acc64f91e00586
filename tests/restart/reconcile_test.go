package restart

// kbridge killed (SIGKILL) inside a ring operation, parked there by the
// test hook of a kbridge built with -tags kbridge_testhook (ring/testhook.go,
// ring/port_reconcile.c); the next kbridge, a product build, reconciles the rings
// on takeover. Every identifier here starts with rc.

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// rcRing is small, so that a first lap of traffic fills every slot.
const rcRing = 64

var rcParked = regexp.MustCompile(`test park: the worker parks [^(]*\((\d+) mbufs\)`)

// rcPark waits for the hook's line and returns how many mbufs the parked
// operation moves.
func rcPark(t *testing.T, b *dpdkbed.Bed) int {
	t.Helper()
	b.Kb.WaitLog("test park: the worker parks", 10*time.Second)
	m := rcParked.FindStringSubmatch(b.Out.String())
	if m == nil {
		t.Fatalf("no park line:\n%s", b.Out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// rcKill kills the parked kbridge and leaves the bed without one.
func rcKill(t *testing.T, b *dpdkbed.Bed) int {
	t.Helper()
	pid := b.Kb.Pid()
	b.Kb.Kill()
	b.Kb = nil
	if got := b.Port.OwnerPID(); got != pid {
		t.Fatalf("owner pid %d after the kill, want the dead kbridge's %d", got, pid)
	}
	return pid
}

// rcRecovery reads what the new kbridge says it put right.
func rcRecovery(t *testing.T, b *dpdkbed.Bed) daemon.Recovery {
	t.Helper()
	st, err := daemon.ReadStatus(b.Sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Recovery == nil {
		t.Fatalf("kbridge stats has no recovery: %+v", st)
	}
	return *st.Recovery
}

// rcSeq is a test frame's sequence number, -1 for anything else.
func rcSeq(f []byte) int {
	if len(f) < 18 || binary.BigEndian.Uint16(f[12:14]) != dpdkbed.EthType {
		return -1
	}
	return int(binary.BigEndian.Uint32(f[14:18]))
}

// rcCollect is the app taking what the kernel sent, until want frames
// arrived or timeout passed, then for a moment longer (a stale slot would
// come with the next enqueue). It fails t for any frame that is not one of
// those the kernel sent since, in order: a stale slot hands the app an mbuf
// of an earlier lap, which it owns or freed.
func rcCollect(t *testing.T, b *dpdkbed.Bed, seq0, want int, timeout time.Duration) {
	t.Helper()
	var got []int
	deadline := time.Now().Add(timeout)
	take := func() {
		for _, f := range dpdkbed.OnlyTest(b.Port.Collect(0, 64)) {
			got = append(got, rcSeq(f))
		}
	}
	for len(got) < want && time.Now().Before(deadline) {
		take()
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	take()
	if len(got) != want {
		t.Fatalf("the app dequeued %d frames, want the %d the kernel sent (seq %d..): %v", len(got), want, seq0, got)
	}
	for i, s := range got {
		if s != seq0+i {
			t.Fatalf("frame %d the app dequeued has seq %d, want %d: a stale or foreign mbuf (all: %v)", i, s, seq0+i, got)
		}
	}
}

// rcSendCollect sends n frames from the kernel's side in chunks the fresh
// ring always has mbufs for, the app taking each chunk before the next:
// the app tops its fresh ring (of rcRing-1 mbufs) up only once it fell under
// half, so a single send of more than rcRing/2 frames could find fewer
// mbufs than frames and count the rest no_mbuf (seen: 39 of 40, in the
// 24.11 root) - a property of the tiny test ring, not of the recovery.
func rcSendCollect(t *testing.T, b *dpdkbed.Bed, ps *dpdkbed.PacketSocket, seq0, n int) {
	t.Helper()
	const chunk = 16 // < (rcRing-1)/2
	for off := 0; off < n; off += chunk {
		k := min(chunk, n-off)
		ps.Send(t, rcFrames(seq0+off, k))
		rcCollect(t, b, seq0+off, k, 5*time.Second)
	}
}

// rcFrames are n test frames with sequence numbers from seq0.
func rcFrames(seq0, n int) [][]byte {
	var fs [][]byte
	for i := 0; i < n; i++ {
		fs = append(fs, dpdkbed.TestFrame(100, uint32(seq0+i)))
	}
	return fs
}

// kbridge killed between from_kernel's prod.head move and its copy, with
// every slot holding a pointer of the previous lap (mbufs the app took and
// freed): the next kbridge puts prod.head back on prod.tail and frees the
// mbufs the dead one had allocated and not published; the app then
// dequeues only the frames the kernel sends, the pool comes back whole.
// Without the reconciliation the next enqueue publishes the stale slots.
func TestKillInsideFromKernelEnqueue(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{RingSize: rcRing, NoStart: true})
	hook := hookBin(t)

	// Lap 1, a product kbridge: every slot of from_kernel gets a pointer
	// to an mbuf the app then frees.
	b.Start()
	ps := b.PacketSocket()
	seq := 0
	for seq < rcRing+16 {
		ps.Send(t, rcFrames(seq, 16))
		rcCollect(t, b, seq, 16, 5*time.Second)
		seq += 16
	}
	b.Stop(true)
	before := b.Port.RingState(0, false)

	b.StartBin(hook, "KBRIDGE_TEST_PARK=from_kernel")
	ps = b.PacketSocket()
	ps.Send(t, rcFrames(1000, 3))
	n := rcPark(t, b)
	st := b.Port.RingState(0, false)
	if n < 1 || st.ProdHead-st.ProdTail != uint32(n) || st.ProdTail != before.ProdTail {
		t.Fatalf("parked with %d mbufs: ring %+v (before %+v), want prod.head %d past an unmoved prod.tail", n, st, before, n)
	}
	if u, r := b.Pool.InUse(), b.Port.InRings(0); u != n || r != 0 {
		t.Fatalf("parked: %d mbufs in use, %d in the rings; want the %d the worker allocated and none queued", u, r, n)
	}
	pid := rcKill(t, b)

	b.Start()
	rec := rcRecovery(t, b)
	t.Logf("after the kill inside from_kernel's enqueue of %d: %+v", n, rec)
	if rec.TakenOverFrom != pid || rec.Rings.FromKernelDiscarded != n || rec.Rings.FromKernelFreed != n ||
		rec.Rings.FromKernelPublished != 0 || rec.HeldFromKernel != 0 || rec.Rings.ToKernelReclaimed != 0 || rec.Rings.Inconsistent != 0 {
		t.Errorf("recovery %+v, want taken over from %d, %d slots discarded and %d mbufs freed", rec, pid, n, n)
	}
	if st := b.Port.RingState(0, false); st.ProdHead != st.ProdTail || st.ProdTail != before.ProdTail {
		t.Errorf("from_kernel after the takeover: %+v, want prod.head back on prod.tail %d", st, before.ProdTail)
	}

	// The app gets what the kernel sends now, and nothing else.
	ps = b.PacketSocket()
	ps.Send(t, rcFrames(2000, 5))
	rcCollect(t, b, 2000, 5, 5*time.Second)
	rcSendCollect(t, b, ps, 3000, 40)
	if u := b.Pool.InUse(); u != 0 {
		t.Errorf("%d mbufs in use once the app took every frame, want 0", u)
	}
	b.Pool.Audit()
}

// kbridge killed between to_kernel's cons.head move and its cons.tail, the
// burst copied out: the next kbridge puts cons.head back on cons.tail and
// dequeues those entries again, so the frames reach the kernel once and
// the pool is whole. Without the reconciliation they leak.
func TestKillInsideToKernelDequeue(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{RingSize: rcRing, NoStart: true})
	hook := hookBin(t)

	// Lap 1: every slot of to_kernel used once.
	b.Start()
	ps := b.PacketSocket()
	for seq := 0; seq < rcRing+16; seq += 16 {
		if q, err := b.Port.Inject(0, rcFrames(seq, 16), ringtest.InjectOpts{}); err != nil || q != 16 {
			t.Fatalf("inject: queued %d: %v", q, err)
		}
		if got := ps.Receive(16, 5*time.Second); len(got) != 16 {
			t.Fatalf("lap 1: %d of 16 frames reached the kernel", len(got))
		}
	}
	b.Stop(true)

	b.StartBin(hook, "KBRIDGE_TEST_PARK=to_kernel")
	const sent = 8
	if q, err := b.Port.Inject(0, rcFrames(1000, sent), ringtest.InjectOpts{}); err != nil || q != sent {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	n := rcPark(t, b)
	st := b.Port.RingState(0, true)
	if n != sent || st.ConsHead-st.ConsTail != sent || st.ProdTail-st.ConsTail != sent {
		t.Fatalf("parked with %d mbufs: ring %+v, want cons.head %d past cons.tail and the %d entries still before prod.tail",
			n, st, sent, sent)
	}
	pid := rcKill(t, b)
	if u := b.Pool.InUse(); u != sent {
		t.Fatalf("%d mbufs in use after the kill, want the %d the dead worker claimed", u, sent)
	}

	// The frames the dead worker claimed reach the kernel as soon as the
	// new TAP exists: listen on every interface of the namespace first.
	all := rcAnySocket(t)
	b.Start()
	got := all.Receive(sent, 5*time.Second)
	rec := rcRecovery(t, b)
	t.Logf("after the kill inside to_kernel's dequeue of %d: %+v", n, rec)
	if rec.TakenOverFrom != pid || rec.Rings.ToKernelReclaimed != sent || rec.Rings.ToKernelFreed != 0 ||
		rec.HeldToKernel != 0 || rec.Rings.FromKernelDiscarded != 0 || rec.Rings.Inconsistent != 0 {
		t.Errorf("recovery %+v, want taken over from %d and %d entries reclaimed", rec, pid, sent)
	}
	if len(got) != sent {
		t.Fatalf("%d of the %d claimed frames reached the kernel after the takeover", len(got), sent)
	}
	for i, f := range got {
		if s := rcSeq(f); s != 1000+i {
			t.Fatalf("claimed frame %d reached the kernel with seq %d, want %d", i, s, 1000+i)
		}
	}
	harness.WaitUntil(t, "the pool to be whole", 5*time.Second, func() bool { return b.Pool.InUse() == b.Port.InRings(0) })
	if st := b.Port.RingState(0, true); st.ConsHead != st.ConsTail || st.ConsTail != st.ProdTail {
		t.Errorf("to_kernel after the takeover: %+v, want it empty", st)
	}

	// Traffic flows, each frame once.
	if q, err := b.Port.Inject(0, rcFrames(2000, 40), ringtest.InjectOpts{}); err != nil || q != 40 {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	got = all.Receive(41, 2*time.Second)
	if len(got) != 40 {
		t.Fatalf("%d frames reached the kernel, want 40", len(got))
	}
	for i, f := range got {
		if s := rcSeq(f); s != 2000+i {
			t.Fatalf("frame %d reached the kernel with seq %d, want %d", i, s, 2000+i)
		}
	}
	if u := b.Pool.InUse(); u != 0 {
		t.Errorf("%d mbufs in use once every frame was written, want 0", u)
	}
	b.Pool.Audit()
}

// rcAnySocket is an AF_PACKET socket of the test ethertype on every
// interface of the namespace, interfaces made after it included.
func rcAnySocket(t *testing.T) *dpdkbed.PacketSocket {
	t.Helper()
	var fd int
	err := harness.InNS(env.NS, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(dpdkbed.Htons(dpdkbed.EthType)))
		if err != nil {
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		return nil
	})
	if err != nil {
		t.Fatal(fmt.Errorf("packet socket: %w", err))
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &dpdkbed.PacketSocket{Fd: fd}
}

// kbridge killed between the fresh ring's cons.head move and its cons.tail
// (kbridge.h version 7: it takes the app's mbufs off the fresh ring for
// the kernel's frames): the next kbridge puts cons.head back on cons.tail,
// so those mbufs are taken again, by it, and none is lost or handed out
// twice; the app then gets what the kernel sends, the pool is whole.
func TestKillInsideFreshTake(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{RingSize: rcRing, NoStart: true})
	hook := hookBin(t)
	b.StartBin(hook, "KBRIDGE_TEST_PARK=fresh")
	before := b.Port.RingStateOf(0, ringtest.Fresh)
	ps := b.PacketSocket()
	ps.Send(t, rcFrames(1000, 3))
	n := rcPark(t, b)
	st := b.Port.RingStateOf(0, ringtest.Fresh)
	if n < 1 || st.ConsHead-st.ConsTail != uint32(n) || st.ConsTail != before.ConsTail {
		t.Fatalf("parked with %d mbufs: fresh ring %+v (before %+v), want cons.head %d past an unmoved cons.tail", n, st, before, n)
	}
	pid := rcKill(t, b)
	if u := b.Pool.InUse(); u != 0 {
		t.Fatalf("%d mbufs in use after the kill, want none: the claimed ones are still the fresh ring's", u)
	}

	b.Start()
	rec := rcRecovery(t, b)
	t.Logf("after the kill inside the fresh ring's take of %d: %+v", n, rec)
	if rec.TakenOverFrom != pid || rec.Rings.FreshReclaimed != n || rec.Rings.FreshFreed != 0 ||
		rec.HeldFromKernel != 0 || rec.Rings.Inconsistent != 0 {
		t.Errorf("recovery %+v, want taken over from %d and %d fresh entries taken again", rec, pid, n)
	}
	if st := b.Port.RingStateOf(0, ringtest.Fresh); st.ConsHead != st.ConsTail {
		t.Errorf("fresh ring after the takeover: %+v, want cons.head back on cons.tail", st)
	}
	ps = b.PacketSocket()
	rcSendCollect(t, b, ps, 2000, 40)
	if u := b.Pool.InUse(); u != 0 {
		t.Errorf("%d mbufs in use once the app took every frame, want 0", u)
	}
	b.Pool.Audit()
}

// kbridge killed between the spent ring's prod.head move and its copy
// (kbridge.h version 7: it puts every mbuf it is done with on the spent
// ring, for the app to free), the burst written to the kernel: the next
// kbridge puts prod.head back on prod.tail and puts the burst there again,
// so the app frees each mbuf once; without it the next put would publish
// the reserved slots' stale pointers, which the app would free.
func TestKillInsideSpentPut(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{RingSize: rcRing, NoStart: true})
	hook := hookBin(t)

	// Lap 1, a product kbridge: slots of the spent ring get pointers to
	// mbufs the app then frees.
	b.Start()
	all := rcAnySocket(t)
	for seq := 0; seq < 256; seq += 32 {
		if q, err := b.Port.Inject(0, rcFrames(seq, 32), ringtest.InjectOpts{}); err != nil || q != 32 {
			t.Fatalf("inject: queued %d: %v", q, err)
		}
		if got := all.Receive(32, 5*time.Second); len(got) != 32 {
			t.Fatalf("lap 1: %d of 32 frames reached the kernel", len(got))
		}
	}
	b.Stop(true)
	b.Port.Reap(0)
	before := b.Port.RingStateOf(0, ringtest.Spent)

	b.StartBin(hook, "KBRIDGE_TEST_PARK=spent")
	const sent = 8
	if q, err := b.Port.Inject(0, rcFrames(1000, sent), ringtest.InjectOpts{}); err != nil || q != sent {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	if got := all.Receive(sent, 5*time.Second); len(got) != sent {
		t.Fatalf("%d of %d frames reached the kernel before the park", len(got), sent)
	}
	n := rcPark(t, b)
	st := b.Port.RingStateOf(0, ringtest.Spent)
	if n != sent || st.ProdHead-st.ProdTail != sent || st.ProdTail != before.ProdTail {
		t.Fatalf("parked with %d mbufs: spent ring %+v (before %+v), want prod.head %d past an unmoved prod.tail", n, st, before, sent)
	}
	pid := rcKill(t, b)
	if u := b.Pool.InUse(); u != sent {
		t.Fatalf("%d mbufs in use after the kill, want the %d the dead worker was putting", u, sent)
	}

	b.Start()
	rec := rcRecovery(t, b)
	t.Logf("after the kill inside the spent ring's put of %d: %+v", n, rec)
	if rec.TakenOverFrom != pid || rec.Rings.SpentDiscarded != sent || rec.Rings.SpentFreed != sent ||
		rec.Rings.SpentPublished != 0 || rec.HeldToKernel != 0 || rec.Rings.Inconsistent != 0 {
		t.Errorf("recovery %+v, want taken over from %d, %d slots discarded and %d mbufs put again", rec, pid, sent, sent)
	}
	if st := b.Port.RingStateOf(0, ringtest.Spent); st.ProdHead != st.ProdTail || st.ProdTail != before.ProdTail+sent {
		t.Errorf("spent ring after the takeover: %+v, want prod.head on prod.tail, %d past %d", st, sent, before.ProdTail)
	}
	if freed := b.Port.Reap(0); freed != sent {
		t.Errorf("the app freed %d off the spent ring, want the %d the dead worker was putting", freed, sent)
	}

	// Traffic flows, each frame once, and the app frees each mbuf once.
	if q, err := b.Port.Inject(0, rcFrames(2000, 40), ringtest.InjectOpts{}); err != nil || q != 40 {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	got := all.Receive(41, 2*time.Second)
	if len(got) != 40 {
		t.Fatalf("%d frames reached the kernel, want 40", len(got))
	}
	harness.WaitUntil(t, "the pool to be whole", 5*time.Second, func() bool { b.Port.Reap(0); return b.Pool.InUse() == 0 })
	b.Pool.Audit()
}

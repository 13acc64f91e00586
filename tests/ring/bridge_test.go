package ring

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
)

// Frames from the app arrive whole and byte for byte, single-segment and
// chained (written with writev).
func TestAppToKernelByteExact(t *testing.T) {
	b := newBed(t, bedOpts{})
	ps := b.PacketSocket()
	var frames [][]byte
	for i, n := range []int{60, 64, 128, 1000, 1514} {
		frames = append(frames, testFrame(n, uint32(i)))
	}
	for _, seg := range []int{0, 256, 100} {
		t.Run(fmt.Sprintf("segments of %d bytes", seg), func(t *testing.T) {
			q, err := b.Port.Inject(0, frames, ringtestOpts(seg, 0))
			if err != nil || q != len(frames) {
				t.Fatalf("queued %d of %d: %v", q, len(frames), err)
			}
			got := onlyTest(ps.Receive(len(frames), 5*time.Second))
			if len(got) != len(frames) {
				t.Fatalf("segment size %d: kernel got %d frames, want %d", seg, len(got), len(frames))
			}
			for i := range frames {
				if !bytes.Equal(got[i], frames[i]) {
					t.Errorf("segment size %d: frame %d (%d bytes) differs from what the app sent", seg, i, len(frames[i]))
				}
			}
		})
	}
	if d := b.Status().TotalDrops(); d != 0 {
		t.Errorf("drops: %v", b.Status().Drops)
	}
}

// Frames the kernel sends arrive in the app's ring byte for byte.
func TestKernelToAppByteExact(t *testing.T) {
	b := newBed(t, bedOpts{})
	ps := b.PacketSocket()
	var frames [][]byte
	for i, n := range []int{60, 300, 1514} {
		frames = append(frames, testFrame(n, uint32(100+i)))
	}
	ps.Send(t, frames)
	var got [][]byte
	waitUntil(t, "the frames in the app's ring", func() bool {
		got = append(got, onlyTest(b.Port.Collect(0, 64))...)
		return len(got) >= len(frames)
	})
	for i := range frames {
		if !bytes.Equal(got[i], frames[i]) {
			t.Errorf("frame %d differs", i)
		}
	}
}

// Bad packets from the app are dropped and counted, never truncated, and the
// worker goes on with the good ones.
func TestBadPacketsFromAppAreCountedAndFreed(t *testing.T) {
	b := newBed(t, bedOpts{yaml: "workers:\n  max_segments: 8\n"})
	ps := b.PacketSocket()
	good := testFrame(200, 1)
	cases := []struct {
		name   string
		frame  []byte
		seg    int
		delta  int
		reason string
	}{
		{"oversize", testFrame(1515, 2), 0, 0, "oversize"},
		{"oversize chained", testFrame(1600, 3), 512, 0, "oversize"},
		{"runt", testFrame(10, 4), 0, 0, "runt"},
		{"too many segments", testFrame(1000, 5), 100, 0, "too_many_segments"},
		{"length disagrees with chain", testFrame(300, 6), 100, 7, "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.Status().Drops[c.reason]
			if _, err := b.Port.Inject(0, [][]byte{c.frame}, ringtestOpts(c.seg, c.delta)); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Port.Inject(0, [][]byte{good}, ringtestOpts(0, 0)); err != nil {
				t.Fatal(err)
			}
			got := onlyTest(ps.Receive(1, 5*time.Second))
			if len(got) != 1 || !bytes.Equal(got[0], good) {
				t.Fatalf("got %d frames; want only the good frame after the bad one", len(got))
			}
			if more := onlyTest(ps.Receive(1, 200*time.Millisecond)); len(more) != 0 {
				t.Fatalf("the bad frame (%d bytes) reached the kernel", len(more[0]))
			}
			if after := b.Status().Drops[c.reason]; after != before+1 {
				t.Errorf("drops[%s] went from %d to %d, want +1", c.reason, before, after)
			}
		})
	}
}

// A TAP write error (interface down) is counted; the mbuf is still freed and
// the worker keeps going.
func TestTAPWriteErrorIsCounted(t *testing.T) {
	b := newBed(t, bedOpts{})
	b.SetUp(false)
	frames := [][]byte{testFrame(100, 1), testFrame(100, 2), testFrame(100, 3)}
	if _, err := b.Port.Inject(0, frames, ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "3 TAP write errors", func() bool { return b.Status().Drops["tap_write_error"] == 3 })
	b.SetUp(true)
	ps := b.PacketSocket()
	if _, err := b.Port.Inject(0, frames[:1], ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	if got := onlyTest(ps.Receive(1, 5*time.Second)); len(got) != 1 {
		t.Fatal("the worker stopped delivering after write errors")
	}
	waitUntil(t, "the pool to drain", func() bool { return b.Pool.InUse() == 0 })
}

// A 64-slot ring holds 63 frames; the last eighth of them is the control
// plane's reserve (KBRIDGE_RESERVE), which the tests' default frames never take.
const smallRingRoom = 63 - 63/8

// When the app does not dequeue, frames from the kernel that do not fit in
// the ring (above the control plane's reserve) are dropped, counted and freed.
func TestFromKernelRingFull(t *testing.T) {
	b := newBed(t, bedOpts{ringSize: 64})
	ps := b.PacketSocket()
	const sent = 200
	var frames [][]byte
	for i := range sent {
		frames = append(frames, testFrame(100, uint32(i)))
	}
	ps.Send(t, frames)
	waitUntil(t, "every frame accounted for", func() bool {
		q := b.Status()
		return q.FromKernelPackets+q.Drops["ring_full"] >= sent
	})
	q := b.Status()
	if q.FromKernelPackets != smallRingRoom || q.Drops["ring_full"] < sent-smallRingRoom {
		t.Errorf("from_kernel=%d ring_full=%d: want the ring's %d slots above the reserve filled and the rest dropped",
			q.FromKernelPackets, q.Drops["ring_full"], smallRingRoom)
	}
	if got := onlyTest(b.Port.Collect(0, 128)); len(got) != smallRingRoom {
		t.Errorf("app collected %d test frames, want %d", len(got), smallRingRoom)
	}
	waitUntil(t, "the pool to drain", func() bool { return b.Pool.InUse() == 0 })
}

// When the app's mempool is empty its fresh ring runs dry (kbridge.h
// version 7: kbridge takes the app's mbufs off it, the app's
// kbridge_from_kernel() tops it up from the pool): frames from the kernel
// are dropped and counted as no_mbuf, the refills the pool cannot serve as
// fresh_short. Once the pool has mbufs again the app's next call refills
// the ring and frames flow.
func TestMempoolEmpty(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true})
	held, release := b.Pool.Hold()
	fresh, releaseFresh := b.Port.HoldFresh(0)
	if held == 0 || fresh == 0 {
		t.Fatalf("took %d of the pool's mbufs and %d of the fresh ring's", held, fresh)
	}
	b.Start()
	ps := b.PacketSocket()
	ps.Send(t, [][]byte{testFrame(100, 1), testFrame(100, 2)})
	waitUntil(t, "2 no_mbuf drops", func() bool { return b.Status().Drops["no_mbuf"] >= 2 })
	b.Port.Drain(0)
	if c := b.Port.MbufCounters(0); c.FreshShort == 0 {
		t.Errorf("the app's refill from an empty pool was not counted: %+v", c)
	}
	release()
	releaseFresh()
	b.Port.Drain(0) // the app's call refills the ring
	if c := b.Port.MbufCounters(0); b.Port.RingCount(0, ringtest.Fresh) != c.FreshTarget {
		t.Errorf("the fresh ring holds %d after the refill, want the target %d", b.Port.RingCount(0, ringtest.Fresh), c.FreshTarget)
	}
	ps.Send(t, [][]byte{testFrame(100, 3)})
	waitUntil(t, "a frame once mbufs are back", func() bool { return len(onlyTest(b.Port.Collect(0, 16))) == 1 })
}

// An app that stops freeing what kbridge is done with (kbridge.h version
// 7: it frees the spent ring in its burst calls) leaves kbridge a spent
// ring without room: the worker keeps the burst it wrote, counts the wait
// and takes nothing more, until the app frees the ring again. Nothing is
// freed by kbridge, nothing is lost, every frame reaches the kernel once.
func TestSpentRingFullKeepsTheBurst(t *testing.T) {
	// Rings of 64: a spent ring of 4096 slots, which the pool can fill.
	b := newBed(t, bedOpts{noStart: true, ringSize: 64, poolSize: 8191})
	filled := b.Port.FillSpent(0, 8)
	if b.Port.RingCount(0, ringtest.Spent) < 4000 {
		t.Fatalf("filled the spent ring with %d mbufs only", filled)
	}
	b.Start()
	ps := b.PacketSocket()
	inject := func(seq0, n int) {
		var frames [][]byte
		for i := range n {
			frames = append(frames, testFrame(100, uint32(seq0+i)))
		}
		if q, err := b.Port.Inject(0, frames, ringtest.InjectOpts{Raw: true}); err != nil || q != n {
			t.Fatalf("inject: queued %d of %d: %v", q, n, err)
		}
	}
	inject(0, 32)
	if got := onlyTest(ps.Receive(32, 5*time.Second)); len(got) != 32 {
		t.Fatalf("%d of 32 frames reached the kernel before the spent ring filled", len(got))
	}
	waitUntil(t, "the worker to wait for the spent ring", func() bool { return b.Port.MbufCounters(0).SpentWaits > 0 })
	inject(32, 16)
	time.Sleep(200 * time.Millisecond)
	if n := b.Port.RingCount(0, ringtest.ToKernel); n != 16 {
		t.Errorf("%d frames taken off to_kernel while the worker held a burst for the spent ring, want none (16 waiting)", 16-n)
	}
	if n := b.Pool.InUse(); n != 32+16 {
		t.Errorf("%d mbufs in use, want the 32 the worker keeps and the 16 waiting", n)
	}
	freed := b.Port.Reap(0)
	if freed < filled {
		t.Errorf("the app freed %d off the spent ring, want at least the %d put there", freed, filled)
	}
	got := onlyTest(ps.Receive(16, 5*time.Second))
	if len(got) != 16 {
		t.Fatalf("%d of the 16 frames reached the kernel once the app freed the spent ring", len(got))
	}
	for i, f := range got {
		if s := binary.BigEndian.Uint32(f[14:18]); s != uint32(32+i) {
			t.Errorf("frame %d after the wait has seq %d, want %d", i, s, 32+i)
		}
	}
	waitUntil(t, "the pool to be whole", func() bool { b.Port.Reap(0); return b.Pool.InUse() == 0 })
	if c := b.Port.MbufCounters(0); c.SpentWaits == 0 || b.Status().Drops["no_mbuf"] != 0 {
		t.Errorf("counters %+v, drops %v", c, b.Status().Drops)
	}
}

// The app's side drops and frees what does not fit in the to_kernel ring
// above the control plane's reserve.
func TestToKernelRingFullFreesInTheApp(t *testing.T) {
	b := newBed(t, bedOpts{ringSize: 64, noStart: true})
	var frames [][]byte
	for i := range 100 {
		frames = append(frames, testFrame(100, uint32(i)))
	}
	q, err := b.Port.Inject(0, frames, ringtestOpts(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	c := b.Port.Counters(0)
	if q != smallRingRoom || c.ToKernel != smallRingRoom || c.ToKernelDropped != 100-smallRingRoom {
		t.Errorf("queued %d, counters %+v: want %d queued and %d dropped", q, c, smallRingRoom, 100-smallRingRoom)
	}
	if n := b.Pool.InUse(); n != smallRingRoom {
		t.Errorf("%d mbufs in use, want the %d in the ring", n, smallRingRoom)
	}
}

// A parked worker wakes on the app's first packet through the eventfd kick.
func TestParkedWorkerWakesOnKick(t *testing.T) {
	b := newBed(t, bedOpts{yaml: "policy:\n  mode: interrupt\n  park_timeout: 1m\n"})
	ps := b.PacketSocket()
	waitUntil(t, "the worker to take the app's eventfd", func() bool { return b.Port.Counters(0).HaveEventfd })
	waitUntil(t, "the worker to park", func() bool { return b.Status().Parks > 0 })
	if _, err := b.Port.Inject(0, [][]byte{testFrame(100, 1)}, ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	if got := onlyTest(ps.Receive(1, 10*time.Second)); len(got) != 1 {
		t.Fatal("the parked worker did not deliver the frame")
	}
	if c := b.Port.Counters(0); c.Kicks == 0 {
		t.Errorf("the app never kicked: %+v", c)
	}
	if q := b.Status(); q.Timeouts != 0 || q.Wakeups == 0 {
		t.Errorf("parks ended by timeout=%d wakeup=%d: want a wakeup, the park timeout is a minute", q.Timeouts, q.Wakeups)
	}
}

// SIGTERM stops kbridge with exit 0, removes the TAP and frees every mbuf,
// also those still in flight; the bed's cleanup checks all three.
func TestStopUnderTrafficFreesEverything(t *testing.T) {
	b := newBed(t, bedOpts{poolSize: 16383})
	var frames [][]byte
	for i := range 256 {
		frames = append(frames, testFrame(1000, uint32(i)))
	}
	for range 8 {
		if _, err := b.Port.Inject(0, frames, ringtestOpts(256, 0)); err != nil {
			t.Fatal(err)
		}
	}
	b.Stop(true)
	if !strings.Contains(b.Out.String(), "stopped") {
		t.Errorf("no stop line in the log:\n%s", b.Out)
	}
}

func TestClearErrorsAtStartUp(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	for _, c := range []struct{ name, yaml, want string }{
		{"no primary", "dpdk:\n  file_prefix: kbit-nobody\n  wait: 0s\n", "start the DPDK application first"},
		{"no port", "dpdk:\n  file_prefix: " + env.Prefix + "\n  wait: 1s\nport: kbitnope\nstats:\n  socket: " + dir + "/s\n", `kbridge_port_create("kbitnope"`},
		{"bad value", "interface:\n  mtu: 20\n", "interface.mtu: 20"},
	} {
		cfg := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(cfg, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("ip", "netns", "exec", env.NS, env.Bin, "run", "--config", cfg).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: err=%v, output %q, want it to say %q", c.name, err, out, c.want)
		}
	}
}

// A kbridge started before the app has created its port (a service started
// right after the app's) waits for it, then bridges.
func TestWaitsForTheAppsPort(t *testing.T) {
	needRoot(t)
	b := newBed(t, bedOpts{noStart: true, yaml: "dpdk:\n  file_prefix: " + env.Prefix + "\n  wait: 20s\n"})
	// Start kbridge on a port name the app creates only later.
	late := b.Name + "l"
	cfg, err := os.ReadFile(b.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(cfg), "port: "+b.Name+"\n", "port: "+late+"\n", 1)
	text = strings.Replace(text, "dpdk:\n  file_prefix: "+env.Prefix+"\nport", "port", 1) // the appended dpdk block wins
	if err := os.WriteFile(b.Cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Kb = env.StartKbridge(t, b.Cfg)
	b.Out = b.Kb.Log
	t.Cleanup(func() { b.Stop(true) })
	waitUntil(t, "kbridge to say what it waits for", func() bool { return strings.Contains(b.Out.String(), "waiting for kbridge port") })
	port, err := ringtest.NewPort(late, 1, 1024, b.Pool)
	if err != nil {
		t.Fatal(err)
	}
	// kbridge first: kbridge_port_free() under a running kbridge ends it.
	t.Cleanup(func() {
		b.Stop(true)
		if err := port.Free(); err != nil {
			t.Error(err)
		}
	})
	waitUntil(t, "kbridge to attach", func() bool { _, err := daemon.ReadStatus(b.Sock); return err == nil })
	ps := b.PacketSocket()
	if _, err := port.Inject(0, [][]byte{testFrame(100, 1)}, ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	if got := onlyTest(ps.Receive(1, 5*time.Second)); len(got) != 1 {
		t.Fatal("no frame through the late port")
	}
}

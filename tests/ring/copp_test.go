package ring

import (
	"bytes"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/copp/copptest"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tap/vnet"
	"golang.org/x/sys/unix"
)

// coppWorker is realWorker (no merging) with c in force from its first
// burst.
func coppWorker(t *testing.T, b *bed, c copp.Config) (w *bridge.Worker, peer int) {
	t.Helper()
	w, peer = realWorker(t, b, false)
	if err := w.SetCoPP(c); err != nil {
		t.Fatal(err)
	}
	return w, peer
}

// floodThrough injects n copies of flood with the among frames after every
// n/each of them, has w move them all and returns how many frames the
// kernel side got.
func floodThrough(t *testing.T, b *bed, w *bridge.Worker, peer int, flood []byte, n, each int, among ...[]byte) int {
	t.Helper()
	var frames [][]byte
	for i := range n {
		frames = append(frames, flood)
		if i%(n/each) == 0 {
			frames = append(frames, among...)
		}
	}
	for rest := frames; len(rest) > 0; { // ringtest injects up to 512 at a time
		chunk := rest[:min(256, len(rest))]
		if k, err := b.Port.Inject(0, chunk, ringtestOpts(0, 0)); err != nil || k != len(chunk) {
			t.Fatalf("injected %d of %d: %v", k, len(chunk), err)
		}
		rest = rest[len(chunk):]
	}
	moved := 0
	for {
		k := w.ToKernel()
		if k == 0 {
			break
		}
		moved += k
	}
	if moved != len(frames) {
		t.Errorf("ToKernel reported %d frames of work, want %d (the policed ones too)", moved, len(frames))
	}
	return drain(peer, make([]byte, 1<<16))
}

// A flood of default frames beyond the default policer's burst is freed in
// the burst core, while ARP and BGP frames among it all reach the kernel:
// the policers run before any TAP write, per class.
func TestAFloodIsPolicedWhileControlFramesAllPass(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 1024})
	c := copp.DefaultConfig()
	c.Enabled = true
	c.Default = copp.Rate{PPS: 1, Burst: 50}
	w, peer := coppWorker(t, b, c)
	base := b.Pool.InUse()

	const flood, each = 600, 20
	got := floodThrough(t, b, w, peer, copptest.UDP(), flood, each, copptest.ARP(), copptest.BGP())
	var s copp.Snapshot
	if !w.CoPP(&s) {
		t.Fatal("no CoPP counters")
	}
	if s.Passed[copp.BGP] != each || s.Passed[copp.Neighbor] != each || s.Policed[copp.BGP]+s.Policed[copp.Neighbor] != 0 {
		t.Errorf("bgp passed %d, neighbor passed %d, %d policed; want %d each and none policed",
			s.Passed[copp.BGP], s.Passed[copp.Neighbor], s.Policed[copp.BGP]+s.Policed[copp.Neighbor], each)
	}
	if p := s.Passed[copp.Default]; p < 50 || p > 52 || s.Policed[copp.Default] != flood-p {
		t.Errorf("default passed %d and policed %d of %d, want the burst of 50 (and at most a token or two) through", p, s.Policed[copp.Default], flood)
	}
	if want := int(s.Passed[copp.BGP] + s.Passed[copp.Neighbor] + s.Passed[copp.Default]); got != want {
		t.Errorf("the kernel side got %d frames, the policers passed %d", got, want)
	}
	// Policing keeps the hot path's promise: one cgo call per burst, no
	// allocation.
	ringtest.Preload(copptest.UDP())
	buf := make([]byte, 1<<16)
	b.Port.InjectPreloaded(0, 32)
	c0 := runtime.NumCgoCall()
	if n := w.ToKernel(); n != 32 {
		t.Errorf("ToKernel reported %d of a policed burst of 32", n)
	}
	if calls := runtime.NumCgoCall() - c0; calls != 1 {
		t.Errorf("a policed burst took %d cgo calls, want 1", calls)
	}
	allocs := testing.AllocsPerRun(200, func() {
		b.Port.InjectPreloaded(0, 32)
		w.ToKernel()
		drain(peer, buf)
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per policed burst, want 0", allocs)
	}
	// Nothing leaks: every mbuf, policed or written, went back to the pool.
	waitUntil(t, "the pool to be whole", func() bool { w.ToKernel(); return b.Pool.InUse() == base })
}

// A SYN flood to port 22 is policed by the management_syn class's bucket in
// the burst core, while the segments of port 22's established sessions
// among it (ACK set) all pass as management: a flood to a served port no
// longer takes its sessions' class.
func TestASYNFloodToAManagementPortIsPolicedWhileItsSessionsPass(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 1024})
	c := copp.DefaultConfig()
	c.ManagementSYN = copp.Rate{PPS: 1, Burst: 50}
	w, peer := coppWorker(t, b, c)
	base := b.Pool.InUse()

	const flood, each = 600, 20
	got := floodThrough(t, b, w, peer, copptest.SSH(0x02), flood, each, copptest.SSH(0x18)) // PSH+ACK: a session's data
	var s copp.Snapshot
	if !w.CoPP(&s) {
		t.Fatal("no CoPP counters")
	}
	if s.Passed[copp.Management] != each || s.Policed[copp.Management] != 0 {
		t.Errorf("management passed %d, policed %d; want all %d sessions' segments passed", s.Passed[copp.Management], s.Policed[copp.Management], each)
	}
	if p := s.Passed[copp.ManagementSYN]; p < 50 || p > 52 || s.Policed[copp.ManagementSYN] != flood-p {
		t.Errorf("management_syn passed %d and policed %d of %d, want the burst of 50 (and at most a token or two) through", p, s.Policed[copp.ManagementSYN], flood)
	}
	if want := int(s.Passed[copp.Management] + s.Passed[copp.ManagementSYN]); got != want {
		t.Errorf("the kernel side got %d frames, the policers passed %d", got, want)
	}
	waitUntil(t, "the pool to be whole", func() bool { w.ToKernel(); return b.Pool.InUse() == base })
}

// The drain rate of the to-kernel path, logged: bursts of 32 small UDP
// frames dequeued and written (copp off, or on with the default class
// unlimited) against dequeued and freed by the default policer, or found
// unwanted in a socket view and freed by the unwanted class's. The ring's
// refill is the test's and is not timed. What it checks is the accounting: every frame written or policed.
func TestToKernelDrainRateWithAndWithoutPolicing(t *testing.T) {
	ringtest.Preload(copptest.UDP())
	const bursts = 4000
	for _, c := range []struct {
		name string
		on   bool
		rate int
		view bool // the frames are unwanted: a socket view is published
	}{{"off", false, 0, false}, {"on, passed", true, 0, false}, {"on, policed", true, 1, false}, {"on, unwanted", true, 0, true}} {
		b := newBed(t, bedOpts{noStart: true})
		cfg := copp.DefaultConfig()
		cfg.Enabled = c.on
		cfg.Default = copp.Rate{PPS: c.rate, Burst: 1}
		cfg.Unwanted.Rate = copp.Rate{PPS: 1, Burst: 1}
		if c.view {
			publishHost(t)
		}
		w, peer := coppWorker(t, b, cfg)
		buf := make([]byte, 1<<16)
		var took time.Duration
		written := 0
		for range bursts {
			b.Port.InjectPreloaded(0, 32)
			t0 := time.Now()
			w.ToKernel()
			written += drain(peer, buf)
			took += time.Since(t0)
		}
		var s copp.Snapshot
		w.CoPP(&s)
		policed := int(s.Policed[copp.Default] + s.Policed[copp.Unwanted])
		if total := written + policed; total != 32*bursts {
			t.Errorf("copp %s: %d written and %d policed of %d", c.name, written, policed, 32*bursts)
		}
		t.Logf("copp %-12s: %6.1f ns/frame, %5.2f Mframes/s; %d written, %d policed", c.name,
			float64(took.Nanoseconds())/(32*bursts), 32*bursts/took.Seconds()/1e6, written, policed)
		if c.view {
			ring.WithdrawSockView()
		}
	}
}

// The copp section switches on live (SIGHUP) in a running kbridge: a flood
// of default frames is policed, ARP and BGP pass, and `kbridge stats` and the
// status show the classes' counters.
func TestCoPPSwitchesOnLiveAndShowsInStats(t *testing.T) {
	b := newBed(t, bedOpts{})
	cfg, err := os.ReadFile(b.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := string(cfg) + "\ncopp:\n  enabled: true\n  default: {pps: 1, burst: 5}\n"
	if err := os.WriteFile(b.Cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.Kb.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !b.WaitLog("control-plane protection switched") {
		t.Fatalf("kbridge did not log the switch:\n%s", b.Out)
	}
	var frames [][]byte
	for i := range 100 {
		frames = append(frames, testFrame(100, uint32(i)))
		if i%20 == 0 {
			frames = append(frames, copptest.ARP(), copptest.BGP())
		}
	}
	if _, err := b.Port.Inject(0, frames, ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the flood to be policed", func() bool {
		c := b.Status().CoPP
		return c != nil && c.Passed[copp.Default]+c.Policed[copp.Default] == 100
	})
	c := b.Status().CoPP
	if c.Passed[copp.BGP] != 5 || c.Passed[copp.Neighbor] != 5 || c.Policed[copp.BGP]+c.Policed[copp.Neighbor] != 0 {
		t.Errorf("copp counters %+v: want 5 bgp and 5 neighbor frames passed, none policed", *c)
	}
	if c.Passed[copp.Default] > 6 {
		t.Errorf("%d default frames passed a burst of 5", c.Passed[copp.Default])
	}
	if !slices.Contains(c.Policing, "default") {
		t.Errorf("stats name %q as being policed now, want default among them", c.Policing)
	}
	if out := kbridgeStats(t, b.Sock); !strings.Contains(out, `"policed": [`) {
		t.Errorf("kbridge stats shows no copp counters:\n%s", out)
	}
	b.Stop(true)
}

// A ring of 256 slots holds 255 frames, the last 255/8 kept for the control
// plane (KBRIDGE_RESERVE).
const ringCap, ringReserve = 255, 255 / 8

// injectAll injects frames on queue 0 as the app does and returns how many
// kbridge_to_kernel() queued.
// injectAll hands frames to kbridge_to_kernel() in bursts of at most 512
// (the test primary's burst array) and returns how many it queued.
func injectAll(t *testing.T, b *bed, frames [][]byte) int {
	t.Helper()
	queued := 0
	for len(frames) > 0 {
		burst := frames[:min(len(frames), 512)]
		frames = frames[len(burst):]
		n, err := b.Port.Inject(0, burst, ringtestOpts(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		queued += n
	}
	return queued
}

func copies(f []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = f
	}
	return out
}

// The app's kbridge_to_kernel() keeps the last eighth of a to_kernel ring
// for control and neighbour frames: with default frames filling the rest,
// the app frees the default ones that do not fit above the reserve and
// still queues BGP and ARP, and drops a control frame only when the reserve
// is full too, counting each by class; the worker then writes every queued
// frame, in order.
func TestControlFramesEnterAToKernelRingThatDefaultTrafficFilled(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 256})
	w, peer := coppWorker(t, b, copp.DefaultConfig())
	inject := func(frames [][]byte) int { return injectAll(t, b, frames) }
	if n := inject(copies(copptest.UDP(), 300)); n != ringCap-ringReserve {
		t.Fatalf("the flood queued %d, want %d (all but the reserve)", n, ringCap-ringReserve)
	}
	if n := inject([][]byte{copptest.UDP(), copptest.BGP(), copptest.ARP(), copptest.UDP()}); n != 2 {
		t.Errorf("with the ring full above its reserve, %d of UDP, BGP, ARP, UDP went in; want BGP and ARP", n)
	}
	if n := inject(copies(copptest.BGP(), 40)); n != ringReserve-2 {
		t.Errorf("%d BGP frames went into a reserve with %d slots left", n, ringReserve-2)
	}
	c := b.Port.Counters(0)
	if c.ToKernelReserved != ringReserve || c.ToKernelDroppedControl != 40-(ringReserve-2) || c.ToKernelDroppedNeighbor != 0 ||
		c.ToKernelDropped != 300-(ringCap-ringReserve)+2+c.ToKernelDroppedControl {
		t.Errorf("app counters %+v: want %d reserved, %d control dropped, the UDP frames dropped too", c, ringReserve, 40-(ringReserve-2))
	}
	buf := make([]byte, 1<<16)
	var got [][]byte
	for w.ToKernel() > 0 {
		for {
			n, err := unix.Read(peer, buf)
			if err != nil {
				break
			}
			got = append(got, append([]byte(nil), buf[vnet.HdrLen:n]...))
		}
	}
	if len(got) != ringCap {
		t.Fatalf("the kernel side got %d frames, want %d", len(got), ringCap)
	}
	if !bytes.Equal(got[ringCap-ringReserve], copptest.BGP()) || !bytes.Equal(got[ringCap-ringReserve+1], copptest.ARP()) ||
		!bytes.Equal(got[ringCap-1], copptest.BGP()) {
		t.Errorf("the reserve's frames did not come last, BGP and ARP first")
	}
}

// kbridge's enqueue toward the app keeps the same reserve: with the kernel
// filling the from_kernel ring with default frames, a BGP and an ARP frame
// still reach the app and the default frames that found no room are
// counted by class.
func TestControlFramesReachTheAppWhileTheKernelFillsTheFromKernelRing(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 256})
	w, peer := coppWorker(t, b, copp.DefaultConfig())
	hdr := make([]byte, vnet.HdrLen)
	send := func(frames [][]byte) {
		t.Helper()
		for _, f := range frames {
			if _, err := unix.Writev(peer, [][]byte{hdr, f}); err != nil {
				t.Fatal(err)
			}
		}
		for w.FromKernel() > 0 {
		}
	}
	for range 10 {
		send(copies(copptest.UDP(), 32))
	}
	send([][]byte{copptest.UDP(), copptest.BGP(), copptest.ARP()})
	var s copp.Snapshot
	if !w.CoPP(&s) {
		t.Fatal("no CoPP counters")
	}
	if s.FromKernelReserved != 2 || s.FromKernelRoom[copp.Default] != 320-(ringCap-ringReserve)+1 || s.FromKernelRoom[copp.BGP] != 0 {
		t.Errorf("reserved %d, dropped for room %v; want 2 reserved and %d default dropped", s.FromKernelReserved, s.FromKernelRoom, 320-(ringCap-ringReserve)+1)
	}
	got := b.Port.Collect(0, 300)
	if len(got) != ringCap-ringReserve+2 || !bytes.Equal(got[len(got)-2], copptest.BGP()) || !bytes.Equal(got[len(got)-1], copptest.ARP()) {
		t.Errorf("the app got %d frames, want %d ending with BGP and ARP", len(got), ringCap-ringReserve+2)
	}
}

// What the reserve costs the app: kbridge_to_kernel() against a bare
// rte_ring_enqueue_burst() (each burst dequeued again), with room to spare
// and with every burst reaching into the reserve (each frame classified),
// logged in ns a frame. It checks nothing but that the bursts went in.
func TestTheToKernelReserveCostsTheAppNothingWhileThereIsRoom(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 1024})
	const n, rounds = 32, 20000
	for _, c := range []struct {
		name  string
		frame []byte
		room  int
	}{{"room to spare, UDP", copptest.UDP(), 1023}, {"in the reserve, BGP", copptest.BGP(), 64}} {
		hdr, bare, err := b.Port.ToKernelCost(0, c.frame, n, rounds, c.room)
		if err != nil {
			t.Fatal(err)
		}
		per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / (n * rounds) }
		t.Logf("%-20s: kbridge_to_kernel %5.1f ns/frame, bare enqueue %5.1f ns/frame (each with its dequeue)", c.name, per(hdr), per(bare))
	}
}

// A flood of forged BGP (from port 179, TTL 64, as hping3 -s 179 sends it
// from anywhere) never takes a real peer's place: it is classed default,
// so the bgp bucket passes every segment of the real (GTSM) session among
// it, and the app's to_kernel ring, full above its reserve, admits the
// real segments into the reserve and frees the forged ones as default.
func TestAForgedBGPFloodTakesNeitherTheBGPBucketNorTheReserve(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 1024})
	c := copp.DefaultConfig()
	c.BGP = copp.Rate{PPS: 1, Burst: 50}
	w, peer := coppWorker(t, b, c)

	const flood, each = 600, 20
	got := floodThrough(t, b, w, peer, copptest.ForgedBGP(), flood, each, copptest.BGP())
	var s copp.Snapshot
	if !w.CoPP(&s) {
		t.Fatal("no CoPP counters")
	}
	if s.Passed[copp.BGP] != each || s.Policed[copp.BGP] != 0 || s.Passed[copp.Default] != flood {
		t.Errorf("bgp passed %d, policed %d; default passed %d: want the %d real segments passed as bgp, the %d forged as default",
			s.Passed[copp.BGP], s.Policed[copp.BGP], s.Passed[copp.Default], each, flood)
	}
	if got != flood+each {
		t.Errorf("the kernel side got %d frames, want %d", got, flood+each)
	}

	inject := func(frames [][]byte) int { return injectAll(t, b, frames) }
	if n := inject(copies(copptest.UDP(), 1024)); n != 1024-1024/8 {
		t.Fatalf("the flood queued %d, want all but the reserve", n)
	}
	if n := inject([][]byte{copptest.ForgedBGP(), copptest.BGP(), copptest.ForgedBGP(), copptest.BGP()}); n != 2 {
		t.Errorf("with the ring full above its reserve, %d of forged, real, forged, real BGP went in; want the 2 real", n)
	}
	if ac := b.Port.Counters(0); ac.ToKernelReserved != 2 || ac.ToKernelDroppedControl != 0 {
		t.Errorf("app counters %+v: want 2 reserved, no control frame dropped (the forged count as default)", ac)
	}
	for w.ToKernel() > 0 {
		drain(peer, make([]byte, 1<<16))
	}
}

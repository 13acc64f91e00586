package restart

import (
	"encoding/binary"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// flow sends numbered test frames into kbridge's interface, as the kernel
// would, one every interval, and collects what reaches the app's side of
// the port: what a handover does to traffic, measured, not asserted as a
// time.
type flow struct {
	k        *dpdkbed.Kbridge
	p        *dpdkbed.Port
	stop     chan struct{}
	wg       sync.WaitGroup
	sent     atomic.Uint64
	sendErrs atomic.Uint64

	mu      sync.Mutex
	got     map[uint32]bool
	last    time.Time
	maxGap  time.Duration
	gapFrom time.Time
}

func startFlow(t *testing.T, k *dpdkbed.Kbridge, p *dpdkbed.Port, every time.Duration) *flow {
	t.Helper()
	f := &flow{k: k, p: p, stop: make(chan struct{}), got: map[uint32]bool{}}
	var ifindex int
	err := dpdkbed.InNS(env.NS, func() error {
		l, err := netlink.LinkByName(k.Ifname)
		if err == nil {
			ifindex = l.Attrs().Index
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		_ = dpdkbed.InNS(env.NS, func() error {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(dpdkbed.Htons(dpdkbed.EthType)))
			if err != nil {
				t.Error(err)
				return err
			}
			defer unix.Close(fd)
			to := &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: dpdkbed.Htons(dpdkbed.EthType), Halen: 6}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for seq := uint32(0); ; seq++ {
				select {
				case <-f.stop:
					return nil
				case <-tick.C:
				}
				fr := dpdkbed.TestFrame(100, seq)
				copy(to.Addr[:], fr[:6])
				if err := unix.Sendto(fd, fr, 0, to); err != nil {
					f.sendErrs.Add(1)
					continue
				}
				f.sent.Add(1)
			}
		})
	}()
	go func() {
		defer f.wg.Done()
		for {
			frames := dpdkbed.OnlyTest(p.Port.Collect(0, 32))
			now := time.Now()
			f.mu.Lock()
			for _, fr := range frames {
				f.got[binary.BigEndian.Uint32(fr[14:18])] = true
			}
			if len(frames) > 0 {
				if !f.last.IsZero() && now.Sub(f.last) > f.maxGap {
					f.maxGap, f.gapFrom = now.Sub(f.last), f.last
				}
				f.last = now
			}
			f.mu.Unlock()
			if len(frames) == 0 {
				select {
				case <-f.stop:
					if f.settled() {
						return
					}
				default:
				}
				time.Sleep(200 * time.Microsecond)
			}
		}
	}()
	return f
}

// settled reports, once the sender stopped, whether nothing more came for
// a while.
func (f *flow) settled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Since(f.last) > 300*time.Millisecond
}

// end stops the flow and reports sent, delivered and the longest interval
// without a frame at the app.
func (f *flow) end() (sent, delivered uint64, gap time.Duration) {
	close(f.stop)
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent.Load(), uint64(len(f.got)), f.maxGap
}

// txDropped reads the interface's tx_dropped: frames the kernel could not
// queue on the TAP (a full queue).
func txDropped(t *testing.T, ifname string) uint64 {
	t.Helper()
	var n uint64
	err := dpdkbed.InNS(env.NS, func() error {
		l, err := netlink.LinkByName(ifname)
		if err == nil && l.Attrs().Statistics != nil {
			n = l.Attrs().Statistics.TxDropped
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// nsIP runs ip with args in the test namespace.
func nsIP(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", env.NS}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// handAdded puts an address and a route on the interface, as an
// administrator or a routing daemon would, and returns its ifindex.
func handAdded(t *testing.T, ifname string) int {
	t.Helper()
	nsIP(t, "addr", "add", "198.18.77.1/24", "dev", ifname)
	nsIP(t, "route", "add", "198.19.77.0/24", "dev", ifname)
	l, err := env.Link(ifname)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

// stillThere checks that the interface kept its ifindex, the address and
// the route handAdded put on it.
func stillThere(t *testing.T, ifname string, ifindex int) {
	t.Helper()
	l, err := env.Link(ifname)
	if err != nil {
		t.Fatalf("the interface is gone: %v", err)
	}
	if got := l.Attrs().Index; got != ifindex {
		t.Errorf("ifindex %d, want %d: the interface was made anew", got, ifindex)
	}
	if out := nsIP(t, "addr", "show", "dev", ifname); !strings.Contains(out, "198.18.77.1/24") {
		t.Errorf("the hand-added address is gone:\n%s", out)
	}
	if out := nsIP(t, "route", "show", "dev", ifname); !strings.Contains(out, "198.19.77.0/24") {
		t.Errorf("the hand-added route is gone:\n%s", out)
	}
}

// adopted reads what the kbridge on sock says it adopted.
func adopted(t *testing.T, sock string) *daemon.Adopted {
	t.Helper()
	st, err := daemon.ReadStatus(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Adopted == nil {
		t.Fatalf("the kbridge on %s adopted nothing", sock)
	}
	return st.Adopted
}

// `kbridge run --takeover` beside a serving kbridge: the old one hands the
// port and the queues over and exits 0, the new one serves the same
// interface (ifindex, a hand-added address and route kept), and frames the
// kernel sent throughout reach the app or are counted as dropped.
func TestTakeoverByHandKeepsTheInterface(t *testing.T) {
	p := env.NewPort(t)
	old := env.NewKbridge(t, p)
	old.Ready()
	ifindex := handAdded(t, old.Ifname)
	dropped0 := txDropped(t, old.Ifname)
	f := startFlow(t, old, p, 200*time.Microsecond)
	time.Sleep(200 * time.Millisecond)

	start := time.Now()
	next := harness.StartSpec(t, "kbridge-next", harness.Spec{},
		"ip", "netns", "exec", env.NS, env.Bin, "run", "--config", old.Cfg, "--takeover")
	next.StopWait = 15 * time.Second
	if !old.ExitedWithin(30 * time.Second) {
		t.Fatalf("the old kbridge still runs after the takeover was asked:\n%s\n--- new:\n%s", old.Log, next.Log)
	}
	if code := old.ExitCode(); code != 0 {
		t.Errorf("the old kbridge exited %d, want 0:\n%s", code, old.Log)
	}
	dpdkbed.WaitServing(t, next, old.Sock)
	took := time.Since(start)
	time.Sleep(300 * time.Millisecond)
	sent, delivered, gap := f.end()
	dropped := txDropped(t, old.Ifname) - dropped0

	t.Logf("takeover: %v from the start of the new kbridge to its control socket; frames sent %d, delivered %d, "+
		"dropped on the TAP %d, send errors %d; longest interval without a frame at the app %v",
		took.Round(time.Millisecond), sent, delivered, dropped, f.sendErrs.Load(), gap)
	for _, l := range strings.Split(next.Log.String(), "\n") {
		if strings.Contains(l, "handover: the workers run again") {
			t.Logf("the new kbridge: %s", l)
		}
	}
	if got := p.Port.OwnerPID(); got != next.Pid() {
		t.Errorf("port owner %d, want the new kbridge %d", got, next.Pid())
	}
	stillThere(t, old.Ifname, ifindex)
	harness.NoOtherUserAttaches(t, env.NS, old.Ifname) // the adopted kb0 too
	a := adopted(t, old.Sock)
	if a.From != old.Pid() || a.Index != ifindex || a.How != daemon.HowHanded {
		t.Errorf("adopted %+v, want from pid %d, ifindex %d", a, old.Pid(), ifindex)
	}
	for _, want := range []string{"handed the port and the interface over", "successor_pid=" + strconv.Itoa(next.Pid())} {
		if !strings.Contains(old.Log.String(), want) {
			t.Errorf("the old kbridge's log lacks %q:\n%s", want, old.Log)
		}
	}
	if !strings.Contains(next.Log.String(), "handed the port and the interface over") {
		t.Errorf("the new kbridge's log does not say it was handed over:\n%s", next.Log)
	}
	if delivered+dropped < sent {
		t.Errorf("%d frames sent, %d delivered and %d dropped: %d unaccounted for", sent, delivered, dropped, sent-delivered-dropped)
	}
	if delivered == 0 {
		t.Error("no frame reached the app")
	}

	next.Stop(true)
	if _, err := env.Link(old.Ifname); err == nil {
		t.Errorf("interface %s still exists after the new kbridge stopped (interface.on_stop: remove)", old.Ifname)
	}
}

// kbridge killed (SIGKILL) while another process holds its queue fds, as
// systemd's fd store does: the interface stays (ifindex, address, route,
// carrier), frames the kernel sends meanwhile wait in the queue, and the
// next kbridge, given the fds as systemd gives them (LISTEN_FDS), adopts
// it and delivers them.
func TestKillWithAHolderKeepsTheInterface(t *testing.T) {
	p := env.NewPort(t)
	victim := env.NewKbridge(t, p)
	victim.Ready()
	ifindex := handAdded(t, victim.Ifname)
	held := harness.QueueFds(t, victim.Pid(), victim.Ifname)
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	victim.Kill()
	stillThere(t, victim.Ifname, ifindex)
	if l, _ := env.Link(victim.Ifname); l != nil && l.Attrs().RawFlags&unix.IFF_LOWER_UP == 0 {
		t.Errorf("no carrier while the queues are held")
	}

	const n = 50
	victim.Send(n) // into the held queue: nobody reads it now
	names := make([]string, len(held))
	for q := range held {
		names[q] = fmt.Sprintf("%s.q%d", victim.Ifname, q)
	}
	next := harness.StartSpec(t, "kbridge-next", harness.Spec{ExtraFiles: held},
		"ip", "netns", "exec", env.NS, "sh", "-c",
		fmt.Sprintf("LISTEN_PID=$$ LISTEN_FDS=%d LISTEN_FDNAMES=%s exec %s run --config %s",
			len(held), strings.Join(names, ":"), env.Bin, victim.Cfg))
	next.StopWait = 15 * time.Second
	dpdkbed.WaitServing(t, next, victim.Sock)
	stillThere(t, victim.Ifname, ifindex)
	a := adopted(t, victim.Sock)
	if a.From != victim.Pid() || a.Index != ifindex || a.How != daemon.HowStored {
		t.Errorf("adopted %+v, want from pid %d, ifindex %d, kept in the fd store", a, victim.Pid(), ifindex)
	}
	var got int
	harness.WaitUntil(t, "the frames sent while no kbridge ran to reach the app", 10*time.Second, func() bool {
		got += len(dpdkbed.OnlyTest(p.Port.Collect(0, 32)))
		return got >= n
	})
	t.Logf("kill -9 with the queues held: %d frames sent while no kbridge ran, %d delivered by the next", n, got)
	// kbridge stats says so: the frames waiting in the queue are the
	// backlog the adoption delivered.
	harness.WaitUntil(t, "the backlog to be read empty", 5*time.Second, func() bool { return adopted(t, victim.Sock).Drained })
	if a := adopted(t, victim.Sock); a.Backlog < n || !strings.HasPrefix(a.Text, "adopted "+victim.Ifname) ||
		!strings.Contains(a.Text, "from the fd store") {
		t.Errorf("kbridge stats: %+v; want a backlog of at least %d frames, delivered, from the fd store", a, n)
	} else {
		t.Logf("kbridge stats: %s", a.Text)
	}

	for _, f := range held {
		f.Close()
	}
	held = nil
	next.Stop(true)
	if _, err := env.Link(victim.Ifname); err == nil {
		t.Errorf("interface %s still exists after the last holder let go", victim.Ifname)
	}
}

// interface.on_stop: keep: a stopped kbridge leaves its interface, carrier
// down, address kept; the next adopts it (same ifindex), and `kbridge
// cleanup` removes it once no kbridge serves it.
func TestOnStopKeepLeavesTheInterfaceForTheNext(t *testing.T) {
	p := env.NewPort(t)
	c := env.PortConfig(p)
	c.Iface += "  on_stop: keep\n"
	first := env.StartKbridgeConfig(t, c)
	first.Ready()
	ifindex := handAdded(t, first.Ifname)
	first.Stop(true)
	stillThere(t, first.Ifname, ifindex)
	if l, _ := env.Link(first.Ifname); l != nil && l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 {
		t.Error("carrier up with no kbridge holding a queue")
	}

	next := env.StartKbridge(t, first.Cfg)
	dpdkbed.WaitServing(t, next, first.Sock)
	stillThere(t, first.Ifname, ifindex)
	if a := adopted(t, first.Sock); a.From != first.Pid() || a.How != daemon.HowPersistent {
		t.Errorf("adopted %+v, want from pid %d, left persistent", a, first.Pid())
	}
	next.Stop(true)
	stillThere(t, first.Ifname, ifindex)

	out, err := exec.Command("ip", "netns", "exec", env.NS, env.Bin, "cleanup", "--config", first.Cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("kbridge cleanup: %v: %s", err, out)
	}
	if _, err := env.Link(first.Ifname); err == nil {
		t.Errorf("kbridge cleanup left %s: %s", first.Ifname, out)
	}
}

// startHeldSuccessor starts `kbridge run --takeover` (the hook build) on
// old's configuration, held for hold between adopting kb0 and confirming,
// and waits until it holds there: it has the fds, the port and kb0.
func startHeldSuccessor(t *testing.T, old *dpdkbed.Kbridge, p *dpdkbed.Port, hold string) *harness.Proc {
	t.Helper()
	next := harness.StartSpec(t, "kbridge-next", harness.Spec{Env: []string{"KBRIDGE_TEST_HOLD_CONFIRM=" + hold}},
		"ip", "netns", "exec", env.NS, hookBin(t), "run", "--config", old.Cfg, "--takeover")
	next.StopWait = 15 * time.Second
	next.WaitLog("test hook: holding the takeover before confirming it", 30*time.Second)
	if got := p.Port.OwnerPID(); got != next.Pid() {
		t.Errorf("port owner %d while the successor holds before confirming, want it, pid %d", got, next.Pid())
	}
	return next
}

// tookBack checks that old, whose successor (pid) did not confirm, took the
// port and kb0 back: it serves again under its own pid, kb0 kept its
// ifindex, hand-added address and route, frames cross both ways, no other
// user attaches a queue; then it stops cleanly.
func tookBack(t *testing.T, old *dpdkbed.Kbridge, p *dpdkbed.Port, successor, ifindex int) {
	t.Helper()
	old.WaitLog("taking the port and the interface back: the takeover by pid "+strconv.Itoa(successor)+" was not confirmed", 30*time.Second)
	old.Ready()
	if old.ExitedWithin(0) {
		t.Fatalf("the old kbridge exited (%v) instead of taking back:\n%s", old.Err(), old.Log)
	}
	if got := p.Port.OwnerPID(); got != old.Pid() {
		t.Errorf("port owner %d, want the old kbridge %d back", got, old.Pid())
	}
	stillThere(t, old.Ifname, ifindex)
	if a := adopted(t, old.Sock); a.How != daemon.HowTakenBack || a.Successor != successor || a.Index != ifindex {
		t.Errorf("adopted %+v, want taken back from successor %d, ifindex %d", a, successor, ifindex)
	} else {
		t.Logf("kbridge stats: %s", a.Text)
	}
	before := old.Status()
	if q, err := p.Port.Inject(0, dpdkbed.Frames(8), ringtest.InjectOpts{}); err != nil || q != 8 {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	harness.WaitUntil(t, "the app's frames through kb0", 5*time.Second, func() bool {
		return old.Status().ToKernelPackets >= before.ToKernelPackets+8
	})
	old.Send(8)
	var got int
	harness.WaitUntil(t, "the kernel's frames at the app", 5*time.Second, func() bool {
		got += len(dpdkbed.OnlyTest(p.Port.Collect(0, 32)))
		return got >= 8
	})
	harness.NoOtherUserAttaches(t, env.NS, old.Ifname)
	old.Stop(true)
	if _, err := env.Link(old.Ifname); err == nil {
		t.Errorf("interface %s still exists after the old kbridge stopped", old.Ifname)
	}
}

// A successor killed (SIGKILL) after it was handed kb0's queues, claimed
// the port and adopted kb0, but before it confirmed: the old kbridge, which
// kept its queues, takes the port and kb0 back (it executes itself again
// over them, under its own pid), and the path is up again.
func TestTakeoverKilledBeforeConfirmingIsTakenBack(t *testing.T) {
	p := env.NewPort(t)
	old := env.NewKbridge(t, p)
	old.Ready()
	ifindex := handAdded(t, old.Ifname)
	next := startHeldSuccessor(t, old, p, "forever")
	next.Kill()
	tookBack(t, old, p, next.Pid(), ifindex)
	for _, want := range []string{"the successor went (or closed the connection) before it confirmed",
		fmt.Sprintf("from pid %d, taken back", next.Pid())} {
		if !strings.Contains(old.Log.String(), want) {
			t.Errorf("the old kbridge's log lacks %q:\n%s", want, old.Log)
		}
	}
}

// A successor that confirms after the old kbridge's deadline is told to
// give up, and does (it releases the port and exits 1); one that hangs is
// killed once it had the time to give up. Either way the old one takes
// the port and kb0 back.
func TestTakeoverNotConfirmedInTimeIsTakenBack(t *testing.T) {
	for _, tc := range []struct {
		name, hold, want string
		exit             int
	}{
		{"late", "3s", "the takeover was aborted by the kbridge that handed over", 1},
		{"hung", "forever", "", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := env.NewPort(t)
			old := env.StartKbridgeConfigBin(t, hookBin(t), env.PortConfig(p), "KBRIDGE_TEST_CONFIRM_WITHIN=1s")
			old.Ready()
			ifindex := handAdded(t, old.Ifname)
			next := startHeldSuccessor(t, old, p, tc.hold)
			if !next.ExitedWithin(20 * time.Second) {
				t.Fatalf("the successor still runs 20 s after its deadline:\n%s", next.Log)
			}
			if code := next.ExitCode(); code != tc.exit || !strings.Contains(next.Log.String(), tc.want) {
				t.Errorf("the successor exited %d, want %d, its log saying %q:\n%s", code, tc.exit, tc.want, next.Log)
			}
			tookBack(t, old, p, next.Pid(), ifindex)
			killed := strings.Contains(old.Log.String(), "neither confirmed nor gave up: killing it")
			if killed != (tc.hold == "forever") || !strings.Contains(old.Log.String(), "no confirmation within 1s") {
				t.Errorf("the old kbridge's log: killed the successor %v, want %v, and the deadline named:\n%s", killed, tc.hold == "forever", old.Log)
			}
		})
	}
}

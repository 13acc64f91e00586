package vhost

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/harness"
)

// What the host added to kb0 by hand, which a takeover must leave as it is.
const (
	handAddr  = "198.18.2.77/32"
	handRoute = "198.19.77.0/24"
)

// handAdd adds an address and a route to kb0 as an administrator would and
// returns its ifindex.
func handAdd(t *testing.T) string {
	t.Helper()
	harness.Run(t, "ip", "-n", dut, "addr", "add", handAddr, "dev", ifname)
	harness.Run(t, "ip", "-n", dut, "route", "add", handRoute, "dev", ifname)
	return linkIndex(t)
}

// unchanged checks that kb0 is the interface it was: the same ifindex, the
// hand-added address and route on it.
func unchanged(t *testing.T, ifindex string) {
	t.Helper()
	if got := linkIndex(t); got != ifindex {
		t.Errorf("%s's ifindex is %q, was %q: the interface was made anew", ifname, got, ifindex)
	}
	if out := harness.Run(t, "ip", "-n", dut, "addr", "show", "dev", ifname); !strings.Contains(out, handAddr) {
		t.Errorf("the hand-added address is gone:\n%s", out)
	}
	if out := harness.Run(t, "ip", "-n", dut, "route", "show", "dev", ifname); !strings.Contains(out, handRoute) {
		t.Errorf("the hand-added route is gone:\n%s", out)
	}
}

// serverAppBed starts testpmd with a server=1 port and kbridge its client,
// connected, with an address and a route added to kb0 by hand (handAdd,
// whose ifindex it returns).
func serverAppBed(t *testing.T) (b *bed, tp, kb *harness.Proc, ifindex string) {
	t.Helper()
	b = newBed(t, true)
	tp = b.testpmd(true)
	b.waitSocket(tp)
	kb = b.kbridge()
	kb.WaitLog("vhost-user frontend connected", 15*time.Second)
	tp.WaitLog("Press enter to exit", 30*time.Second)
	ping(t, peer, kbAddr)
	return b, tp, kb, handAdd(t)
}

// takeoverStatus is what the tests read of `kbridge stats` after a takeover.
type takeoverStatus struct {
	Connected bool            `json:"connected"`
	Carrier   bool            `json:"carrier"`
	Adopted   *daemon.Adopted `json:"adopted"`
}

// takeOver starts `kbridge run --takeover` beside old, which must hand over
// and exit 0 having freed every mbuf, and returns the new kbridge, running.
func (b *bed) takeOver(old *harness.Proc) *harness.Proc {
	t := b.t
	t.Helper()
	next := harness.Start(t, "kbridge-next", "ip", "netns", "exec", dut, harness.Kbridge(t), "run", "--config", b.cfg, "--takeover")
	next.StopWait = 15 * time.Second
	if !old.ExitedWithin(30 * time.Second) {
		t.Fatalf("the old kbridge still runs after the takeover was asked:\n%s\n--- new:\n%s", old.Log, next.Log)
	}
	if code := old.ExitCode(); code != 0 {
		t.Errorf("the old kbridge exited %d, want 0:\n%s", code, old.Log)
	}
	for _, want := range []string{"handed the port and the interface over", "pool_in_use=0"} {
		if !strings.Contains(old.Log.String(), want) {
			t.Errorf("the old kbridge's log lacks %q:\n%s", want, old.Log)
		}
	}
	next.WaitLog("bridge running", 20*time.Second)
	harness.NoOtherUserAttaches(t, dut, ifname) // the adopted kb0 too
	var st takeoverStatus
	harness.KbridgeStats(t, b.ctl, &st)
	if a := st.Adopted; a == nil || a.How != daemon.HowHanded || a.From != old.Pid() {
		t.Errorf("kbridge stats after the takeover: adopted %+v, want handed over by pid %d", a, old.Pid())
	} else {
		t.Logf("kbridge stats: %s", a.Text)
	}
	return next
}

// Mode vhost makes kb0 as mode ring does: its user's and group's alone
// before it is up, so that a local user without privileges cannot attach
// a queue to it (EPERM), frontend or none.
func TestVhostOtherUsersCannotAttachAQueue(t *testing.T) {
	b := newBed(t, false)
	kb := b.kbridge()
	harness.NoOtherUserAttaches(t, dut, ifname)
	stopKbridge(t, kb)
}

// `kbridge run --takeover` in mode vhost, kbridge the client of the app's
// server=1 port (the configuration VHOST.md gives for restarts): the old
// kbridge stops its backend, hands kb0's queues over and exits 0; the new
// one adopts kb0 (its ifindex, a hand-added address and route unchanged,
// its carrier never down) and connects to the app, and the ping stream
// through kb0 goes on. Its gap is logged, not asserted; nothing is left
// once the new kbridge stops.
func TestVhostTakeoverKeepsTheInterface(t *testing.T) {
	b, tp, old, ifindex := serverAppBed(t)
	mon := harness.Start(t, "ip monitor", "ip", "-n", dut, "monitor", "link")
	stream := startPing(t, peer, kbAddr)
	stream.waitEchoes(50, time.Time{}, 10*time.Second)

	start := time.Now()
	next := b.takeOver(old)
	next.WaitLog("vhost-user frontend connected", 15*time.Second)
	stream.waitEchoes(50, start, 20*time.Second)
	t.Logf("takeover under ping -i 0.01: %v", stream.stop())
	ping(t, dut, peerAddr)
	unchanged(t, ifindex)
	mon.Stop(false)
	for _, l := range strings.Split(mon.Log.String(), "\n") {
		if strings.Contains(l, ifname+":") && strings.Contains(l, "NO-CARRIER") {
			t.Errorf("%s lost its carrier during the takeover: %s", ifname, l)
		}
	}
	var st takeoverStatus
	harness.KbridgeStats(t, b.ctl, &st)
	if !st.Connected || !st.Carrier {
		t.Errorf("after the takeover: %+v, want connected, carrier on", st)
	}

	stopKbridge(t, next)
	if gone, out := harness.LinkGone(dut, ifname); !gone {
		t.Errorf("%s still there after the new kbridge stopped: %s", ifname, out)
	}
	tp.Stop(false)
}

// The same takeover with kbridge serving the socket and the app's port a
// virtio-user client (DPDK's default): kb0 is adopted unchanged, the new
// kbridge serves the socket again and says why the app does not come back
// (DPDK's virtio-user client does not reconnect), and after the grace for a
// frontend the carrier goes off. The app restarted connects to the new
// kbridge and the traffic flows again.
func TestVhostTakeoverUnderAClientAppSaysItDoesNotReconnect(t *testing.T) {
	b := newBed(t, false)
	old := b.kbridge()
	tp := b.testpmd(false)
	tp.WaitLog("Press enter to exit", 30*time.Second)
	old.WaitLog("vhost-user frontend connected", 10*time.Second)
	ping(t, peer, kbAddr)
	ifindex := handAdd(t)

	next := b.takeOver(old)
	next.WaitLog("does not reconnect to a new backend", 5*time.Second)
	next.WaitLog("no vhost-user frontend came back to the adopted interface", 15*time.Second)
	waitCarrier(t, dut, ifname, false, time.Now())
	unchanged(t, ifindex)

	// The way back: the app restarted (its port's connection is gone:
	// closing it writes to it, and testpmd dies of SIGPIPE).
	_ = tp.Quit()
	tp = b.testpmd(false)
	tp.WaitLog("Press enter to exit", 30*time.Second)
	next.WaitLog("vhost-user frontend connected", 15*time.Second)
	ping(t, peer, kbAddr)
	unchanged(t, ifindex)

	stopKbridge(t, next)
	gone(t, b.sock)
	tp.Stop(false)
}

// kbridge killed (SIGKILL), or stopped (SIGTERM, as `systemctl restart`
// does), in mode vhost while another process holds kb0's queue fds, as the
// unit's fd store does: kb0 stays (ifindex, address, route, carrier), what
// the kernel sends meanwhile waits in the queues, and the next kbridge,
// given the fds as systemd gives them (LISTEN_FDS), adopts kb0, connects to
// the app again and delivers that backlog, which `kbridge stats` shows.
func TestVhostKillWithAHolderKeepsTheInterface(t *testing.T) {
	for _, sig := range []string{"SIGKILL", "SIGTERM"} {
		t.Run(sig, func(t *testing.T) { restartWithAHolder(t, sig) })
	}
}

func restartWithAHolder(t *testing.T, sig string) {
	b, tp, victim, ifindex := serverAppBed(t)
	held := harness.QueueFds(t, victim.Pid(), ifname)
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	if sig == "SIGKILL" {
		victim.Kill()
	} else {
		stopKbridge(t, victim)
	}
	unchanged(t, ifindex)
	if c := carrierOf(dut, ifname); c != "1" {
		t.Errorf("carrier %s while the queues are held, want 1", c)
	}
	// Into the held queue: nobody reads it now. The echoes never come.
	const sent = 5
	_ = exec.Command("ip", "netns", "exec", dut, "ping", "-c", fmt.Sprint(sent), "-i", "0.05", "-W", "1", peerAddr).Run()

	names := make([]string, len(held))
	for q := range held {
		names[q] = fmt.Sprintf("%s.q%d", ifname, q)
	}
	next := harness.StartSpec(t, "kbridge-next", harness.Spec{ExtraFiles: held}, "ip", "netns", "exec", dut, "sh", "-c",
		fmt.Sprintf("LISTEN_PID=$$ LISTEN_FDS=%d LISTEN_FDNAMES=%s exec %s run --config %s",
			len(held), strings.Join(names, ":"), harness.Kbridge(t), b.cfg))
	next.StopWait = 15 * time.Second
	next.WaitLog("bridge running", 20*time.Second)
	next.WaitLog("vhost-user frontend connected", 15*time.Second)
	ping(t, peer, kbAddr)
	unchanged(t, ifindex)
	var st takeoverStatus
	harness.WaitUntil(t, "the backlog to be read empty", 5*time.Second, func() bool {
		harness.KbridgeStats(t, b.ctl, &st)
		return st.Adopted != nil && st.Adopted.Drained
	})
	if a := st.Adopted; a.How != daemon.HowStored || a.From != victim.Pid() || a.Backlog < sent {
		t.Errorf("kbridge stats: adopted %+v, want from the fd store, pid %d, a backlog of at least %d frames", a, victim.Pid(), sent)
	} else {
		t.Logf("kbridge stats: %s", a.Text)
	}

	for _, f := range held {
		f.Close()
	}
	held = nil
	stopKbridge(t, next)
	if gone, out := harness.LinkGone(dut, ifname); !gone {
		t.Errorf("%s still there after the last holder let go: %s", ifname, out)
	}
	tp.Stop(false)
}

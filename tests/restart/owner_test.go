package restart

// Who owns the port: the app
// freeing its port under a kbridge that lives but does not run, an owner
// whose pid now names another process, an owner that is a zombie, and an
// eventfd handed over by a secondary that is not the owner. Every
// identifier here starts with ow.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// owFreeWait is kbridge.h's KBRIDGE_FREE_WAIT_MS.
const owFreeWait = 2 * time.Second

func owStart(t *testing.T, pid int) uint64 {
	t.Helper()
	st, err := harness.ReadProcStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.Start
}

// owHoldBurst queues n frames and waits until kbridge's worker holds them
// (KBRIDGE_TEST_HOLD=out): they are on record in the held memzone.
func owHoldBurst(t *testing.T, p *dpdkbed.Port, log *harness.Buffer, n int) {
	t.Helper()
	if q, err := p.Port.Inject(0, dpdkbed.Frames(n), ringtest.InjectOpts{}); err != nil || q != n {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	harness.WaitUntil(t, "the worker to hold the burst", 10*time.Second, func() bool {
		return strings.Contains(log.String(), fmt.Sprintf("the worker holds %d mbufs (out)", n))
	})
	if r, u := p.Port.InRings(0), p.Pool.InUse(); r != 0 || u != n {
		t.Fatalf("%d mbufs in the rings and %d in use, want 0 and %d (held by the worker)", r, u, n)
	}
}

// owFreeRefused frees the port under a live owner: the free must wait the
// header's wait, report EBUSY and touch nothing (rings, pool, held record,
// owner).
func owFreeRefused(t *testing.T, p *dpdkbed.Port, ownerPid int) {
	t.Helper()
	inRings, inUse := p.Port.InRings(0), p.Pool.InUse()
	took, err := p.TryFree()
	if !errors.Is(err, unix.EBUSY) {
		t.Fatalf("kbridge_port_free under live owner pid %d returned %v after %v, want EBUSY", ownerPid, err, took)
	}
	if took < owFreeWait || took > owFreeWait+2*time.Second {
		t.Errorf("the refused free took %v, want the header's wait of %v", took, owFreeWait)
	}
	if r, u := p.Port.InRings(0), p.Pool.InUse(); r != inRings || u != inUse {
		t.Errorf("after the refused free: %d mbufs in the rings and %d in use, want %d and %d untouched (drained or freed under a live owner)",
			r, u, inRings, inUse)
	}
	if !p.Port.HeldRecordExists() {
		t.Errorf("the held-mbuf memzone was freed under a live owner")
	}
	if got := p.Port.LiveOwnerPID(); got != ownerPid {
		t.Errorf("kbridge_port_owner_pid() = %d, want the live owner %d", got, ownerPid)
	}
}

// owFreedAtOnce frees the port of a dead owner: at once, what the owner held
// freed with its record, the pool whole.
func owFreedAtOnce(t *testing.T, p *dpdkbed.Port, why string) {
	t.Helper()
	took, err := p.TryFree()
	if err != nil {
		t.Fatalf("kbridge_port_free with %s: %v after %v", why, err, took)
	}
	if took > 500*time.Millisecond {
		t.Errorf("kbridge_port_free with %s took %v: the owner was taken for alive", why, took)
	}
	if u := p.Pool.InUse(); u != 0 {
		t.Errorf("%d mbufs in use after the port of %s was freed", u, why)
	}
	if p.Port.HeldRecordExists() {
		t.Errorf("the held-mbuf memzone is left after the port of %s was freed", why)
	}
	p.Pool.Audit()
	t.Logf("kbridge_port_free with %s took %v", why, took)
}

// The app frees its port while kbridge is stopped (SIGSTOP: alive, but not
// running, like a frozen cgroup or a starved CPU). The free waits, reports
// EBUSY and drains nothing: the worker may still dequeue once it runs. Once
// kbridge runs again it sees the port closing and lets go; killed, it is
// dead. Either way the next free is at once and the pool is whole.
func TestAppFreesPortUnderStoppedKbridge(t *testing.T) {
	for _, end := range []string{"cont", "kill"} {
		t.Run(end, func(t *testing.T) {
			p := env.NewPort(t)
			k := env.NewKbridge(t, p)
			k.Ready()
			if q, err := p.Port.Inject(0, dpdkbed.Frames(8), ringtest.InjectOpts{}); err != nil || q != 8 {
				t.Fatalf("inject: queued %d: %v", q, err)
			}
			harness.WaitUntil(t, "kbridge to move the frames", 5*time.Second, func() bool {
				return k.Status().ToKernelPackets >= 8
			})
			k.Send(3) // towards the app: left in from_kernel
			harness.WaitUntil(t, "the frames to reach from_kernel", 5*time.Second, func() bool { return p.Port.InRings(0) >= 3 })

			if err := k.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k.Signal(syscall.SIGCONT) }) // before its Stop
			harness.WaitProcState(t, k.Pid(), "T")
			// Queued while kbridge does not run: they stay in to_kernel.
			if q, err := p.Port.Inject(0, dpdkbed.Frames(16), ringtest.InjectOpts{}); err != nil || q != 16 {
				t.Fatalf("inject: queued %d: %v", q, err)
			}
			owFreeRefused(t, p, k.Pid())
			if k.ExitedWithin(0) {
				t.Fatalf("kbridge exited while stopped:\n%s", k.Log)
			}

			switch end {
			case "cont":
				if err := k.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				if !k.ExitedWithin(10 * time.Second) {
					t.Fatalf("kbridge still runs 10s after SIGCONT on a closing port:\n%s", k.Log)
				}
				if code := k.ExitCode(); code <= 0 {
					t.Errorf("kbridge exited with %v, want a non-zero status", k.Err())
				}
				if out := k.Log.String(); !strings.Contains(out, "the DPDK app is freeing port "+p.Name) {
					t.Errorf("kbridge did not name the cause:\n%s", out)
				}
				if got := p.Port.Owner(); got != 0 {
					t.Errorf("owner %#x after kbridge let go, want 0", got)
				}
			case "kill":
				k.Kill()
			}
			owFreedAtOnce(t, p, "an owner that "+map[string]string{"cont": "let go", "kill": "was killed"}[end])
		})
	}
}

// The owner's pid now names another process (a live one, started later):
// it is no kbridge. Recorded with that process's own start time it counts
// as a live owner (the free is refused); with the start time the owner had,
// the free is at once, and what the killed owner held is freed with its
// record (no 2 s stall, no leak).
func TestAppFreesPortOfReusedPid(t *testing.T) {
	p := env.NewPort(t)
	victim := holdingKbridge(t, p, "out")
	victim.Ready()
	owHoldBurst(t, p, victim.Log, 8)
	victim.Kill()

	other := harness.Start(t, "sleep", "sleep", "600")
	start := owStart(t, other.Pid())
	p.Port.SetOwner(ringtest.OwnerValue(other.Pid(), start))
	owFreeRefused(t, p, other.Pid())

	p.Port.SetOwner(ringtest.OwnerValue(other.Pid(), start+1))
	if got := p.Port.LiveOwnerPID(); got != 0 {
		t.Errorf("kbridge_port_owner_pid() = %d for a reused pid, want 0", got)
	}
	owFreedAtOnce(t, p, "a reused owner pid")
}

// kbridge's own check: an owner whose pid names another process is taken
// over; the same process with its own start time is a live owner, refused.
func TestReusedOwnerPidIsTakenOver(t *testing.T) {
	p := env.NewPort(t)
	other := harness.Start(t, "sleep", "sleep", "600")
	start := owStart(t, other.Pid())

	p.Port.SetOwner(ringtest.OwnerValue(other.Pid(), start))
	refused := env.NewKbridge(t, p)
	if !refused.ExitedWithin(15 * time.Second) {
		t.Fatalf("kbridge runs on a port whose owner lives:\n%s", refused.Log)
	}
	want := fmt.Sprintf("port %s is served by kbridge pid %d", p.Name, other.Pid())
	if out := refused.Log.String(); refused.ExitCode() <= 0 || !strings.Contains(out, want) {
		t.Errorf("exit %v, want a non-zero exit saying %q:\n%s", refused.Err(), want, out)
	}

	p.Port.SetOwner(ringtest.OwnerValue(other.Pid(), start+1))
	k := env.NewKbridge(t, p)
	k.Ready()
	out := k.Log.String()
	if !strings.Contains(out, "taking the port over from a kbridge that is gone") ||
		!strings.Contains(out, fmt.Sprintf("previous_pid=%d", other.Pid())) ||
		!strings.Contains(out, "another start time") {
		t.Errorf("kbridge did not say it took over from the reused pid %d:\n%s", other.Pid(), out)
	}
	if got := p.Port.OwnerPID(); got != k.Pid() {
		t.Errorf("owner pid %d, want the new kbridge's %d", got, k.Pid())
	}
	k.Stop(true)
}

var owChildRE = regexp.MustCompile(`owholder: child=(\d+)`)

// owUnderHolder starts the test-hook build of kbridge for p, holding the
// next burst of direction hold (KBRIDGE_TEST_HOLD), as the child of a
// process that never reaps it (sh starts it in the background, then execs
// sleep, which never calls wait): killed, it stays a zombie until the holder
// ends. It returns the holder (whose log has kbridge's) and kbridge's pid,
// once kbridge answers on its control socket.
func owUnderHolder(t *testing.T, p *dpdkbed.Port, hold string) (*harness.Proc, int) {
	t.Helper()
	dir := t.TempDir()
	c := env.PortConfig(p)
	c.Sock = filepath.Join(dir, "kbridge.sock")
	cfg := filepath.Join(dir, "kbridge.yaml")
	c.Write(t, cfg)
	script := fmt.Sprintf("ip netns exec %s %s run --config %s & echo owholder: child=$!; exec sleep 600", env.NS, hookBin(t), cfg)
	holder := harness.StartSpec(t, "holder", harness.Spec{Env: []string{"KBRIDGE_TEST_HOLD=" + hold}}, "sh", "-c", script)
	var pid int
	harness.WaitUntil(t, "the holder to start kbridge", 5*time.Second, func() bool {
		m := owChildRE.FindStringSubmatch(holder.Log.String())
		if m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		return pid > 0
	})
	start := owStart(t, pid)
	// Registered after the holder's own: runs first. By pid, and only while
	// the pid is still that kbridge's (a zombie's too: SIGKILL is harmless).
	t.Cleanup(func() {
		if st, err := harness.ReadProcStat(pid); err == nil && st.Start == start {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	harness.WaitUntil(t, "kbridge to answer on "+c.Sock, 20*time.Second, func() bool {
		_, err := daemon.ReadStatus(c.Sock)
		return err == nil
	})
	if got := p.Port.OwnerPID(); got != pid {
		t.Fatalf("owner pid %d, want kbridge's %d:\n%s", got, pid, holder.Log)
	}
	return holder, pid
}

// owKillToZombie kills kbridge (SIGKILL) and waits until it is a zombie
// whose threads are all gone.
func owKillToZombie(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	harness.WaitProcState(t, pid, "Z")
	harness.WaitUntil(t, "the zombie's threads to be gone", 5*time.Second, func() bool {
		st, err := harness.ReadProcStat(pid)
		return err == nil && st.Threads <= 1
	})
}

// kbridge killed (-9) under a parent that does not reap it: a zombie is a
// dead owner. A new kbridge takes the port over (it refused with "stop it
// first" before) and frees what the dead one held; the zombie is still
// unreaped when it does.
func TestZombieOwnerIsTakenOver(t *testing.T) {
	p := env.NewPort(t)
	holder, pid := owUnderHolder(t, p, "out")
	owHoldBurst(t, p, holder.Log, 8)
	owKillToZombie(t, pid)

	next := env.NewKbridge(t, p)
	next.Ready()
	if st, err := harness.ReadProcStat(pid); err != nil || st.State != "Z" {
		t.Errorf("pid %d is no longer a zombie (%+v, %v): the test did not test a zombie", pid, st, err)
	}
	tookOver(t, p, next, pid, "a zombie", 8)
	next.Stop(true)
	p.Pool.Audit()
}

// The header's check: the port of a zombie owner is freed at once, with
// what the zombie held and its record.
func TestAppFreesPortOfZombieOwner(t *testing.T) {
	p := env.NewPort(t)
	holder, pid := owUnderHolder(t, p, "out")
	owHoldBurst(t, p, holder.Log, 8)
	owKillToZombie(t, pid)
	owFreedAtOnce(t, p, "a zombie owner")
	if st, err := harness.ReadProcStat(pid); err != nil || st.State != "Z" {
		t.Errorf("pid %d is no longer a zombie (%+v, %v): the test did not test a zombie", pid, st, err)
	}
}

// owPeerEnv names the port a peer process (this test binary run again, see
// TestMain) hands an eventfd for, as a DPDK secondary that is not its owner.
const owPeerEnv = "KBFT_WAKEUP_PEER"

// owPeerMain is that process: it joins the test's DPDK primary, opens the
// port without claiming it, sends an eventfd for queue 0 as kbridge would,
// and prints what the app answered.
func owPeerMain(port, filePrefix string) int {
	if err := ring.InitSecondary(ring.EALConfig{FilePrefix: filePrefix, CPU: 0}); err != nil {
		fmt.Println("owpeer: eal:", err)
		return 1
	}
	p, err := ring.OpenPort(port)
	if err != nil {
		fmt.Println("owpeer: open:", err)
		return 1
	}
	q, err := p.Queue(0)
	if err != nil {
		fmt.Println("owpeer: queue:", err)
		return 1
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		fmt.Println("owpeer: eventfd:", err)
		return 1
	}
	if err := q.RegisterEventfd(efd); err != nil {
		fmt.Printf("owpeer: pid %d: refused: %v\n", os.Getpid(), err)
		return 0
	}
	fmt.Printf("owpeer: pid %d: accepted\n", os.Getpid())
	return 0
}

// A DPDK secondary that is not the port's kbridge hands the app an eventfd
// for the served queue: the header refuses it (EPERM), the app keeps the
// owner's eventfd (same descriptor, same eventfd), and every kick still
// reaches the worker (interrupt mode, a one-minute park timeout).
func TestWakeupFromAnotherSecondaryIsRefused(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{Iface: "", YAML: "policy:\n  mode: interrupt\n  park_timeout: 1m\n"})
	harness.WaitUntil(t, "the app to get the worker's eventfd", 10*time.Second, func() bool {
		return b.Port.Counters(0).HaveEventfd
	})
	fd1 := b.Port.AppEventfd(0)
	id1 := rsEventfdID(t, os.Getpid(), fd1)
	rsPingPong(t, b, 0, 20)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), owPeerEnv+"="+b.Name, "KBFT_WAKEUP_PREFIX="+b.Env.Prefix)
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	if err != nil {
		t.Fatalf("the peer secondary failed: %v\n%s", err, out)
	}
	if !strings.Contains(out, "owpeer: pid ") || !strings.Contains(out, ": refused: ") ||
		!strings.Contains(out, unix.EPERM.Error()) {
		t.Fatalf("the app did not refuse the peer's eventfd with EPERM:\n%s", out)
	}

	if fd2 := b.Port.AppEventfd(0); fd2 != fd1 {
		t.Fatalf("the app's eventfd descriptor changed from %d to %d", fd1, fd2)
	}
	if id2 := rsEventfdID(t, os.Getpid(), fd1); id2 != id1 {
		t.Fatalf("the app's descriptor %d now is eventfd-id %d, not the owner's %d", fd1, id2, id1)
	}
	if !rsHoldsEventfd(t, b.Kb.Pid(), id1) {
		t.Fatalf("kbridge pid %d no longer holds the app's eventfd-id %d", b.Kb.Pid(), id1)
	}
	app1 := b.Port.Counters(0)
	rsPingPong(t, b, 100, 50)
	st, app2 := b.Status(), b.Port.Counters(0)
	if app2.Kicks == app1.Kicks || st.Timeouts != 0 {
		t.Errorf("after the refusal: %d kicks, %d park timeouts; want kicks and no timeout", app2.Kicks-app1.Kicks, st.Timeouts)
	}
	if d := st.TotalDrops(); d != 0 {
		t.Errorf("kbridge dropped %d frames: %v", d, st.Drops)
	}
}

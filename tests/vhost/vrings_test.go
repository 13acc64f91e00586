package vhost

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	vu "github.com/kbridge/kbridge/vhost/vhostusertest"
)

// TestVhostVringsInUseDoNotChange: a frontend changes what librte_vhost and
// kbridge's workers use. A vring whose rings are set takes no new size,
// base or address (librte_vhost would index the old rings with the new
// size: the reproduction below killed kbridge with a SIGSEGV 3.9 KiB past
// the frontend's memory), before the device starts or while it runs; a
// running device takes no second kick fd (librte_vhost closes the old one
// under the worker that dups it) and no new protocol features. Each is
// refused, logged and counted (refused_vrings), the frontend hung up on.
// A memfd truncated under the running device is mapped over with zeros
// where kbridge touches it (it died of SIGBUS), the frontend hung up on,
// counted (guest_memory_faults). kbridge stays alive, and a well-behaved
// frontend gets through after all of them.
func TestVhostVringsInUseDoNotChange(t *testing.T) {
	s := serve(t)
	b, kb, udp, wait, up, through := s.b, s.kb, s.udp, s.took, s.up, s.through
	const line = "vhost-user vring request refused"
	// refused checks that kbridge hung up on f, counted one more refused
	// vring request, logged why (naming what) and lives.
	refused := func(t *testing.T, f *vu.Frontend, before refusals, what string, running bool) {
		t.Helper()
		if !f.HungUp(5 * time.Second) {
			t.Errorf("kbridge did not hang up")
		}
		kb.CheckRunning(t)
		if after := b.refusals(t); after.Vrings != before.Vrings+1 {
			t.Errorf("refused_vrings %d -> %d, want +1", before.Vrings, after.Vrings)
		}
		got := lastLine(kb.Log.String(), line)
		if !strings.Contains(got, what) {
			t.Errorf("the refusal does not name %s: %q", what, got)
		}
		t.Log(got)
		if running {
			s.left(t)
		}
	}

	t.Run("a TX vring resized and rebased under the running device, its used ring near the end of memory", func(t *testing.T) {
		f := dial(t, b.sock)
		if err := f.Shared(); err != nil {
			t.Fatal(err)
		}
		if err := f.Vring(0); err != nil {
			t.Fatal(err)
		}
		// The TX vring's used ring 4 KiB before the end of guest memory:
		// room for 256 entries, not for 32768.
		tx := uint64(vu.Base + 0x4000)
		if err := f.VringAt(1, vu.RingSize, tx, tx+0x1000, vu.Base+vu.MemSize-0x1000); err != nil {
			t.Fatal(err)
		}
		wait(t)
		through(t, f, "before the resize")
		before := b.refusals(t)
		if err := f.SetVringNum(1, 32768, vu.Version); err != nil {
			t.Fatal(err)
		}
		// What followed in the reproduction, kbridge hanging up
		// meanwhile: a base past the old size and a head there. Until
		// the device is gone the worker serves the ring at its old
		// size, where every entry up to 1001 names the one frame.
		_ = f.SetVringBase(1, 1000)
		_ = f.PostAt(1, 1000, 0, 1001)
		refused(t, f, before, "SET_VRING_NUM for vring 1", true)
		received(udp, 500*time.Millisecond)
	})
	t.Run("a TX vring resized before the device starts", func(t *testing.T) {
		before := b.refusals(t)
		f := dial(t, b.sock)
		if err := f.Shared(); err != nil {
			t.Fatal(err)
		}
		if err := f.Vring(1); err != nil {
			t.Fatal(err)
		}
		if err := f.SetVringNum(1, 32768, vu.Version); err != nil {
			t.Fatal(err)
		}
		refused(t, f, before, "SET_VRING_NUM for vring 1", false)
	})
	t.Run("a second kick fd for the running device's TX vring", func(t *testing.T) {
		f := up(t)
		through(t, f, "before the second kick fd")
		before := b.refusals(t)
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(efd)
		if err := f.SetVringKick(1, efd); err != nil {
			t.Fatal(err)
		}
		refused(t, f, before, "SET_VRING_KICK for vring 1", true)
	})
	t.Run("new protocol features for the running device", func(t *testing.T) {
		f := up(t)
		before := b.refusals(t)
		if err := f.Send(vu.SetProtocolFeatures, vu.Version, vu.U64s(0)); err != nil {
			t.Fatal(err)
		}
		refused(t, f, before, "SET_PROTOCOL_FEATURES", true)
	})
	// truncated truncates f's running memory to nothing and kicks.
	truncated := func(t *testing.T, f *vu.Frontend) {
		t.Helper()
		through(t, f, "before the truncation")
		before := b.refusals(t)
		const shrank = "vhost-user guest memory shrank under kbridge"
		logged := strings.Count(kb.Log.String(), shrank)
		// From here on the frontend must not touch its own memory.
		if err := unix.Ftruncate(f.MemFd(), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Kick(1); err != nil {
			t.Fatal(err)
		}
		kb.WaitCountIn(t, shrank, logged+1, 10*time.Second)
		t.Log(lastLine(kb.Log.String(), shrank))
		if !f.HungUp(5 * time.Second) {
			t.Errorf("kbridge did not hang up")
		}
		s.left(t)
		kb.CheckRunning(t)
		if after := b.refusals(t); after.GuestMem <= before.GuestMem {
			t.Errorf("guest_memory_faults %d -> %d, want more", before.GuestMem, after.GuestMem)
		}
		if got := received(udp, 500*time.Millisecond); len(got) != 0 {
			t.Errorf("truncated memory delivered %q", got)
		}
	}
	for _, c := range []struct {
		name string
		dial func(string) (*vu.Frontend, error)
	}{
		{"guest memory (4 KiB pages) truncated under the running device", vu.Dial},
		{"guest memory (a 2 MiB huge page) truncated under the running device", vu.DialHuge},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := c.dial(b.sock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(f.Close)
			if _, err := f.Up(); err != nil {
				t.Fatal(err)
			}
			wait(t)
			truncated(t, f)
		})
	}
	s.finish(t, "after the vring changes")
}

// TestVhostStalledFrontend: a frontend sends a message's header and
// never its payload. librte_vhost reads the payload with a blocking read on
// the thread that serves every connection; kbridge bounds it (a receive
// timeout on each connection), so the stalled frontend is hung up on, a
// second frontend is served meanwhile, and kbridge exits on SIGTERM while
// another one stalls (it spun a core until the peer closed).
func TestVhostStalledFrontend(t *testing.T) {
	b := newBed(t, false)
	kb := b.kbridge()
	udp := listenUDP(t, dut)
	stall := func(t *testing.T) *vu.Frontend {
		t.Helper()
		f := dial(t, b.sock)
		if err := f.SendHeader(vu.GetFeatures, vu.Version, 8); err != nil {
			t.Fatal(err)
		}
		return f
	}

	t.Run("a second frontend is served while the first stalls", func(t *testing.T) {
		stalled := stall(t)
		f := dial(t, b.sock)
		if _, err := f.Up(); err != nil {
			t.Fatalf("the second frontend: %v\n%s", err, kb.Log)
		}
		kb.WaitCountIn(t, "vhost-user frontend connected", 1, 30*time.Second)
		if err := f.SendFrame(udpFrame("past the stalled one")); err != nil {
			t.Fatal(err)
		}
		if got := received(udp, 3*time.Second); len(got) != 1 || got[0] != "past the stalled one" {
			t.Fatalf("got %q\n%s", got, kb.Log)
		}
		if !stalled.HungUp(30 * time.Second) {
			t.Errorf("kbridge did not hang up on the stalled frontend")
		}
		f.Close()
		kb.WaitCountIn(t, "vhost-user frontend gone", 1, 10*time.Second)
	})
	t.Run("SIGTERM while a frontend stalls: kbridge exits", func(t *testing.T) {
		stall(t)
		kb.CheckRunning(t)
		kb.StopWait = time.Minute
		kb.Stop(true)
		if !strings.Contains(kb.Log.String(), "pool_in_use=0") {
			t.Errorf("mbufs still in use after stop:\n%s", kb.Log)
		}
		gone(t, b.sock)
	})
}

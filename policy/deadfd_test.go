package policy

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A watched fd that hangs up wakes one park, then parks last until their
// timeout instead of returning at once (no spin on a dead fd); a fd number
// that is healthy again (dup3 of a new file onto it) is watched again.
func TestParkOnDeadFdDoesNotSpin(t *testing.T) {
	r, wr, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWaiter(r)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	unix.Close(wr) // the read end now reports EPOLLHUP for ever
	if woken, err := w.Park(time.Second); err != nil || !woken {
		t.Fatalf("first park after the hang-up: woken %v, err %v; want woken", woken, err)
	}
	if !w.Lost() {
		t.Fatal("the hung-up fd is still watched")
	}
	start := time.Now()
	parks := 0
	for time.Since(start) < 50*time.Millisecond {
		if woken, err := w.Park(10 * time.Millisecond); err != nil || woken {
			t.Fatalf("park on a dead fd: woken %v, err %v; want a timeout", woken, err)
		}
		parks++
	}
	if parks > 6 {
		t.Fatalf("%d parks of 10ms in 50ms: the waiter spins on the dead fd", parks)
	}
	w.Kick()
	if woken, _ := w.Park(time.Second); !woken {
		t.Fatal("a kick did not wake a park with the fd out of the set")
	}

	// A new, healthy file in the same fd number is watched again.
	r2, wr2, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wr2)
	if err := unix.Dup3(r2, r, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	unix.Close(r2)
	defer unix.Close(r)
	if woken, _ := w.Park(time.Millisecond); woken {
		t.Fatal("park woke with nothing to read")
	}
	if w.Lost() {
		t.Fatal("the healthy fd was not watched again")
	}
	if _, err := writeByte(wr2); err != nil {
		t.Fatal(err)
	}
	if woken, _ := w.Park(time.Second); !woken {
		t.Fatal("data on the re-watched fd did not wake the park")
	}
}

// A new file put in the watched fd number while no park ran (a busy
// worker: dup3 closed the old file before any park saw its error, so its
// epoll entry vanished without an event) is watched from the next park
// once Follow's counter moved. Without Follow the park would sleep through
// data on the new file until its timeout.
func TestParkFollowsASwapNoParkSaw(t *testing.T) {
	r, wr, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wr)
	w, err := NewWaiter(r)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var gen uint64
	w.Follow(func() uint64 { return gen })

	r2, wr2, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wr2)
	if err := unix.Dup3(r2, r, unix.O_CLOEXEC); err != nil { // the old file closes: its entry goes
		t.Fatal(err)
	}
	unix.Close(r2)
	defer unix.Close(r)
	gen++
	if _, err := writeByte(wr2); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if woken, err := w.Park(time.Second); err != nil || !woken {
		t.Fatalf("data on the swapped-in file: woken %v, err %v after %v; want woken at once", woken, err, time.Since(start))
	}
	if w.Rewatches() != 1 || w.Lost() {
		t.Fatalf("rewatches %d, lost %v; want 1, false", w.Rewatches(), w.Lost())
	}
	// The counter did not move again: no second re-add.
	var b [1]byte
	_, _ = unix.Read(r, b[:])
	if woken, _ := w.Park(time.Millisecond); woken || w.Rewatches() != 1 {
		t.Fatalf("an idle park: woken %v, rewatches %d; want a timeout and still 1", woken, w.Rewatches())
	}
}

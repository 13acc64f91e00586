package policy

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestWaiterWatchUnwatch(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	defer unix.Close(p[0])
	kick, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(kick)
	w, err := NewWaiter(p[0])
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Watch(kick); err != nil {
		t.Fatal(err)
	}
	one := [8]byte{1}
	_, _ = unix.Write(kick, one[:])
	if woken, err := w.Park(time.Second); err != nil || !woken {
		t.Fatalf("Park with a watched fd readable = %v, %v", woken, err)
	}
	if err := w.Unwatch(kick); err != nil {
		t.Fatal(err)
	}
	// Still readable (the waker drains it, not the waiter), but unwatched.
	if woken, err := w.Park(time.Millisecond); err != nil || woken {
		t.Fatalf("Park after Unwatch = %v, %v", woken, err)
	}
}

// Package bridge is kbridge's engine: one worker per queue pair moves bursts
// between the app's rings and the kernel's TAP device, counts what it drops
// and waits through a policy.Waiter when both sides are idle.
//
// The engine sees the app's side through the small AppOut and AppIn
// interfaces (implemented over DPDK by package ring, and by fakes in
// bridgetest) and the kernel's side as a non-blocking file descriptor.
package bridge

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Verdicts for packets from the app that cannot be written whole.
var (
	ErrTooManySegments = errors.New("bridge: packet has more segments than a write takes")
	ErrMalformed       = errors.New("bridge: packet length disagrees with its segments")
)

// AppOut yields the packets the app sends toward the kernel, a burst at a
// time. The packets of a burst stay valid until the next call of Next.
type AppOut interface {
	// Next releases (frees) the previous burst and returns the size of the
	// next one, possibly 0.
	Next() int
	// Packet returns packet i of the current burst as segments, or why it
	// cannot be written whole (ErrTooManySegments, ErrMalformed).
	Packet(i int) (length int, segs []unix.Iovec, err error)
	// Written marks packet i as delivered to the kernel.
	Written(i int)
	// Pending returns how many packets wait to be dequeued.
	Pending() int
	// Close releases the current burst and the reader.
	Close()
}

// AppIn carries frames from the kernel to the app, a burst at a time.
type AppIn interface {
	// Cap returns the number of slots in a burst.
	Cap() int
	// Slot returns the buffer of slot i; a frame is read into it.
	Slot(i int) []byte
	// Put queues slots 0..len(lens)-1, holding frames of those lengths.
	Put(lens []int) PutResult
	// Close releases the writer.
	Close()
}

// PutResult says what became of the frames given to AppIn.Put.
type PutResult struct {
	Queued   int // on the ring, now the app's
	NoMbuf   int // dropped: the app's mempool was empty
	RingFull int // dropped: the app does not dequeue fast enough
}

// Waker is the app's side of the need-wakeup handshake for one queue.
type Waker interface {
	// SetNeedWakeup publishes that the worker parks (true) or runs. Setting
	// it must be a full memory fence.
	SetNeedWakeup(parked bool)
	// RegisterEventfd hands the eventfd the app should write to wake the
	// worker. An error means the app will never kick.
	RegisterEventfd(fd int) error
}

package policy

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Waiter carries out a worker's sleeps and parks on its locked OS thread:
// epoll on {the TAP fd, an eventfd, fds added with Watch} for parks,
// clock_nanosleep with 1 ns timer slack for sleeps. It is the gVisor fdbased pattern: a non-blocking fd
// and an eventfd to stop.
type Waiter struct {
	epfd      int
	ep        *os.File        // epfd in the runtime's netpoller, where an idle park waits
	epc       syscall.RawConn // ep's
	ready     func(uintptr) bool
	n         uintptr // ready's result: the events it took, and its error
	errno     unix.Errno
	evfd      int
	fd        int           // the watched fd
	lost      bool          // fd reported an error or hang-up and is out of the epoll set
	gen       func() uint64 // Follow's: counts new files put in fd's number
	seen      uint64        // gen's value when fd was last added
	rewatches uint64
	visible   uint64 // parks that went on in a syscall the runtime sees
	events    [4]unix.EpollEvent
	drain     [8]byte
}

// NewWaiter returns a waiter watching fd (readable) and its own eventfd.
func NewWaiter(fd int) (*Waiter, error) {
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("policy: eventfd: %w", err)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(evfd)
		return nil, fmt.Errorf("policy: epoll_create1: %w", err)
	}
	// An epoll fd is readable while any fd it watches is ready, so the
	// runtime's netpoller can wait on it as on a socket (non-blocking:
	// os.NewFile registers it there). A park that outlasts RawPark waits
	// there: the goroutine holds no P and is in no syscall, so sysmon has
	// nothing to retake and the runtime nothing to wake for it.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(evfd)
		unix.Close(epfd)
		return nil, fmt.Errorf("policy: epoll fd non-blocking: %w", err)
	}
	w := &Waiter{epfd: epfd, evfd: evfd, fd: fd, ep: os.NewFile(uintptr(epfd), "epoll")}
	w.ready = w.takeEvents // made once: a park allocates nothing
	for _, f := range []int{fd, evfd} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(f)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, f, &ev); err != nil {
			w.Close()
			return nil, fmt.Errorf("policy: epoll_ctl add fd %d: %w", f, err)
		}
	}
	epc, err := w.ep.SyscallConn()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("policy: epoll fd: %w", err)
	}
	w.epc = epc
	return w, nil
}

// Watch adds fd (readable) to what Park waits on. A Waker whose app kicks
// through a descriptor of its own (vhost-user's kick eventfd) uses it; the
// waker drains that descriptor itself.
func (w *Waiter) Watch(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("policy: epoll_ctl add fd %d: %w", fd, err)
	}
	return nil
}

// Unwatch removes fd added by Watch. Call it before closing fd: epoll keeps
// watching a file that is still open through another descriptor.
func (w *Waiter) Unwatch(fd int) error {
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil); err != nil {
		return fmt.Errorf("policy: epoll_ctl del fd %d: %w", fd, err)
	}
	return nil
}

// Follow makes every park first compare gen with its value when the fd was
// last added to the epoll set, and add the fd again when it moved. gen
// counts the files put in the watched fd's number with dup3 (tap's keeper
// does that under a running worker when a deleted interface is made
// again). It is needed because epoll watches a file, not a number: when
// dup3 closes the old file before any park saw its error (a busy worker),
// its epoll entry vanishes without an event (so no park marks the fd
// lost), and the new file would never be watched. Call Follow before the first Park.
func (w *Waiter) Follow(gen func() uint64) {
	w.gen = gen
	w.seen = gen()
}

// Rewatches counts the times Park added the fd again after Follow's counter
// moved (for tests; the worker's thread only).
func (w *Waiter) Rewatches() uint64 { return w.rewatches }

// RawPark is how long a park stays in a raw syscall before it goes on in
// one the runtime sees (Park): under the 10 ms after which sysmon preempts
// a goroutine it thinks runs, and longer than the gaps of traffic that
// keeps a worker busy.
const RawPark = 2 * time.Millisecond

// rawPark is RawPark but in the benchmark that measures it against a park
// that stays raw (BenchmarkIdleWorkers).
var rawPark = RawPark

// VisibleParks counts the parks that outlasted RawPark (for tests; the
// worker's thread only).
func (w *Waiter) VisibleParks() uint64 { return w.visible }

// EventFD returns the eventfd that wakes a parked worker when written.
func (w *Waiter) EventFD() int { return w.evfd }

// Kick wakes the worker from a park.
func (w *Waiter) Kick() {
	one := [8]byte{1}
	_, _ = unix.Write(w.evfd, one[:])
}

// Park blocks until the watched fd is readable, the eventfd is kicked, or
// timeout passes. It reports whether something woke it before the timeout.
//
// A watched fd that reports EPOLLERR or EPOLLHUP (a TAP whose interface was
// deleted reports EPOLLERR for ever, level-triggered) wakes one park and is
// then taken out of the set, so that later parks last until a kick or their
// timeout instead of returning at once: a dead fd never makes a spin. Each
// later park first checks, with a zero-timeout poll, whether the fd number
// is healthy again (the daemon put a new interface's queue in its place
// with dup3) and watches it again if so.
//
// With Follow, a park after the fd number got a new file watches the new
// file whether or not an error was seen first (see Follow).
func (w *Waiter) Park(timeout time.Duration) (bool, error) { return w.park(timeout, rawPark) }

// ParkIdle is Park without the raw part: for a worker that found no work
// after a whole park (Ladder.Idle), whose next frame is as likely to come
// in the next RawPark as at any other time. It waits in the netpoller
// from the start, holding no P, and so lets sysmon sleep. A park no longer
// than RawPark stays raw: the netpoller's timeouts are not that precise.
func (w *Waiter) ParkIdle(timeout time.Duration) (bool, error) {
	if timeout <= rawPark {
		return w.park(timeout, rawPark)
	}
	return w.park(timeout, 0)
}

// park is Park with raw for RawPark.
func (w *Waiter) park(timeout, raw time.Duration) (bool, error) {
	if w.gen != nil {
		if g := w.gen(); g != w.seen {
			w.seen = g
			w.rewatches++
			// The old file's entry went when dup3 closed it (or
			// with unwatch, if a park saw its error first); DEL
			// clears any left, and rewatch adds the file there now
			// once a poll shows it healthy.
			_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
			w.lost = true
		}
	}
	if w.lost {
		w.rewatch()
	}
	start := time.Now()
	deadline := start.Add(timeout)
	for first := true; ; first = false {
		rest := time.Until(deadline)
		if rest <= 0 && !first {
			return false, nil
		}
		// The first RawPark of a park is a raw syscall, which the
		// runtime does not see: a locked worker never passes through
		// the scheduler, so after its first 10 ms sysmon holds it
		// overdue for preemption, and through syscall.Syscall6 it took
		// the P from every park (a syscall it could see) and handed it
		// to a thread woken to look for work, the worker taking one
		// back after: thousands of futexes, sysmon wakeups and context
		// switches a second under traffic. Parked raw, the goroutine
		// keeps its P (PrepareThread leaves the program another).
		// A park that outlasts RawPark is an idle worker's: it goes on
		// in the runtime's netpoller (idle), which gives the P up once
		// and sleeps without sysmon's preemption signal every 10 ms.
		// A blocking syscall there instead (Syscall6) woke sysmon on
		// every park and had it retake the P 10 ms later: an idle
		// kbridge with 64 ports spent 4-5 % of a core so
		// (docs/runs/2026-12-07-64-knis.md).
		if time.Since(start) >= raw {
			w.visible++
			return w.idle(deadline)
		}
		d := min(rest, raw-time.Since(start))
		ts := unix.NsecToTimespec(int64(max(d, 0)))
		n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT2, uintptr(w.epfd),
			uintptr(unsafe.Pointer(&w.events[0])), uintptr(len(w.events)),
			uintptr(unsafe.Pointer(&ts)), 0, 0)
		switch {
		case errno == unix.EINTR:
			// A signal, for a running goroutine most likely the
			// runtime's preemption: its 10 ms time slice, or a
			// stop-the-world or a stack scan waiting for this P. A
			// raw syscall returns to no preemption check, so yield
			// here for it, then park for what is left.
			runtime.Gosched()
			continue
		case errno != 0:
			return false, fmt.Errorf("policy: epoll_pwait2: %w", errno)
		}
		if n == 0 {
			continue // the raw part ended, or the timeout: the loop decides
		}
		w.handle(int(n))
		return true, nil
	}
}

// idle is the rest of a park, up to deadline, in the runtime's netpoller:
// the goroutine blocks until the epoll fd is readable (the runtime's own
// epoll watches it), and its thread sleeps until then.
func (w *Waiter) idle(deadline time.Time) (bool, error) {
	if err := w.ep.SetReadDeadline(deadline); err != nil {
		return false, fmt.Errorf("policy: park deadline: %w", err)
	}
	err := w.epc.Read(w.ready)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("policy: park: %w", err)
	case w.errno != 0:
		return false, fmt.Errorf("policy: epoll_pwait2: %w", w.errno)
	}
	w.handle(int(w.n))
	return true, nil
}

// takeEvents takes what the epoll set has ready, without waiting: false
// (nothing) makes the netpoller wait for the epoll fd to be readable.
func (w *Waiter) takeEvents(uintptr) bool {
	var zero unix.Timespec
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT2, uintptr(w.epfd),
			uintptr(unsafe.Pointer(&w.events[0])), uintptr(len(w.events)),
			uintptr(unsafe.Pointer(&zero)), 0, 0)
		if errno == unix.EINTR {
			continue
		}
		w.n, w.errno = n, errno
		return n > 0 || errno != 0
	}
}

// handle acts on the n events a park took: it drains the eventfd, and
// takes the watched fd out of the set when it reports an error.
func (w *Waiter) handle(n int) {
	for i := range n {
		switch {
		case w.events[i].Fd == int32(w.evfd):
			_, _, _ = unix.RawSyscall(unix.SYS_READ, uintptr(w.evfd),
				uintptr(unsafe.Pointer(&w.drain[0])), uintptr(len(w.drain)))
		case w.events[i].Fd == int32(w.fd) && w.events[i].Events&(unix.EPOLLERR|unix.EPOLLHUP) != 0:
			w.unwatch() // fds added with Watch are their waker's to handle
		}
	}
}

// unwatch takes the watched fd out of the epoll set. ENOENT is fine: the fd
// number may already hold a new, unwatched file.
func (w *Waiter) unwatch() {
	_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
	w.lost = true
}

// rewatch puts the watched fd back in the epoll set once a zero-timeout
// poll shows it without error or hang-up.
func (w *Waiter) rewatch() {
	p := [1]unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(p[:], 0); err != nil || (n > 0 && p[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0) {
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(w.fd)}
	err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, w.fd, &ev)
	if err == nil || err == unix.EEXIST {
		w.lost = false
	}
}

// Lost reports whether the watched fd is out of the epoll set after an
// error or hang-up (for tests and diagnostics; the worker's thread only).
func (w *Waiter) Lost() bool { return w.lost }

// Sleep sleeps d on the calling thread with the precision PrepareThread set.
func (w *Waiter) Sleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, 0, &ts, &ts) == unix.EINTR {
	}
}

// Close releases the epoll fd and the eventfd.
func (w *Waiter) Close() error {
	return errors.Join(w.ep.Close(), unix.Close(w.evfd))
}

// PrepareThread locks the calling goroutine to its OS thread, sets the
// thread's timer slack to 1 ns (the default 50 us turns a 5 us sleep into
// about 85 us) and, when cpu >= 0, pins the thread to that CPU. It also
// raises GOMAXPROCS, when below, to one more than the threads prepared: a
// parked worker keeps its P (Park), so the rest of the program needs one of
// its own, or its goroutines (the control socket, the watchdog, the
// collector) would run only when the runtime preempts a worker. The caller
// calls ReleaseThread when its loop ends, whether or not this failed.
func PrepareThread(cpu int) error {
	runtime.LockOSThread()
	reserveP()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("policy: set timer slack: %w", err)
	}
	if cpu >= 0 {
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("policy: pin worker to CPU %d: %w", cpu, err)
		}
	}
	return nil
}

// ReleaseThread undoes PrepareThread's lock and its count. GOMAXPROCS stays
// where it was raised: a spare P costs nothing while idle.
func ReleaseThread() {
	prepared.Lock()
	prepared.n--
	prepared.Unlock()
	runtime.UnlockOSThread()
}

// prepared counts the threads between PrepareThread and ReleaseThread.
var prepared struct {
	sync.Mutex
	n int
}

func reserveP() {
	prepared.Lock()
	defer prepared.Unlock()
	prepared.n++
	if runtime.GOMAXPROCS(0) <= prepared.n {
		runtime.GOMAXPROCS(prepared.n + 1)
	}
}

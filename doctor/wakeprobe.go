package doctor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// WakeupPlan says what the wakeup probe measures: an eventfd written on
// From wakes a thread parked in epoll_wait on each of To in turn, after
// Gap of idling, for at most Budget in all.
type WakeupPlan struct {
	From   int           `json:"from"`
	To     []int         `json:"to"`
	Gap    time.Duration `json:"gap_ns"`
	Budget time.Duration `json:"budget_ns"`
}

// WakeupStats sums up one set of wakeups: the time from the eventfd
// write to the woken thread running.
type WakeupStats struct {
	Samples int           `json:"samples"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Max     time.Duration `json:"max_ns"`
	// Over1ms counts the wakeups that took longer than a millisecond: a
	// jiffy at HZ=1000, a round trip's worth on its own.
	Over1ms int `json:"over_1ms"`
}

// WakeupReport is what the probe measured.
type WakeupReport struct {
	Plan WakeupPlan `json:"plan"`
	// Cross is From waking To: an IPI to a CPU that went idle, as the app
	// wakes a parked worker.
	Cross WakeupStats `json:"cross"`
	// Same is the same wakeup with writer and waiter on To[0]: no IPI, no
	// idle exit, the floor of an eventfd wakeup on this host.
	Same WakeupStats `json:"same"`
	// StealPct is the CPU time the hypervisor stole over the probe, in
	// percent of all CPUs' time (/proc/stat); -1 when unknown.
	StealPct float64 `json:"steal_pct"`
	// IdlePct is the idle share of the To CPUs over the probe: near 100,
	// every wakeup was from idle; lower, other tasks ran there too.
	IdlePct float64 `json:"idle_pct"`
}

// WakeupProber measures what waking a parked worker costs. The live
// implementation is LiveWakeupProbe; tests give fixed reports.
type WakeupProber interface {
	ProbeWakeup(ctx context.Context, p WakeupPlan) (WakeupReport, error)
}

// Errors of the wakeup probe.
var (
	// ErrProbeLost is a wakeup that did not arrive within the probe's bound.
	ErrProbeLost = errors.New("wakeup lost")
	// ErrPin is a CPU the probe may not run on (outside its cpuset).
	ErrPin = errors.New("cannot run on that CPU")
)

// LiveWakeupProbe measures on this host. It needs no privilege: pinning
// a thread to a CPU in its own affinity mask is allowed to anyone.
//
// Why Go and not a C helper: each side is a goroutine locked to its OS
// thread, pinned with sched_setaffinity, that only makes raw syscalls
// (nanosleep, write, epoll_wait) and reads the vDSO clock, so the Go
// scheduler is not on the measured path (no netpoller, no timers, no
// allocation). Measured side by side with a C pthread version on the test
// bed (docs/DOCTOR.md), the distributions matched within the run-to-run
// noise, so doctor stays free of cgo.
type LiveWakeupProbe struct{}

// wakeupSpan bounds one wakeup: a sample slower than this is reported
// as lost rather than waited for, which keeps the probe within its
// budget even when a waiter never runs.
const wakeupSpan = 250 * time.Millisecond

// ProbeWakeup spends up to three quarters of the budget on From -> To and
// the rest on the same wakeup within To[0], the floor it is read against.
func (LiveWakeupProbe) ProbeWakeup(ctx context.Context, p WakeupPlan) (WakeupReport, error) {
	rep := WakeupReport{Plan: p, StealPct: -1, IdlePct: -1}
	if len(p.To) == 0 {
		return rep, errors.New("wakeup probe: no CPU to wake")
	}
	if p.Gap <= 0 || p.Budget < p.Gap {
		return rep, fmt.Errorf("wakeup probe: gap %v and budget %v leave no wakeup", p.Gap, p.Budget)
	}
	before, errStat := readProcStat("/proc/stat")
	start := time.Now()
	crossEnd := start.Add(p.Budget * 3 / 4)
	var err error
	if targets := slices.DeleteFunc(slices.Clone(p.To), func(c int) bool { return c == p.From }); len(targets) > 0 {
		rep.Cross, err = pingPong(ctx, p.From, targets, p.Gap, crossEnd)
		if err != nil {
			return rep, fmt.Errorf("wakeup probe CPU %d -> %v: %w", p.From, targets, err)
		}
	}
	rep.Same, err = pingPong(ctx, p.To[0], p.To[:1], p.Gap, start.Add(p.Budget))
	if err != nil {
		return rep, fmt.Errorf("wakeup probe on CPU %d: %w", p.To[0], err)
	}
	if after, err := readProcStat("/proc/stat"); err == nil && errStat == nil {
		rep.StealPct, rep.IdlePct = after.since(before, p.To)
	}
	return rep, nil
}

// pingPong wakes a waiter pinned on each of to in turn from a writer
// pinned on from, sleeping gap before each wakeup, until end.
func pingPong(ctx context.Context, from int, to []int, gap time.Duration, end time.Time) (WakeupStats, error) {
	ack, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return WakeupStats{}, fmt.Errorf("eventfd: %w", err)
	}
	defer unix.Close(ack)
	ackEp, err := epollOn(ack)
	if err != nil {
		return WakeupStats{}, err
	}
	defer unix.Close(ackEp)

	var stop atomic.Bool
	var wokeAt atomic.Int64 // nanoseconds since base, written by the waiter
	base := time.Now()
	waiters := make([]*waiter, len(to))
	var wg sync.WaitGroup
	defer func() {
		stop.Store(true)
		for _, w := range waiters {
			if w != nil {
				w.kick() // a parked waiter sees stop and exits
			}
		}
		wg.Wait()
		for _, w := range waiters {
			if w != nil {
				w.close()
			}
		}
	}()
	ready := make(chan error, len(to))
	for i, cpu := range to {
		w, err := newWaiter()
		if err != nil {
			return WakeupStats{}, err
		}
		waiters[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(cpu, ack, base, &wokeAt, &stop, ready)
		}()
	}
	for range to {
		if err := <-ready; err != nil {
			return WakeupStats{}, err
		}
	}

	// The writer runs on a locked, pinned thread; the goroutine exits
	// locked, so Go retires the thread instead of reusing its affinity.
	type result struct {
		d   []time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := pin(from); err != nil {
			done <- result{err: err}
			return
		}
		d := make([]time.Duration, 0, max(int(time.Until(end)/gap), 0)+1)
		var buf [8]byte
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		events := make([]unix.EpollEvent, 1)
		gapTS := unix.NsecToTimespec(int64(gap))
		for i := 0; ctx.Err() == nil && time.Until(end) > gap; i++ {
			_ = unix.Nanosleep(&gapTS, nil) // EINTR only shortens one gap
			w := waiters[i%len(waiters)]
			t0 := time.Since(base)
			if _, err := unix.Write(w.efd, one); err != nil {
				done <- result{err: fmt.Errorf("eventfd write: %w", err)}
				return
			}
			if err := waitFd(ackEp, events, wakeupSpan); err != nil {
				done <- result{d: d, err: err}
				return
			}
			if _, err := unix.Read(ack, buf[:]); err != nil {
				done <- result{err: fmt.Errorf("eventfd read: %w", err)}
				return
			}
			d = append(d, time.Duration(wokeAt.Load())-t0)
		}
		done <- result{d: d}
	}()
	res := <-done
	if res.err != nil {
		return WakeupStats{}, res.err
	}
	return summarizeWakeups(res.d), nil
}

// waiter is one parked thread: it sleeps in epoll_wait on its eventfd as
// a parked kbridge worker does.
type waiter struct {
	efd, ep int
}

func newWaiter() (*waiter, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ep, err := epollOn(efd)
	if err != nil {
		unix.Close(efd)
		return nil, err
	}
	return &waiter{efd: efd, ep: ep}, nil
}

func (w *waiter) kick() {
	_, _ = unix.Write(w.efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
}

func (w *waiter) close() {
	unix.Close(w.ep)
	unix.Close(w.efd)
}

// run parks in epoll_wait until kicked, stamps the time it ran, drains
// the eventfd and acknowledges, until stop. The epoll timeout only bounds
// how long a waiter outlives a writer that failed.
func (w *waiter) run(cpu, ack int, base time.Time, wokeAt *atomic.Int64, stop *atomic.Bool, ready chan<- error) {
	runtime.LockOSThread()
	if err := pin(cpu); err != nil {
		ready <- err
		return
	}
	ready <- nil
	events := make([]unix.EpollEvent, 1)
	var buf [8]byte
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	for !stop.Load() {
		n, err := unix.EpollWait(w.ep, events, int(wakeupSpan/time.Millisecond))
		if n <= 0 || err != nil {
			continue
		}
		wokeAt.Store(int64(time.Since(base)))
		_, _ = unix.Read(w.efd, buf[:])
		if stop.Load() {
			return
		}
		_, _ = unix.Write(ack, one)
	}
}

func epollOn(fd int) (int, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("epoll_create1: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(ep)
		return -1, fmt.Errorf("epoll_ctl: %w", err)
	}
	return ep, nil
}

// waitFd waits for ep to be readable for at most span.
func waitFd(ep int, events []unix.EpollEvent, span time.Duration) error {
	deadline := time.Now().Add(span)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("no wakeup within %v: %w", span, ErrProbeLost)
		}
		n, err := unix.EpollWait(ep, events, int(left/time.Millisecond)+1)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return fmt.Errorf("epoll_wait: %w", err)
		case n > 0:
			return nil
		}
	}
}

// pin binds the calling thread (locked by the caller) to one CPU.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin thread %d to CPU %d: %w: %w", unix.Gettid(), cpu, ErrPin, err)
	}
	return nil
}

// summarizeWakeups sorts d and returns its percentiles (nearest rank).
func summarizeWakeups(d []time.Duration) WakeupStats {
	s := WakeupStats{Samples: len(d)}
	if len(d) == 0 {
		return s
	}
	slices.Sort(d)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p * float64(len(d))))
		return d[min(max(i, 1), len(d))-1]
	}
	s.P50, s.P99, s.Max = rank(0.50), rank(0.99), d[len(d)-1]
	for _, x := range d {
		if x > time.Millisecond {
			s.Over1ms++
		}
	}
	return s
}

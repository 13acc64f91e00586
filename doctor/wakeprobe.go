package doctor

/*
#include "wakeprobe.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"syscall"
	"time"
	"unsafe"
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
// Why C (wakeprobe.c) and not Go: a Go version (goroutines locked to
// pinned threads, raw nanosleep, write and epoll_wait, the vDSO clock)
// matched a C pthread ping-pong across CPUs, but within one CPU, the
// floor the cross-CPU figure is read against, it measured 5-22 us at the
// median and 64-397 us at p99 where C measured 2-10 and 6-152, interleaved
// on the test bed: the runtime's syscall entry and exit and its other
// threads sit on the measured path. Plain threads carry nothing but the
// wakeup.
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
// pinned on from, sleeping gap before each wakeup, until end. The C call
// cannot be cancelled; it is bounded by end and one wakeupSpan.
func pingPong(ctx context.Context, from int, to []int, gap time.Duration, end time.Time) (WakeupStats, error) {
	if err := ctx.Err(); err != nil {
		return WakeupStats{}, err
	}
	run := time.Until(end)
	most := int(run / gap)
	if most <= 0 {
		return WakeupStats{}, nil
	}
	cpus := make([]C.int, len(to))
	for i, c := range to {
		cpus[i] = C.int(c)
	}
	out := make([]int64, most)
	n := C.kb_wake_probe(C.int(from), &cpus[0], C.int(len(cpus)), C.int64_t(gap), C.int64_t(run),
		C.int64_t(wakeupSpan), (*C.int64_t)(unsafe.Pointer(&out[0])), C.int(most))
	switch errno := syscall.Errno(-n); {
	case n >= 0:
	case errno == syscall.ETIMEDOUT:
		return WakeupStats{}, fmt.Errorf("no wakeup within %v: %w", wakeupSpan, ErrProbeLost)
	case errno == syscall.EINVAL:
		return WakeupStats{}, fmt.Errorf("CPU %d or %v: %w: %w", from, to, ErrPin, errno)
	default:
		return WakeupStats{}, fmt.Errorf("ping-pong: %w", errno)
	}
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = time.Duration(out[i])
	}
	return summarizeWakeups(d), nil
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

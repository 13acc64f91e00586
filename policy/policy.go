// Package policy decides how a kbridge worker waits when it has nothing to
// move, and carries that wait out precisely.
//
// Ladder is a pure state machine that turns a mode (busy, adaptive,
// interrupt, fixed) into steps: given what the last poll moved (and how
// much of it the policers freed), and when, it returns the next Step (Poll,
// Yield, Sleep, Park or PolicedSleep).
// It has no clock of its own, so tests drive it with a fake one. Waiter
// carries a Step out: a park waits in epoll_pwait2, with a nanosecond
// timeout, on the kernel side's fd, an eventfd the app kicks and any
// descriptor a waker adds with Watch, and past RawPark in Go's netpoller
// on that epoll set; a sleep is a clock_nanosleep on a
// thread that PrepareThread has locked, pinned and given a 1 ns timer slack.
// A Policy validates itself, naming the policy.* key of a bad value.
//
// KNI's kernel thread slept one jiffy between polls (4 ms at HZ=250); not
// sleeping at all burned a core. No wait here is jiffy-granular and none
// uses Go's timers, which round short sleeps up to about a millisecond. See
// docs/ARCHITECTURE.md, "The policy ladder".
package policy

import (
	"slices"
	"time"

	"github.com/kbridge/kbridge/internal/conferr"
)

// Mode names a polling policy.
type Mode string

// The modes. See docs/ARCHITECTURE.md, "The policy ladder".
const (
	// Busy never parks: lowest latency, one full core.
	Busy Mode = "busy"
	// Adaptive polls for Spin after the last packet, yielding the CPU to
	// anything runnable between polls, then sleeps Backoff.Min, doubling up
	// to Backoff.Max (if Max > 0), then parks.
	Adaptive Mode = "adaptive"
	// Interrupt parks whenever both sides are empty.
	Interrupt Mode = "interrupt"
	// Fixed sleeps Interval after every poll, busy or not: KNI's
	// behaviour, kept only to reproduce it (4ms = HZ 250, 1ms = HZ 1000).
	Fixed Mode = "fixed"
)

// Modes lists the valid modes.
var Modes = []Mode{Busy, Adaptive, Interrupt, Fixed}

// Policy is one queue's polling policy.
type Policy struct {
	Mode Mode `mapstructure:"mode" json:"mode"`
	// Spin is how long adaptive keeps polling after the last packet.
	Spin time.Duration `mapstructure:"spin" json:"spin"`
	// Learn makes adaptive spin only while it pays: while most recent idle
	// gaps (last packet to next packet) ended within twice Spin
	// (hitFactor). After gaps that outlast that (NFS requests that wait on the server, say), the worker
	// parks at once instead of spinning on a CPU the workload needs, and
	// spins again once gaps shorten.
	Learn bool `mapstructure:"learn" json:"learn"`
	// Backoff bounds adaptive's precise sleeps between spinning and
	// parking; Max 0 turns them off (spin, then park).
	Backoff Backoff `mapstructure:"backoff" json:"backoff"`
	// Interval is fixed mode's sleep.
	Interval time.Duration `mapstructure:"interval" json:"interval"`
	// ParkTimeout bounds the first park after work; each further park
	// with no work between doubles it, up to IdleParkMax (or ParkTimeout
	// when that is longer). It only matters when a wakeup is lost; when
	// the app cannot kick at all, parks are bounded by Backoff.Max.
	ParkTimeout time.Duration `mapstructure:"park_timeout" json:"park_timeout"`
	// PolicedSleep is how long, at most, a worker whose polls since its
	// last wait moved mostly frames the policers freed waits, unkicked by
	// the app (the kernel's frames still end it), instead of spinning or
	// parking: a policed flood then costs a wakeup per wait, not one per
	// few frames. A flood fast enough to bring more than a batch of
	// frames (policedBatch) in that time gets a shorter wait. 0 turns it
	// off.
	PolicedSleep time.Duration `mapstructure:"policed_sleep" json:"policed_sleep"`
}

// Backoff is adaptive mode's sleep ladder.
type Backoff struct {
	Min time.Duration `mapstructure:"min" json:"min"`
	Max time.Duration `mapstructure:"max" json:"max"`
}

// Default returns the default policy: adaptive.
func Default() Policy {
	return Policy{
		Mode: Adaptive,
		// Measured on the test bed (docs/runs/2026-11-30-first-runs.md): a
		// short spin that yields, then a park the app's kick ends; the
		// backoff waits only added timer wakeups on the CPU the workload
		// needs (NFS 4-15% slower), so it is off by default. Learn is off
		// too: in the same runs it bought cold round trips, and the rest
		// moved within the machine's noise, both ways
		// (docs/runs/2026-11-30-latency-vs-testpmd.md).
		Spin:        20 * time.Microsecond,
		Backoff:     Backoff{},
		Interval:    4 * time.Millisecond,
		ParkTimeout: 100 * time.Millisecond,
		// A policed flood's frames batch for up to this long (what a
		// control frame among them may wait), so that kbridge's CPU
		// follows the rate it writes, not the rate offered: at 50us a
		// flood of 200k frames/s from the NIC cost 27-32 % of a core,
		// at 500us 8.4-8.7 % (docs/runs/2026-12-03-copp-cpu-bound.md,
		// docs/runs/2026-12-07-copp-nic.md).
		PolicedSleep: 500 * time.Microsecond,
	}
}

// Validate checks p and reports every problem at once. Each error is a
// *conferr.FieldError naming the configuration key under prefix (for
// example "policy.spin") and the offending value.
func (p Policy) Validate(prefix string) error {
	errs := conferr.Collector{Prefix: prefix}
	if !slices.Contains(Modes, p.Mode) {
		errs.Add("mode", p.Mode, "must be one of busy, adaptive, interrupt, fixed")
	}
	type bound struct {
		key      string
		v        time.Duration
		min, max time.Duration
	}
	for _, b := range []bound{
		{"spin", p.Spin, 0, time.Second},
		{"backoff.min", p.Backoff.Min, 0, time.Second},
		{"backoff.max", p.Backoff.Max, 0, time.Second},
		{"interval", p.Interval, time.Microsecond, 10 * time.Second},
		{"park_timeout", p.ParkTimeout, 10 * time.Microsecond, time.Minute},
		{"policed_sleep", p.PolicedSleep, 0, time.Millisecond},
	} {
		if b.v < b.min || b.v > b.max {
			errs.Addf(b.key, b.v, "must be between %v and %v", b.min, b.max)
		}
	}
	if p.Backoff.Max > 0 && p.Backoff.Min == 0 {
		errs.Addf("backoff.min", p.Backoff.Min, "must be above 0 when backoff.max (%v) is set (backoff.max: 0s turns the sleeps off)", p.Backoff.Max)
	}
	if p.Backoff.Max < p.Backoff.Min {
		errs.Addf("backoff.max", p.Backoff.Max, "must not be below backoff.min (%v)", p.Backoff.Min)
	}
	return errs.Err()
}

// IdleParkMax bounds a park after parks that found no work: an idle
// worker then wakes about once every IdleParkMax instead of every
// ParkTimeout (an idle kbridge serving dozens of ports wakes rarely), and
// a wakeup lost to a bug would delay a frame at most this long.
const IdleParkMax = 2 * time.Second

// StepKind says what a worker does next.
type StepKind uint8

const (
	// Poll means poll again at once.
	Poll StepKind = iota
	// Sleep means sleep Step.D precisely, without asking for a wakeup.
	Sleep
	// Park means publish need-wakeup, re-check, and block in epoll for at
	// most Step.D.
	Park
	// Yield means poll again after sched_yield(): a worker that spins on a
	// CPU it shares with the workload lets a woken client or server run at
	// once instead of holding the CPU until the scheduler preempts it.
	Yield
	// PolicedSleep means wait Step.D in epoll without publishing
	// need-wakeup: the app does not kick, the kernel's frames (a
	// session's replies) end it at once. The ladder gives it instead of a
	// Yield or a Park when the frames moved since the last wait were
	// mostly ones the policers freed (see Policy.PolicedSleep).
	PolicedSleep
)

func (k StepKind) String() string {
	return [...]string{"poll", "sleep", "park", "yield", "policed-sleep"}[k]
}

// Step is the ladder's decision.
type Step struct {
	Kind StepKind
	D    time.Duration
}

// Ladder is the pure state machine of a policy: given what the last poll
// moved and the time, it says whether to poll, sleep or park. It has no
// clock of its own, so tests drive it with a fake one.
type Ladder struct {
	p        Policy
	lastWork time.Duration
	backoff  time.Duration
	idle     bool  // the last poll moved nothing
	score    uint8 // Learn: a saturating count of idle gaps that ended within hitFactor*Spin
	parks    uint8 // parks since the last work: each doubles the next one's timeout
	// What the polls since the last wait (any step but Poll) moved, and
	// how many of those frames the policers freed.
	moved, policed int
	lastWait       time.Duration // when Next last returned a step other than Poll
}

// Learn's score: a 2-bit saturating counter, as a branch predictor keeps
// one. A gap within twice Spin (hitFactor) counts up, a longer one down; the worker spins
// while the score is at least spinScore. It starts at the top: spinning,
// as adaptive does without Learn.
const (
	maxScore  = 3
	spinScore = 2
	// hitFactor: a gap up to twice the spin still counts as short. A
	// back-to-back ping-pong's gaps straddle the spin (the reply's gap is
	// the remote round trip); counting only gaps within the spin made
	// such a flow flip between spinning and parking.
	hitFactor = 2
)

// NewLadder returns a ladder for p that counts now as the last work.
func NewLadder(p Policy, now time.Duration) *Ladder {
	return &Ladder{p: p, lastWork: now, score: maxScore}
}

// Policy returns the ladder's policy.
func (l *Ladder) Policy() Policy { return l.p }

// Reset switches to policy p; the ladder starts over as if it just worked.
// What it moved since the last wait carries over: no wait came between.
func (l *Ladder) Reset(p Policy, now time.Duration) {
	*l = Ladder{p: p, lastWork: now, score: maxScore, moved: l.moved, policed: l.policed, lastWait: l.lastWait}
}

// park is a Park step: ParkTimeout doubled for every park since the last
// work, up to IdleParkMax.
func (l *Ladder) park() Step {
	d := l.p.ParkTimeout
	for i := uint8(0); i < l.parks && d < IdleParkMax; i++ {
		d *= 2
	}
	if d > IdleParkMax {
		d = max(IdleParkMax, l.p.ParkTimeout)
	}
	return Step{Kind: Park, D: d}
}

// Idle reports whether the Park step Next just returned follows a park
// after which the poll found no work: the worker has been idle for a whole
// park timeout, and parks without a raw part (Waiter.ParkIdle).
func (l *Ladder) Idle() bool { return l.parks > 1 }

// Spinning reports whether adaptive would spin after the next idle poll
// (always, unless Learn has seen idle gaps outlast twice Spin).
func (l *Ladder) Spinning() bool { return !l.p.Learn || l.score >= spinScore }

// Next returns what to do after a poll that moved moved frames, policed of
// them freed by the policers.
//
// When the frames moved since the last wait were mostly policed ones (a
// flood being policed) and Policy.PolicedSleep is set, a Yield or a Park
// becomes a PolicedSleep: the flood's frames then batch into one burst a
// wait and the app stops kicking, where a kicked park would wake the worker
// every few frames, each wakeup costing microseconds where a policed frame
// costs tens of nanoseconds. Sleeps (adaptive's backoff, fixed mode's
// interval) are left as they are.
func (l *Ladder) Next(moved, policed int, now time.Duration) Step {
	l.moved += moved
	l.policed += policed
	s := l.next(moved > 0, now)
	if s.Kind == Poll {
		return s
	}
	flood := (s.Kind == Yield || s.Kind == Park) && l.p.PolicedSleep > 0 && 2*l.policed > l.moved
	d := l.policedSleep(now)
	l.moved, l.policed, l.lastWait = 0, 0, now
	if flood {
		return Step{Kind: PolicedSleep, D: d}
	}
	if s.Kind == Park && l.parks < 63 {
		l.parks++
	}
	return s
}

// policedSleep is how long a policed wait lasts: Policy.PolicedSleep, or
// less when the rate since the last wait would gather more than
// policedBatch frames in that time, so that a faster flood neither fills
// the app's ring during the wait nor costs more than a wakeup per batch.
func (l *Ladder) policedSleep(now time.Duration) time.Duration {
	d := l.p.PolicedSleep
	since := now - l.lastWait
	if l.moved <= 0 || since <= 0 {
		return d
	}
	if fit := since * policedBatch / time.Duration(l.moved); fit < d {
		d = max(fit, minPolicedSleep)
	}
	return d
}

// A policed wait lets about policedBatch frames gather (four bursts of
// 32, an eighth of a ring of 1024), and lasts at least minPolicedSleep.
const (
	policedBatch    = 128
	minPolicedSleep = 5 * time.Microsecond
)

// next is the ladder proper: what to do after a poll that moved packets
// (worked) or not.
func (l *Ladder) next(worked bool, now time.Duration) Step {
	if worked {
		if l.idle {
			l.learn(now - l.lastWork)
		}
		l.idle = false
		l.lastWork = now
		l.backoff = 0
		l.parks = 0
	} else {
		l.idle = true
	}
	switch l.p.Mode {
	case Busy:
		return Step{Kind: Poll}
	case Fixed:
		return Step{Kind: Sleep, D: l.p.Interval}
	case Interrupt:
		if worked {
			return Step{Kind: Poll}
		}
		return l.park()
	}
	// Adaptive.
	if worked {
		return Step{Kind: Poll}
	}
	if now-l.lastWork < l.p.Spin && l.Spinning() {
		return Step{Kind: Yield}
	}
	if l.p.Backoff.Max == 0 {
		return l.park()
	}
	switch {
	case l.backoff == 0:
		l.backoff = l.p.Backoff.Min
	case l.backoff <= l.p.Backoff.Max:
		l.backoff *= 2
	}
	if l.backoff > l.p.Backoff.Max {
		return l.park()
	}
	return Step{Kind: Sleep, D: l.backoff}
}

// learn scores one idle gap: the time from the last packet to the next,
// whether the worker spun through it or parked.
func (l *Ladder) learn(gap time.Duration) {
	short := gap <= hitFactor*l.p.Spin
	switch {
	case short && l.score < maxScore:
		l.score++
	case !short && l.score > 0:
		l.score--
	}
}

package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/internal/conferr"
)

const us = time.Microsecond

// frames is what a poll moved: one frame when it worked.
func frames(worked bool) int {
	if worked {
		return 1
	}
	return 0
}

func TestLadderTransitions(t *testing.T) {
	p := Default()
	p.Spin = 50 * us
	p.Backoff = Backoff{Min: 10 * us, Max: 40 * us} // the ladder with backoff on
	p.ParkTimeout = 100 * time.Millisecond
	p.Interval = 4 * time.Millisecond

	type call struct {
		worked bool
		at     time.Duration
		want   Step
	}
	poll := Step{Kind: Poll}
	yield := Step{Kind: Yield}
	park := Step{Kind: Park, D: p.ParkTimeout}
	park2 := Step{Kind: Park, D: 2 * p.ParkTimeout}
	sleep := func(d time.Duration) Step { return Step{Kind: Sleep, D: d} }
	cases := map[Mode][]call{
		Busy: {
			{false, 0, poll}, {false, time.Hour, poll}, {true, 2 * time.Hour, poll},
		},
		Fixed: {
			// KNI slept after every poll, busy or not.
			{true, 0, sleep(4 * time.Millisecond)}, {false, time.Second, sleep(4 * time.Millisecond)},
		},
		Interrupt: {
			{true, 0, poll}, {false, 1 * us, park}, {false, 2 * us, park2}, {true, 3 * us, poll},
			{false, 4 * us, park}, // work starts the parks over
		},
		Adaptive: {
			{true, 0, poll},
			{false, 49 * us, yield}, // still spinning, politely
			{false, 50 * us, sleep(10 * us)},
			{false, 61 * us, sleep(20 * us)},
			{false, 82 * us, sleep(40 * us)},
			{false, 123 * us, park},  // past backoff.max
			{false, 200 * us, park2}, // an idle park doubles the next
			{true, 300 * us, poll},   // traffic: back to spinning
			{false, 349 * us, yield},
			{false, 350 * us, sleep(10 * us)},
		},
	}
	for mode, calls := range cases {
		p := p
		p.Mode = mode
		l := NewLadder(p, 0)
		for i, c := range calls {
			if got := l.Next(frames(c.worked), 0, c.at); got != c.want {
				t.Errorf("%s step %d (worked=%v at %v): got %v %v, want %v %v",
					mode, i, c.worked, c.at, got.Kind, got.D, c.want.Kind, c.want.D)
			}
		}
	}
}

func TestAdaptiveWithoutBackoffParksAfterSpinning(t *testing.T) {
	p := Default()
	p.Spin = 50 * us
	p.Backoff = Backoff{}
	if err := p.Validate("policy"); err != nil {
		t.Fatalf("backoff off is valid: %v", err)
	}
	l := NewLadder(p, 0)
	if s := l.Next(0, 0, 49*us); s.Kind != Yield {
		t.Fatalf("within spin: %v", s.Kind)
	}
	if s := l.Next(0, 0, 50*us); s.Kind != Park || s.D != p.ParkTimeout {
		t.Fatalf("after spin: %v %v, want a park", s.Kind, s.D)
	}
}

func TestLadderResetSwitchesMode(t *testing.T) {
	p := Default()
	l := NewLadder(p, 0)
	for i := 0; i < 100; i++ {
		l.Next(0, 0, time.Duration(i)*time.Millisecond)
	}
	if s := l.Next(0, 0, time.Second); s.Kind != Park {
		t.Fatalf("idle adaptive ladder: %v, want park", s.Kind)
	}
	p.Mode = Busy
	l.Reset(p, time.Second)
	if s := l.Next(0, 0, 2*time.Second); s.Kind != Poll {
		t.Fatalf("after switching to busy: %v, want poll", s.Kind)
	}
	if l.Policy().Mode != Busy {
		t.Fatalf("Policy() = %v", l.Policy().Mode)
	}
}

func TestValidateNamesKeyAndValue(t *testing.T) {
	for _, c := range []struct {
		mut  func(*Policy)
		want string
	}{
		{func(p *Policy) { p.Mode = "turbo" }, `policy.mode: "turbo"`},
		{func(p *Policy) { p.Backoff = Backoff{Max: 10 * us} }, "policy.backoff.min: 0s: must be above 0 when backoff.max"},
		{func(p *Policy) { p.Backoff.Max = 5 * us; p.Backoff.Min = 10 * us }, "policy.backoff.max: 5µs"},
		{func(p *Policy) { p.Interval = 20 * time.Second }, "policy.interval: 20s"},
		{func(p *Policy) { p.Spin = -1 }, "policy.spin: -1ns"},
		{func(p *Policy) { p.ParkTimeout = time.Nanosecond }, "policy.park_timeout: 1ns"},
		{func(p *Policy) { p.PolicedSleep = 2 * time.Millisecond }, "policy.policed_sleep: 2ms"},
	} {
		p := Default()
		c.mut(&p)
		err := p.Validate("policy")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v, want it to mention %q", err, c.want)
		}
	}
	if err := Default().Validate("policy"); err != nil {
		t.Errorf("default policy invalid: %v", err)
	}
}

// Every mistake is reported, each as a FieldError with its full key.
func TestValidateReportsAll(t *testing.T) {
	p := Default()
	p.Mode = "turbo"
	p.Spin = 2 * time.Second
	p.Backoff = Backoff{Min: 10 * us, Max: 5 * us}
	err := p.Validate("policy")
	if !errors.Is(err, conferr.ErrInvalid) {
		t.Fatalf("%v: not a configuration error", err)
	}
	var l conferr.List
	if !errors.As(err, &l) {
		t.Fatalf("%v: not a List", err)
	}
	keys, ferr := conferr.KeysOf(err)
	if ferr != nil {
		t.Fatalf("%v: not a FieldError", ferr)
	}
	want := []string{"policy.mode", "policy.spin", "policy.backoff.max"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v (%v)", keys, want, err)
	}
}

func TestWaiterParkTimesOutAndWakesOnKick(t *testing.T) {
	var fds [2]int
	r, w, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	fds = [2]int{r, w}
	defer closeAll(fds[:])
	wt, err := NewWaiter(r)
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Close()
	if woken, err := wt.Park(100 * us); err != nil || woken {
		t.Fatalf("Park with nothing to do: woken=%v err=%v, want a timeout", woken, err)
	}
	wt.Kick()
	if woken, err := wt.Park(time.Minute); err != nil || !woken {
		t.Fatalf("Park after Kick: woken=%v err=%v", woken, err)
	}
	// The kick was consumed: the next park times out again.
	if woken, _ := wt.Park(100 * us); woken {
		t.Fatal("a kick woke two parks")
	}
	if _, err := writeByte(w); err != nil {
		t.Fatal(err)
	}
	if woken, _ := wt.Park(time.Minute); !woken {
		t.Fatal("readable fd did not end the park")
	}
}

// Learn: idle gaps that outlast the spin make adaptive park at once; short
// gaps bring the spin back. Without Learn the spin never stops.
func TestLearnedSpin(t *testing.T) {
	p := Default() // spin 20us, backoff off
	p.Learn = true
	l := NewLadder(p, 0)
	at := time.Duration(0)
	// gap: the worker works at `at`, then polls idle 1 us later, and the
	// next packet comes gap after the work. It returns the idle step.
	gap := func(g time.Duration) StepKind {
		l.Next(1, 0, at)
		s := l.Next(0, 0, at+us)
		at += g
		return s.Kind
	}
	if k := gap(500 * us); k != Yield {
		t.Fatalf("first idle poll: %v, want yield (a fresh ladder spins)", k)
	}
	gap(500 * us) // score 3 -> 2 -> 1 after this work
	if k := gap(500 * us); k != Park {
		t.Fatalf("after two gaps of 500us: %v, want park at once", k)
	}
	// Each work scores the gap before it: this one the third long gap
	// (score 0), the next two the short ones (1, then 2: spinning again).
	gap(5 * us)
	gap(5 * us)
	if k := gap(5 * us); k != Yield {
		t.Fatalf("after short gaps: %v, want yield", k)
	}
	if !l.Spinning() {
		t.Error("Spinning() = false after short gaps")
	}

	p.Learn = false
	l = NewLadder(p, 0)
	for range 10 {
		if k := gap(time.Millisecond); k != Yield {
			t.Fatalf("without Learn: %v, want yield every time", k)
		}
	}
}

// A flood being policed: when most frames the polls moved since the last
// wait were freed by the policers, a Yield or a Park becomes a PolicedSleep
// of Policy.PolicedSleep; sleeps stay sleeps, and every wait starts the
// count over.
func TestALadderWhoseFramesAreMostlyPolicedSleepsInsteadOfYieldingOrParking(t *testing.T) {
	type poll struct {
		moved, policed int
		at             time.Duration
		want           Step
	}
	base := Default()
	base.Spin = 50 * us
	base.ParkTimeout = time.Second
	base.PolicedSleep = 30 * us
	poll0 := Step{Kind: Poll}
	yield := Step{Kind: Yield}
	park := Step{Kind: Park, D: time.Second}
	policed := Step{Kind: PolicedSleep, D: 30 * us}
	for _, c := range []struct {
		name  string
		mut   func(*Policy)
		polls []poll
	}{
		{"interrupt: a policed flood, then a wait starts the count over", func(p *Policy) { p.Mode = Interrupt }, []poll{
			{10, 9, 0, poll0}, {0, 0, 10 * us, policed}, {0, 0, 20 * us, park},
		}},
		{"interrupt: counted over every poll since the last wait", func(p *Policy) { p.Mode = Interrupt }, []poll{
			{8, 0, 0, poll0}, {8, 9, us, poll0}, {0, 0, 10 * us, policed},
		}},
		{"interrupt: half policed is not a flood", func(p *Policy) { p.Mode = Interrupt }, []poll{
			{8, 0, 0, poll0}, {8, 8, us, poll0}, {0, 0, 2 * us, park},
		}},
		{"interrupt: policed_sleep 0 turns it off", func(p *Policy) { p.Mode = Interrupt; p.PolicedSleep = 0 }, []poll{
			{10, 10, 0, poll0}, {0, 0, us, park},
		}},
		{"adaptive: a yield within the spin becomes one", func(p *Policy) {}, []poll{
			{10, 10, 0, poll0}, {0, 0, 10 * us, policed}, {0, 0, 11 * us, yield}, {0, 0, 60 * us, park},
		}},
		{"adaptive: a backoff sleep stays one and starts the count over", func(p *Policy) { p.Backoff = Backoff{Min: 10 * us, Max: 10 * us} }, []poll{
			{10, 10, 0, poll0}, {0, 0, 60 * us, Step{Kind: Sleep, D: 10 * us}}, {0, 0, 80 * us, park},
		}},
		{"fixed: the interval stays a sleep", func(p *Policy) { p.Mode = Fixed }, []poll{
			{10, 10, 0, Step{Kind: Sleep, D: base.Interval}},
		}},
		{"busy: never waits", func(p *Policy) { p.Mode = Busy }, []poll{
			{10, 10, 0, poll0}, {0, 0, time.Hour, poll0},
		}},
	} {
		p := base
		c.mut(&p)
		l := NewLadder(p, 0)
		for i, s := range c.polls {
			if got := l.Next(s.moved, s.policed, s.at); got != s.want {
				t.Errorf("%s: poll %d (%d moved, %d policed at %v): got %v %v, want %v %v",
					c.name, i, s.moved, s.policed, s.at, got.Kind, got.D, s.want.Kind, s.want.D)
			}
		}
	}
}

// A policed wait lets about policedBatch frames gather: at a rate that
// would bring more in Policy.PolicedSleep the wait is shorter (not under
// minPolicedSleep), so a fast flood does not fill the app's ring while the
// worker sleeps; a slower one waits the whole PolicedSleep.
func TestAPolicedWaitGathersABatchAtMost(t *testing.T) {
	p := Default()
	p.Mode = Interrupt
	p.PolicedSleep = 500 * us
	for _, c := range []struct {
		name  string
		moved int
		since time.Duration // from the last wait to the empty poll
		want  time.Duration
	}{
		{"200k frames/s: the whole wait", 100, 500 * us, 500 * us},
		{"2M frames/s: a batch's worth", 1000, 500 * us, 64 * us},
		{"a batch in the whole wait: the whole wait", policedBatch, 500 * us, 500 * us},
		{"faster than a batch in minPolicedSleep: minPolicedSleep", 100000, 100 * us, minPolicedSleep},
	} {
		l := NewLadder(p, 0)
		if s := l.Next(0, 0, time.Millisecond); s.Kind != Park { // the last wait, at 1 ms
			t.Fatalf("%s: the first empty poll: %v, want a park", c.name, s.Kind)
		}
		at := time.Millisecond + c.since
		if s := l.Next(c.moved, c.moved, at-us); s.Kind != Poll {
			t.Fatalf("%s: a poll that moved frames: %v, want poll", c.name, s.Kind)
		}
		if s := l.Next(0, 0, at); s.Kind != PolicedSleep || s.D != c.want {
			t.Errorf("%s: %v %v, want a policed sleep of %v", c.name, s.Kind, s.D, c.want)
		}
	}
}

// Parks with no work between them double, up to IdleParkMax, so that an
// idle worker wakes rarely; a park_timeout above that stays as configured.
func TestIdleParksDoubleUpToIdleParkMax(t *testing.T) {
	for _, c := range []struct {
		timeout time.Duration
		want    []time.Duration
	}{
		{100 * time.Millisecond, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond,
			400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, IdleParkMax, IdleParkMax}},
		{time.Minute, []time.Duration{time.Minute, time.Minute}},
	} {
		p := Default()
		p.Mode = Interrupt
		p.ParkTimeout = c.timeout
		l := NewLadder(p, 0)
		for i, want := range c.want {
			if s := l.Next(0, 0, time.Duration(i)*us); s.Kind != Park || s.D != want {
				t.Errorf("park_timeout %v, idle park %d: got %v %v, want park %v", c.timeout, i, s.Kind, s.D, want)
			}
		}
	}
}

// A park that follows a park after which the poll found no work is an
// idle worker's (Ladder.Idle); work makes the next park a first one again.
func TestAParkAfterAnIdleParkIsIdle(t *testing.T) {
	p := Default()
	p.Mode = Interrupt
	l := NewLadder(p, 0)
	for i, c := range []struct {
		moved int
		idle  bool
	}{{0, false}, {0, true}, {0, true}, {5, false}, {0, false}, {0, true}} {
		s := l.Next(c.moved, 0, time.Duration(i)*us)
		if c.moved > 0 {
			if s.Kind != Poll {
				t.Fatalf("step %d after work: %v, want poll", i, s.Kind)
			}
			continue
		}
		if s.Kind != Park || l.Idle() != c.idle {
			t.Errorf("step %d: %v, Idle %v; want park, Idle %v", i, s.Kind, l.Idle(), c.idle)
		}
	}
}

// Switching policies is not a wait: what the polls moved before the switch
// still counts.
func TestALadderKeepsItsPolicedCountAcrossAPolicySwitch(t *testing.T) {
	p := Default()
	p.Mode = Interrupt
	l := NewLadder(p, 0)
	l.Next(10, 10, 0)
	l.Reset(p, us)
	if s := l.Next(0, 0, time.Millisecond); s.Kind != PolicedSleep || s.D != p.PolicedSleep {
		t.Errorf("after a switch: %v %v, want a policed sleep of %v", s.Kind, s.D, p.PolicedSleep)
	}
}

func TestTheLadderDoesNotAllocate(t *testing.T) {
	p := Default()
	p.Mode = Interrupt
	l := NewLadder(p, 0)
	at := time.Duration(0)
	if allocs := testing.AllocsPerRun(1000, func() {
		at += us
		l.Next(int(at/us)&1, 1, at)
	}); allocs != 0 {
		t.Errorf("%.2f allocations per step, want 0", allocs)
	}
}

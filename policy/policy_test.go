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
			{true, 0, poll}, {false, 1 * us, park}, {false, 2 * us, park}, {true, 3 * us, poll},
		},
		Adaptive: {
			{true, 0, poll},
			{false, 49 * us, yield}, // still spinning, politely
			{false, 50 * us, sleep(10 * us)},
			{false, 61 * us, sleep(20 * us)},
			{false, 82 * us, sleep(40 * us)},
			{false, 123 * us, park}, // past backoff.max
			{false, 200 * us, park},
			{true, 300 * us, poll}, // traffic: back to spinning
			{false, 349 * us, yield},
			{false, 350 * us, sleep(10 * us)},
		},
	}
	for mode, calls := range cases {
		p := p
		p.Mode = mode
		l := NewLadder(p, 0)
		for i, c := range calls {
			if got := l.Next(c.worked, c.at); got != c.want {
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
	if s := l.Next(false, 49*us); s.Kind != Yield {
		t.Fatalf("within spin: %v", s.Kind)
	}
	if s := l.Next(false, 50*us); s.Kind != Park || s.D != p.ParkTimeout {
		t.Fatalf("after spin: %v %v, want a park", s.Kind, s.D)
	}
}

func TestLadderResetSwitchesMode(t *testing.T) {
	p := Default()
	l := NewLadder(p, 0)
	for i := 0; i < 100; i++ {
		l.Next(false, time.Duration(i)*time.Millisecond)
	}
	if s := l.Next(false, time.Second); s.Kind != Park {
		t.Fatalf("idle adaptive ladder: %v, want park", s.Kind)
	}
	p.Mode = Busy
	l.Reset(p, time.Second)
	if s := l.Next(false, 2*time.Second); s.Kind != Poll {
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
		l.Next(true, at)
		s := l.Next(false, at+us)
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

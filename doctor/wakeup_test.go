package doctor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestProcStatGivesTheStealOfAllCPUsAndTheIdleOfSome(t *testing.T) {
	before, err := parseProcStat(strings.NewReader(`cpu  100 0 100 700 50 0 0 50 30 0
cpu0 50 0 50 350 25 0 0 25 15 0
cpu1 50 0 50 350 25 0 0 25 15 0
intr 12 0
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := before.all.stealPct(); got != 5 {
		t.Errorf("steal since boot %v%%, want 5 (guest time is not counted twice)", got)
	}
	after, err := parseProcStat(strings.NewReader(`cpu  110 0 110 905 50 0 0 125
cpu0 55 0 55 440 25 0 0 75
cpu1 55 0 55 440 25 0 0 75
`))
	if err != nil {
		t.Fatal(err)
	}
	steal, idle := after.since(before, []int{1})
	if steal != 25 || idle != 60 {
		t.Errorf("over the window steal %v%% idle %v%%, want 25 and 60", steal, idle)
	}
	if _, idle := after.since(before, []int{7}); idle != -1 {
		t.Errorf("idle of a CPU without a line = %v, want -1", idle)
	}
	if _, err := parseProcStat(strings.NewReader("intr 1\n")); err == nil {
		t.Error("a /proc/stat without a cpu line parsed")
	}
}

func TestWakeupSummaryRanksAndCountsTheSamples(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*20*time.Microsecond) // 20 us .. 2 ms
	}
	s := summarizeWakeups(d)
	want := WakeupStats{Samples: 100, P50: 1000 * time.Microsecond, P99: 1980 * time.Microsecond, Max: 2000 * time.Microsecond, Over1ms: 50}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if s := summarizeWakeups(nil); s != (WakeupStats{}) {
		t.Errorf("no samples gave %+v", s)
	}
	one := summarizeWakeups([]time.Duration{time.Microsecond})
	if one.P50 != time.Microsecond || one.P99 != time.Microsecond || one.Max != time.Microsecond {
		t.Errorf("one sample gave %+v", one)
	}
}

func TestWakeupProbeRefusesAPlanWithoutWakeups(t *testing.T) {
	for _, p := range []WakeupPlan{
		{From: 0, To: nil, Gap: time.Millisecond, Budget: time.Second},
		{From: 0, To: []int{0}, Gap: 0, Budget: time.Second},
		{From: 0, To: []int{0}, Gap: time.Second, Budget: time.Millisecond},
	} {
		if _, err := (LiveWakeupProbe{}).ProbeWakeup(context.Background(), p); err == nil {
			t.Errorf("plan %+v ran", p)
		}
	}
}

// The probe on this machine: it must stop within its bound and report
// figures that hang together. Nothing here asserts how fast a wakeup is.
func TestWakeupProbeFinishesWithinItsBoundWithSaneFigures(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	plan := WakeupPlan{From: cpus[len(cpus)-1], To: cpus[:max(len(cpus)-1, 1)], Gap: wakeupGap, Budget: 300 * time.Millisecond}
	start := time.Now()
	rep, err := LiveWakeupProbe{}.ProbeWakeup(context.Background(), plan)
	took := time.Since(start)
	// The bound: the budget, plus at most one wakeup's wait per phase;
	// the rest is slack for thread start-up on a loaded machine.
	if bound := plan.Budget + 2*wakeupSpan + time.Second; took > bound {
		t.Errorf("the probe took %v, beyond its bound %v", took, bound)
	}
	if errors.Is(err, ErrProbeLost) {
		t.Skipf("a wakeup was lost on this loaded machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: cross %+v same %+v steal %.1f%% idle %.0f%%", took, rep.Cross, rep.Same, rep.StealPct, rep.IdlePct)
	phases := []WakeupStats{rep.Same}
	if len(cpus) > 1 {
		phases = append(phases, rep.Cross)
	} else if rep.Cross.Samples != 0 {
		t.Errorf("one CPU, yet %d cross-CPU wakeups", rep.Cross.Samples)
	}
	total := 0
	for _, s := range phases {
		if s.Samples == 0 {
			t.Errorf("no samples: %+v", s)
		}
		if !(0 < s.P50 && s.P50 <= s.P99 && s.P99 <= s.Max) {
			t.Errorf("percentiles out of order: %+v", s)
		}
		if s.Over1ms > s.Samples || (s.Over1ms > 0) != (s.Max > time.Millisecond) {
			t.Errorf("over 1 ms count does not match: %+v", s)
		}
		total += s.Samples
	}
	// Every wakeup follows a full gap of sleep, so no more fit the budget.
	if most := int(plan.Budget/plan.Gap) + 1; total > most {
		t.Errorf("%d wakeups in %v at %v apart, at most %d fit", total, plan.Budget, plan.Gap, most)
	}
	if rep.StealPct < 0 || rep.StealPct > 100 || rep.IdlePct < 0 || rep.IdlePct > 100 {
		t.Errorf("steal %v%% idle %v%%: want shares of 0-100", rep.StealPct, rep.IdlePct)
	}
	if !slices.Equal(rep.Plan.To, plan.To) {
		t.Errorf("report's plan %+v, want %+v", rep.Plan, plan)
	}
}

func TestWakeupProbeNamesACPUItMayNotUse(t *testing.T) {
	p := WakeupPlan{From: 0, To: []int{1023}, Gap: time.Millisecond, Budget: 100 * time.Millisecond}
	if _, err := (LiveWakeupProbe{}).ProbeWakeup(context.Background(), p); !errors.Is(err, ErrPin) {
		t.Errorf("CPU 1023: err %v, want ErrPin", err)
	}
}

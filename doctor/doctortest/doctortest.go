// Package doctortest provides fakes for testing code built on doctor
// without a live host: FakeXDP answers doctor.XDPInspector from a map of
// interface names to XDP states, FakeWakeup doctor.WakeupProber with a
// fixed report, FakeCoPP doctor.CoPPReader with readings in turn.
package doctortest

import (
	"context"
	"fmt"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/doctor"
)

// FakeXDP answers doctor.XDPInspector from a map; a missing name is a
// link that does not exist.
type FakeXDP map[string]doctor.XDPState

// LinkXDP implements doctor.XDPInspector.
func (f FakeXDP) LinkXDP(ctx context.Context, ifname string) (doctor.XDPState, error) {
	if err := ctx.Err(); err != nil {
		return doctor.XDPState{}, err
	}
	st, ok := f[ifname]
	if !ok {
		return doctor.XDPState{}, fmt.Errorf("%s: %w", ifname, doctor.ErrNoLink)
	}
	return st, nil
}

// FakeWakeup answers doctor.WakeupProber with Report (its Plan set to
// the plan asked for) or Err, and keeps the last plan in Asked.
type FakeWakeup struct {
	Report doctor.WakeupReport
	Err    error
	Asked  *doctor.WakeupPlan
}

// ProbeWakeup implements doctor.WakeupProber.
func (f FakeWakeup) ProbeWakeup(ctx context.Context, p doctor.WakeupPlan) (doctor.WakeupReport, error) {
	if f.Asked != nil {
		*f.Asked = p
	}
	if err := ctx.Err(); err != nil {
		return doctor.WakeupReport{}, err
	}
	r := f.Report
	r.Plan = p
	return r, f.Err
}

// FakeCoPP answers doctor.CoPPReader with Readings in turn (the last one
// again once they run out), or Err.
type FakeCoPP struct {
	Readings [][copp.NumClasses]uint64
	Err      error
	n        int
}

// Policed implements doctor.CoPPReader.
func (f *FakeCoPP) Policed(ctx context.Context) ([copp.NumClasses]uint64, error) {
	if err := ctx.Err(); err != nil {
		return [copp.NumClasses]uint64{}, err
	}
	if f.Err != nil || len(f.Readings) == 0 {
		return [copp.NumClasses]uint64{}, f.Err
	}
	r := f.Readings[min(f.n, len(f.Readings)-1)]
	f.n++
	return r, nil
}

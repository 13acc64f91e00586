// Package doctortest provides fakes for testing code built on doctor
// without a live host: FakeXDP answers doctor.XDPInspector from a map of
// interface names to XDP states.
package doctortest

import (
	"context"
	"fmt"

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

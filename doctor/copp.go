package doctor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kbridge/kbridge/copp"
)

// The copp check reads a running kbridge's policed counters twice and names
// each class whose policer freed frames in between: a flood being policed
// now, or a rate set too low for what a class carries. It is the operator's
// answer to "what is kbridge dropping, and by which key", without reading
// the counters by hand.

// DefaultCoPPWindow is the time between the copp check's two readings:
// copp.PolicingWindow, the span over which the counters call a class being
// policed.
const DefaultCoPPWindow = copp.PolicingWindow

var (
	// ErrNoInstance is a kbridge that does not answer on its control
	// socket: nothing runs to be policed.
	ErrNoInstance = errors.New("no kbridge answers")
	// ErrCoPPOff is a running kbridge with copp.enabled off.
	ErrCoPPOff = errors.New("copp is off")
)

// CoPPReader reads a running kbridge's frames policed so far, per class
// summed over its queues. It fails with ErrNoInstance when no kbridge runs
// and ErrCoPPOff when it polices nothing.
type CoPPReader interface {
	Policed(ctx context.Context) ([copp.NumClasses]uint64, error)
}

func checkCoPP(ctx context.Context, e *env) []Result {
	r := e.opts.CoPP
	if r == nil {
		return []Result{{Check: CheckCoPP, Status: Skip, Evidence: "no running kbridge to read (no control socket given)"}}
	}
	before, after, window, err := readTwice(ctx, e.opts.CoPPWindow, r.Policed)
	switch {
	case errors.Is(err, ErrNoInstance), errors.Is(err, ErrCoPPOff):
		return []Result{{Check: CheckCoPP, Status: Skip, Evidence: err.Error()}}
	case err != nil:
		return []Result{{Check: CheckCoPP, Status: Warn, Evidence: "cannot read the policed counters: " + err.Error()}}
	}
	return policedNow(before, after, window, e.opts.CoPPRates)
}

// readTwice calls read, waits window (DefaultCoPPWindow when 0) unless
// ctx ends first, and calls it again: the running kbridge's counters over a
// window, for the checks that read it.
func readTwice[T any](ctx context.Context, window time.Duration, read func(context.Context) (T, error)) (before, after T, _ time.Duration, err error) {
	if window <= 0 {
		window = DefaultCoPPWindow
	}
	before, err = read(ctx)
	if err == nil {
		t := time.NewTimer(window)
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-t.C:
		}
		t.Stop()
	}
	if err == nil {
		after, err = read(ctx)
	}
	return before, after, window, err
}

// policedNow turns two readings of the policed counters, window apart, into
// one warning per class whose counter grew, or one pass when none did.
// rates are the classes' configured rates, named in the evidence so that
// the key to raise is on the same line.
func policedNow(before, after [copp.NumClasses]uint64, window time.Duration, rates [copp.NumClasses]copp.Rate) []Result {
	var out []Result
	for c := range copp.NumClasses {
		if after[c] <= before[c] {
			// Equal, or a restart in between zeroed the counter.
			continue
		}
		name := copp.ClassNames[c]
		perSec := float64(after[c]-before[c]) / window.Seconds()
		out = append(out, Result{
			Check:  CheckCoPP,
			Status: Warn,
			Evidence: fmt.Sprintf("class %s is being policed now: %.0f frames/s freed over %v, rate %s",
				name, perSec, window, rateText(name, rates[c])),
			Fix: fmt.Sprintf("a flood: nothing to do; wanted traffic: raise copp.%s (docs/CONFIG.md)", name),
		})
	}
	if out == nil {
		out = []Result{{Check: CheckCoPP, Status: Pass,
			Evidence: fmt.Sprintf("no class policed over %v", window)}}
	}
	return out
}

// rateText names a class's limits and their keys: "1000 pps
// (copp.default.pps)", a byte rate likewise, or "unlimited" when neither is
// set (counters that grew anyway come from a rate since changed).
func rateText(class string, r copp.Rate) string {
	var s string
	if r.PPS > 0 {
		s = fmt.Sprintf("%d pps (copp.%s.pps)", r.PPS, class)
	}
	if r.Bytes > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%d bytes/s (copp.%s.bytes)", r.Bytes, class)
	}
	if s == "" {
		return fmt.Sprintf("unlimited in the configuration read (copp.%s)", class)
	}
	return s
}

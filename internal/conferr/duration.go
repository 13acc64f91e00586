package conferr

import (
	"errors"
	"strconv"
	"time"
)

// DurationUnits is what a duration is written with, for messages.
const DurationUnits = "write a number with a unit (ns, us, ms, s, m, h), e.g. 20us"

// ParseDuration reads a duration written with a unit ("20us", "1.5s"), as
// the configuration's keys and the command line's flags take it. A bare
// number other than 0 is refused with a reason that suggests it with unit,
// the likeliest meant: "1" would otherwise be a nanosecond, or nothing.
func ParseDuration(s, unit string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		return 0, errors.New("a duration needs a unit, e.g. " + s + unit)
	}
	return 0, errors.New("not a duration: " + DurationUnits)
}

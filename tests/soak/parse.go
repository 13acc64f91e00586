package main

// Pure parsers and text builders: unit-tested without root or the bed.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/kbridge/kbridge/tests/harness"
)

var rePercentile = regexp.MustCompile(`percentile\s+([0-9.]+)\s*=\s*([0-9.]+)`)

// parseSockperf returns p50 and p99 (usec, half the round trip, as
// sockperf reports) from `sockperf pp` output; the first summary counts.
func parseSockperf(out string) (p50, p99 float64, err error) {
	pct := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		if m := rePercentile.FindStringSubmatch(line); m != nil {
			if _, seen := pct[m[1]]; !seen {
				pct[m[1]], _ = strconv.ParseFloat(m[2], 64)
			}
		}
	}
	var ok1, ok2 bool
	p50, ok1 = pct["50.000"]
	p99, ok2 = pct["99.000"]
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("no latency summary in sockperf output (last line: %q)", harness.LastLine(out))
	}
	return p50, p99, nil
}

var reRefapp = regexp.MustCompile(`kbridge-refapp: stats .*\bin_rings=(\d+) pool_in_use=(\d+)`)

// parseRefappStats reads the last stats line the reference app printed on
// SIGUSR1: pool_in_use and in_rings.
func parseRefappStats(log string) (inUse, inRings int, ok bool) {
	m := reRefapp.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return 0, 0, false
	}
	last := m[len(m)-1]
	inRings, _ = strconv.Atoi(last[1])
	inUse, _ = strconv.Atoi(last[2])
	return inUse, inRings, true
}

// withPolicy returns the YAML configuration with its top-level policy
// block replaced by one setting mode.
func withPolicy(base, mode string) string {
	return harness.WithPolicy(base, "policy:\n  mode: "+mode+"\n")
}

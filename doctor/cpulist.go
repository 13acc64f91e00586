package doctor

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/kbridge/kbridge/internal/cpulist"
)

// parseCPUMask parses a hex mask with comma-separated 32-bit words, as in
// /proc/irq/N/affinity_hint ("00000000,00000003"), or a DPDK -c coremask
// ("0x3").
func parseCPUMask(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	s = strings.ReplaceAll(s, ",", "")
	if s == "" {
		return nil, nil
	}
	var cpus []int
	// Walk from the least significant hex digit at the right.
	for i := 0; i < len(s); i++ {
		d, err := strconv.ParseUint(s[len(s)-1-i:len(s)-i], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("cpu mask %q: %w", s, err)
		}
		for d != 0 {
			b := bits.TrailingZeros64(d)
			cpus = append(cpus, i*4+b)
			d &^= 1 << b
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

// intersect returns the CPUs in both sets, sorted.
func intersect(a, b []int) []int {
	var out []int
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// subtract returns the CPUs of a that are not in b, sorted.
func subtract(a, b []int) []int {
	var out []int
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// cpuNoun names a set in prose: "CPU 3" or "CPUs 3-5".
func cpuNoun(cpus []int) string {
	if len(cpus) == 1 {
		return "CPU " + cpulist.Format(cpus)
	}
	return "CPUs " + cpulist.Format(cpus)
}

// verb picks the verb form that agrees with cpuNoun.
func verb(cpus []int, one, many string) string {
	if len(cpus) == 1 {
		return one
	}
	return many
}

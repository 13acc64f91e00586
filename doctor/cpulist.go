package doctor

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// parseCPUList parses the kernel's list format ("0-3,8,10-11"), as found
// in /sys/devices/system/cpu/online and /proc/irq/N/smp_affinity_list.
// An empty string is an empty set (isolated, nohz_full when unset).
func parseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "(null)" {
		return nil, nil
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			// A stride ("0-7:2") is legal on the kernel command line
			// but never printed by sysfs; reject rather than misread.
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if b < a || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

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

// formatCPUList writes a set back in the kernel's list format, the form
// smp_affinity_list accepts.
func formatCPUList(cpus []int) string {
	c := slices.Clone(cpus)
	slices.Sort(c)
	c = slices.Compact(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", c[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", c[i], c[j])
		}
		i = j + 1
	}
	return b.String()
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
		return "CPU " + formatCPUList(cpus)
	}
	return "CPUs " + formatCPUList(cpus)
}

// verb picks the verb form that agrees with cpuNoun.
func verb(cpus []int, one, many string) string {
	if len(cpus) == 1 {
		return one
	}
	return many
}

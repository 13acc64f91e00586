// Package cpulist reads and writes the kernel's CPU list format
// ("0-3,8,10-11"), as in /sys/devices/system/cpu/online, isolated, nohz_full
// and /proc/irq/N/smp_affinity_list. config and doctor share it.
package cpulist

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Parse parses a CPU list into ascending CPUs without repeats. An empty
// string (or "(null)", as some kernels print an unset list) is the empty
// set. A stride ("0-7:2") is legal on the kernel command line but never
// printed by sysfs: it is refused rather than misread.
func Parse(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "(null)" {
		return nil, nil
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
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

// Format writes a set of CPUs (in any order, repeats allowed) in the list
// format, the form smp_affinity_list accepts.
func Format(cpus []int) string {
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

package doctor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// cpuTimes is one cpu line of /proc/stat, in USER_HZ ticks.
type cpuTimes struct {
	idle, steal, total uint64
}

// procStat is /proc/stat's cpu lines: all CPUs, and each by number.
type procStat struct {
	all   cpuTimes
	byCPU map[int]cpuTimes
}

func readProcStat(path string) (procStat, error) {
	f, err := os.Open(path)
	if err != nil {
		return procStat{}, err
	}
	defer f.Close()
	st, err := parseProcStat(f)
	if err != nil {
		return procStat{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// parseProcStat reads the cpu lines: user nice system idle iowait irq
// softirq steal guest guest_nice. Guest time is already counted in user
// and nice, so it is left out of the total.
func parseProcStat(r io.Reader) (procStat, error) {
	st := procStat{byCPU: map[int]cpuTimes{}}
	found := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		var v [8]uint64
		for i := range min(len(f)-1, len(v)) {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return procStat{}, fmt.Errorf("%s: %w", f[0], err)
			}
			v[i] = n
		}
		t := cpuTimes{idle: v[3] + v[4], steal: v[7]}
		for _, n := range v {
			t.total += n
		}
		if f[0] == "cpu" {
			st.all, found = t, true
			continue
		}
		if n, err := strconv.Atoi(f[0][3:]); err == nil {
			st.byCPU[n] = t
		}
	}
	if err := sc.Err(); err != nil {
		return procStat{}, err
	}
	if !found {
		return procStat{}, fmt.Errorf("no cpu line")
	}
	return st, nil
}

// stealPct is the share of all CPU time stolen, in percent.
func (t cpuTimes) stealPct() float64 {
	if t.total == 0 {
		return 0
	}
	return 100 * float64(t.steal) / float64(t.total)
}

func (t cpuTimes) minus(o cpuTimes) cpuTimes {
	return cpuTimes{idle: t.idle - o.idle, steal: t.steal - o.steal, total: t.total - o.total}
}

// since returns the steal share of all CPUs and the idle share of cpus
// between before and st, in percent; idle is -1 when cpus have no lines.
func (st procStat) since(before procStat, cpus []int) (steal, idle float64) {
	steal = st.all.minus(before.all).stealPct()
	var d cpuTimes
	for _, c := range cpus {
		a, okA := st.byCPU[c]
		b, okB := before.byCPU[c]
		if !okA || !okB {
			return steal, -1
		}
		x := a.minus(b)
		d.idle += x.idle
		d.total += x.total
	}
	if d.total == 0 {
		return steal, -1
	}
	return steal, 100 * float64(d.idle) / float64(d.total)
}

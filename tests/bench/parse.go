package main

// Pure parsers of what the measured tools print. Unit-tested with fixtures in
// testdata/; nothing here needs root or the test bed.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/kbridge/kbridge/tests/harness"
)

// Latency is a one-way latency summary in microseconds (sockperf reports half
// the round trip).
type Latency struct {
	P50, P99, P999, Max float64
	N                   int // observations
}

var (
	rePercentile = regexp.MustCompile(`percentile\s+([0-9.]+)\s*=\s*([0-9.]+)`)
	reMax        = regexp.MustCompile(`<MAX> observation\s*=\s*([0-9.]+)`)
	reTotal      = regexp.MustCompile(`Total (\d+) observations`)
)

// parseSockperf reads the summary of `sockperf ping-pong` (its stdout). The
// summary is printed once per server; only the first one counts.
func parseSockperf(out string) (Latency, error) {
	var l Latency
	pct := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		if m := rePercentile.FindStringSubmatch(line); m != nil {
			if _, seen := pct[m[1]]; !seen {
				pct[m[1]], _ = strconv.ParseFloat(m[2], 64)
			}
		} else if m := reMax.FindStringSubmatch(line); m != nil && l.Max == 0 {
			l.Max, _ = strconv.ParseFloat(m[1], 64)
		} else if m := reTotal.FindStringSubmatch(line); m != nil && l.N == 0 {
			l.N, _ = strconv.Atoi(m[1])
		}
	}
	var ok bool
	if l.P50, ok = pct["50.000"]; !ok {
		return l, fmt.Errorf("no latency summary in sockperf output (last line: %q)", harness.LastLine(out))
	}
	l.P99, l.P999 = pct["99.000"], pct["99.900"]
	if l.N == 0 {
		return l, errors.New("sockperf reported 0 observations")
	}
	return l, nil
}

// parseFullLog reads the latencies (usec) of a sockperf --full-log file: a
// summary, then "packet, txTime(sec), rxTime(sec), latency(usec)" and one CSV
// row per observation, then a dashed line.
func parseFullLog(text string) ([]float64, error) {
	var lat []float64
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !in {
			in = strings.HasPrefix(line, "packet,")
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 4 {
			break // the closing dashed line
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(f[3]), 64)
		if err != nil {
			return nil, fmt.Errorf("full log row %q: %v", line, err)
		}
		lat = append(lat, v)
	}
	if !in {
		return nil, errors.New("full log has no \"packet, txTime...\" header")
	}
	if len(lat) == 0 {
		return nil, errors.New("full log has no observations")
	}
	return lat, nil
}

// procStat is what the benchmark reads from /proc/PID/stat.
type procStat struct {
	Comm  string
	Ticks uint64 // utime+stime, clock ticks
	CPU   int    // CPU it last ran on
}

// parseProcStat reads a /proc/PID/stat line. The command name may hold
// spaces and parentheses, so fields are counted from the last ')'.
func parseProcStat(line string) (procStat, error) {
	var p procStat
	i, j := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if i < 0 || j < i {
		return p, fmt.Errorf("malformed /proc stat line %q", line)
	}
	p.Comm = line[i+1 : j]
	f := strings.Fields(line[j+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15,
	// processor is field 39.
	if len(f) < 13 {
		return p, fmt.Errorf("short /proc stat line %q", line)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return p, fmt.Errorf("/proc stat utime/stime: %v", err)
	}
	p.Ticks = u + s
	p.CPU = -1
	if len(f) > 36 {
		if c, err := strconv.Atoi(f[36]); err == nil {
			p.CPU = c
		}
	}
	return p, nil
}

// cpuPercent turns a tick delta over a wall-clock interval into percent of
// one core.
func cpuPercent(ticks uint64, clkTck int, wallSec float64) float64 {
	if wallSec <= 0 || clkTck <= 0 {
		return 0
	}
	return float64(ticks) / float64(clkTck) / wallSec * 100
}

// Counters are the kbridge counters a workload moved (deltas of `kbridge stats`).
type Counters struct {
	ToKernel, FromKernel           uint64
	Parks, Wakeups, Timeouts       uint64
	Sleeps, Kicks, Drops, AppDrops uint64
	SpinNs                         uint64
	DropBy                         map[string]uint64 // kbridge's drops by reason; "app_to_kernel" for the app's
	Residence                      []uint64          // per bucket
	Bounds                         []uint64          // bucket upper bounds, ns
}

type statsJSON struct {
	Queues []struct {
		Mode       string            `json:"mode"`
		ToKernel   uint64            `json:"to_kernel_packets"`
		FromKernel uint64            `json:"from_kernel_packets"`
		Drops      map[string]uint64 `json:"drops"`
		Parks      uint64            `json:"parks"`
		Wakeups    uint64            `json:"wakeups"`
		Timeouts   uint64            `json:"timeouts"`
		Sleeps     uint64            `json:"sleeps"`
		SpinNs     uint64            `json:"spin_ns"`
		Residence  []uint64          `json:"residence"`
		App        struct {
			Dropped uint64 `json:"to_kernel_dropped"`
			Kicks   uint64 `json:"kicks"`
		} `json:"app"`
	} `json:"queues"`
	Bounds []uint64 `json:"residence_bounds_ns"`
}

// parseStats reads `kbridge stats` JSON: the mode of queue 0 and the counters
// summed over all queues.
func parseStats(out []byte) (mode string, c Counters, err error) {
	var s statsJSON
	if err := json.Unmarshal(out, &s); err != nil {
		return "", c, fmt.Errorf("kbridge stats JSON: %v", err)
	}
	if len(s.Queues) == 0 {
		return "", c, errors.New("kbridge stats: no queues")
	}
	c.Bounds = s.Bounds
	c.DropBy = map[string]uint64{}
	c.Residence = make([]uint64, len(s.Bounds))
	for _, q := range s.Queues {
		c.ToKernel += q.ToKernel
		c.FromKernel += q.FromKernel
		c.Parks += q.Parks
		c.Wakeups += q.Wakeups
		c.Timeouts += q.Timeouts
		c.Sleeps += q.Sleeps
		c.SpinNs += q.SpinNs
		c.Kicks += q.App.Kicks
		c.AppDrops += q.App.Dropped
		for reason, d := range q.Drops {
			c.Drops += d
			c.DropBy[reason] += d
		}
		c.DropBy["app_to_kernel"] += q.App.Dropped
		for i := range q.Residence {
			if i < len(c.Residence) {
				c.Residence[i] += q.Residence[i]
			}
		}
	}
	return s.Queues[0].Mode, c, nil
}

var reVhostConnected = regexp.MustCompile(`msg="vhost-user frontend connected".*?\sfeatures=(\S+)`)

// vhostFeatures returns the virtio features of the last "vhost-user frontend
// connected" line of a kbridge log (mode vhost), or "" if there is none. The
// last one counts: an app that reconfigures its port (testpmd turning
// offloads on) reconnects with the features it then asks for.
func vhostFeatures(log string) string {
	all := reVhostConnected.FindAllStringSubmatch(log, -1)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1][1]
}

// sub returns the counters moved between an earlier snapshot b and c.
func (c Counters) sub(b Counters) Counters {
	d := Counters{
		ToKernel: c.ToKernel - b.ToKernel, FromKernel: c.FromKernel - b.FromKernel,
		Parks: c.Parks - b.Parks, Wakeups: c.Wakeups - b.Wakeups, Timeouts: c.Timeouts - b.Timeouts,
		Sleeps: c.Sleeps - b.Sleeps, Kicks: c.Kicks - b.Kicks, Drops: c.Drops - b.Drops,
		AppDrops: c.AppDrops - b.AppDrops, SpinNs: c.SpinNs - b.SpinNs, Bounds: c.Bounds,
	}
	d.DropBy = map[string]uint64{}
	for k, v := range c.DropBy {
		if v -= b.DropBy[k]; v != 0 {
			d.DropBy[k] = v
		}
	}
	d.Residence = make([]uint64, len(c.Residence))
	for i := range c.Residence {
		d.Residence[i] = c.Residence[i]
		if i < len(b.Residence) {
			d.Residence[i] -= b.Residence[i]
		}
	}
	return d
}

// residenceQuantile returns the upper bound (ns) of the histogram bucket that
// holds quantile q, or 0 if the histogram is empty.
func (c Counters) residenceQuantile(q float64) uint64 {
	var total uint64
	for _, n := range c.Residence {
		total += n
	}
	if total == 0 {
		return 0
	}
	var cum uint64
	for i, n := range c.Residence {
		cum += n
		if float64(cum) >= q*float64(total) && i < len(c.Bounds) {
			return c.Bounds[i]
		}
	}
	return c.Bounds[len(c.Bounds)-1]
}

// cdfPoints turns latencies into at most about maxPoints (x, F(x)) pairs of
// the empirical CDF: evenly spaced in rank, plus every one of the last
// tailPoints observations so the tail keeps its shape.
func cdfPoints(lat []float64, maxPoints, tailPoints int) (xs, fs []float64) {
	s := append([]float64(nil), lat...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return nil, nil
	}
	step := 1
	if maxPoints > 0 && n > maxPoints {
		step = n / maxPoints
	}
	for i := 0; i < n; i++ {
		if i%step == 0 || i >= n-tailPoints || i == n-1 {
			xs = append(xs, s[i])
			fs = append(fs, float64(i+1)/float64(n))
		}
	}
	return xs, fs
}

// dropsText renders the drops of a delta: "0", or "12 (ring_full 10, no_mbuf 2)".
func (c Counters) dropsText() string {
	n := c.Drops + c.AppDrops
	if n == 0 {
		return "0"
	}
	var parts []string
	for k, v := range c.DropBy {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

// kbDropsText renders kbridge's own drops of a delta (not the app's): "0", or
// "12 (ring_full 10, no_mbuf 2)".
func (c Counters) kbDropsText() string {
	if c.Drops == 0 {
		return "0"
	}
	var parts []string
	for k, v := range c.DropBy {
		if v != 0 && k != "app_to_kernel" {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", c.Drops, strings.Join(parts, ", "))
}

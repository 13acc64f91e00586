package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/daemon"
)

// watch redraws per-queue rates every interval, like top, until
// interrupted: each port's, for a kbridge serving several.
func watch(sock string, interval time.Duration, out io.Writer) error {
	prev, err := readByPort(sock)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-sigs:
			return nil
		case <-tick.C:
		}
		cur, err := daemon.ReadStatuses(sock)
		if err != nil {
			return err
		}
		now := time.Now()
		fmt.Fprint(out, "\033[H\033[2J")
		next := make(map[string]daemon.Status, len(cur))
		for _, c := range cur {
			if p, ok := prev[c.Port]; ok {
				renderRates(out, p, c, now.Sub(last))
			}
			next[c.Port] = c
		}
		prev, last = next, now
	}
}

// readByPort reads each port's status, by port.
func readByPort(sock string) (map[string]daemon.Status, error) {
	all, err := daemon.ReadStatuses(sock)
	if err != nil {
		return nil, err
	}
	m := make(map[string]daemon.Status, len(all))
	for _, s := range all {
		m[s.Port] = s
	}
	return m, nil
}

func renderRates(w io.Writer, prev, cur daemon.Status, dt time.Duration) {
	sec := dt.Seconds()
	rate := func(a, b uint64) float64 { return float64(b-a) / sec }
	pool := fmt.Sprintf("%d/%d in use", cur.PoolInUse, cur.PoolSize)
	if cur.PoolInUse < 0 { // kbridge.h version 7: the app's pool, never called
		pool = fmt.Sprintf("of %d, the app's", cur.PoolSize)
	}
	fmt.Fprintf(w, "kbridge  port %s <-> %s   app pid %d   mempool %s   (every %v, Ctrl-C quits)\n\n",
		cur.Port, cur.Interface, cur.AppPID, pool, dt.Round(time.Millisecond))
	fmt.Fprintf(w, "%-5s %-9s %11s %11s %10s %10s %9s %9s %9s %11s %11s\n",
		"queue", "mode", "to_kern/s", "from_kern/s", "Mbit/s in", "Mbit/s out", "drops/s", "parks/s", "kicks/s", "resid p50", "resid p99")
	for i, q := range cur.Queues {
		if i >= len(prev.Queues) {
			break
		}
		p := prev.Queues[i]
		kicks := 0.0 // mode vhost: the app keeps no kick count
		if q.App != nil && p.App != nil {
			kicks = rate(p.App.Kicks, q.App.Kicks)
		}
		hist := make([]uint64, len(q.Residence))
		for k := range hist {
			if k < len(p.Residence) {
				hist[k] = q.Residence[k] - p.Residence[k]
			}
		}
		fmt.Fprintf(w, "%-5d %-9s %11.0f %11.0f %10.1f %10.1f %9.0f %9.0f %9.0f %11s %11s\n",
			q.Queue, q.Mode,
			rate(p.ToKernelPackets, q.ToKernelPackets), rate(p.FromKernelPackets, q.FromKernelPackets),
			rate(p.ToKernelBytes, q.ToKernelBytes)*8/1e6, rate(p.FromKernelBytes, q.FromKernelBytes)*8/1e6,
			rate(p.TotalDrops(), q.TotalDrops()), rate(p.Parks, q.Parks), kicks,
			quantile(hist, cur.ResidenceBoundsNs, 0.50), quantile(hist, cur.ResidenceBoundsNs, 0.99))
	}
	fmt.Fprintln(w)
	for _, q := range cur.Queues {
		fmt.Fprintf(w, "queue %d drops since start:", q.Queue)
		for _, r := range sortedKeys(q.Drops) {
			fmt.Fprintf(w, " %s=%d", r, q.Drops[r])
		}
		fmt.Fprintln(w)
	}
	for i, q := range cur.Queues {
		if i >= len(prev.Queues) {
			break
		}
		o, po := q.Offload, prev.Queues[i].Offload
		fmt.Fprintf(w, "queue %d offloads/s: merged writes %.0f (%.0f pkts), split reads %.0f (%.0f frames), tso to app %.0f, "+
			"csum completed from kernel %.0f to kernel %.0f; since start: fallbacks %d, bad checksums %d\n",
			q.Queue, rate(po.MergedWrites, o.MergedWrites), rate(po.MergedPackets, o.MergedPackets),
			rate(po.SplitReads, o.SplitReads), rate(po.SplitFrames, o.SplitFrames), rate(po.TSOToApp, o.TSOToApp),
			rate(po.CsumFromKernel, o.CsumFromKernel), rate(po.CsumToKernel, o.CsumToKernel), o.Fallbacks, o.BadCsum)
		if c, pc := q.CoPP, prev.Queues[i].CoPP; c != nil && pc != nil {
			renderCoPP(w, q.Queue, pc, c, rate)
		}
	}
	renderSockets(w, cur.Sockets)
}

// renderCoPP shows one queue's classes per second (passed, policed, dropped
// for room each way) and names those being policed now, in this interval.
func renderCoPP(w io.Writer, queue int, p, c *copp.Snapshot, rate func(a, b uint64) float64) {
	fmt.Fprintf(w, "queue %d copp/s (passed/policed/no room to kernel/no room from kernel):", queue)
	var now []string
	for k, name := range copp.ClassNames {
		fmt.Fprintf(w, " %s %.0f/%.0f/%.0f/%.0f", name, rate(p.Passed[k], c.Passed[k]), rate(p.Policed[k], c.Policed[k]),
			rate(p.ToKernelRoom[k], c.ToKernelRoom[k]), rate(p.FromKernelRoom[k], c.FromKernelRoom[k]))
		if c.Policed[k] > p.Policed[k] {
			now = append(now, name)
		}
	}
	if len(now) == 0 {
		now = []string{"none"}
	}
	fmt.Fprintf(w, "; policing now: %s\n", strings.Join(now, ", "))
	fmt.Fprintf(w, "queue %d unwanted/s (no socket for them):", queue)
	for k, name := range copp.UnwantedWhyNames {
		fmt.Fprintf(w, " %s %.0f", name, rate(p.Unwanted[k], c.Unwanted[k]))
	}
	fmt.Fprintln(w)
}

// renderSockets shows whether frames are judged by the host's sockets, per
// protocol, and what the last reading found.
func renderSockets(w io.Writer, s *daemon.Sockets) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "sockets: tcp %s; udp %s; %d TCP and %d UDP ports, %d local prefixes, %d BGP sessions, %d packet filters; read in %d us, %d errors\n",
		s.TCP, s.UDP, s.TCPPorts, s.UDPPorts, s.LocalPrefixes, s.BGPSessions, s.PacketFilters, s.ReadUs, s.Errors)
}

// quantile returns the upper bound of the histogram bucket holding quantile
// q, as "<N" (a bucket bound, not an interpolation), or "-" when empty.
func quantile(hist, bounds []uint64, q float64) string {
	var total uint64
	for _, v := range hist {
		total += v
	}
	if total == 0 {
		return "-"
	}
	want := uint64(q*float64(total) + 0.5)
	var n uint64
	for i, v := range hist {
		n += v
		if n >= want && i < len(bounds) {
			if i == len(hist)-1 {
				return ">" + time.Duration(bounds[i-1]).String()
			}
			return "<" + time.Duration(bounds[i]).String()
		}
	}
	return "-"
}

func sortedKeys(m map[string]uint64) []string {
	return slices.Sorted(maps.Keys(m))
}

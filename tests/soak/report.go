package main

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

const tableHead = "| window | NFS ls -R ok / failed | big.bin ok / mismatch / failed | iperf3 Gbit/s to peer / from peer | sockperf p50 / p99 us | kbridge drops by reason | app to_kernel_dropped | park timeouts | pool drift | reloads ok / failed |\n" +
	"|---|---|---|---|---|---|---|---|---|---|"

// row is the window's line of the table.
func (w *window) row() string {
	mins := func(d time.Duration) string { return fmt.Sprintf("%.1f", d.Minutes()) }
	iperf := "-"
	if len(w.up)+len(w.down) > 0 {
		iperf = fmt.Sprintf("%.2f / %.2f (%d+%d runs)", mean(w.up), mean(w.down), len(w.up), len(w.down))
	}
	if w.iperfFail > 0 {
		iperf += fmt.Sprintf(", %d failed", w.iperfFail)
	}
	pp := "-"
	if len(w.p50) > 0 {
		pp = fmt.Sprintf("%.1f / %.1f (worst p99 %.1f, %d runs)", median(w.p50), median(w.p99), maxOf(w.p99), len(w.p50))
	}
	if w.ppFail > 0 {
		pp += fmt.Sprintf(", %d failed", w.ppFail)
	}
	drift := "not measured"
	if w.drift != nil {
		drift = fmt.Sprintf("%+d (in use %d, in rings %d)", *w.drift, w.inUse, w.inRings)
	}
	nfs := fmt.Sprintf("%d / %d", w.nfsOK, w.nfsFail)
	if len(w.nfsSec) > 0 {
		nfs += fmt.Sprintf(" (median %.1f s)", median(w.nfsSec))
	}
	read := fmt.Sprintf("%d / %d / %d", w.readOK, w.readMismatch, w.readFail)
	if len(w.readMBs) > 0 {
		read += fmt.Sprintf(" (median %.0f MB/s)", median(w.readMBs))
	}
	return fmt.Sprintf("| %s-%s min | %s | %s | %s | %s | %s | %d | %d | %s | %d / %d |",
		mins(w.from), mins(w.to), nfs, read, iperf, pp, dropsText(w.drops), w.appDropped, w.timeouts, drift, w.reloadOK, w.reloadFail)
}

func dropsText(m map[string]uint64) string {
	var keys []string
	var total uint64
	for k, v := range m {
		if v > 0 {
			keys = append(keys, k)
			total += v
		}
	}
	if total == 0 {
		return "0"
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// report is the whole markdown report.
func (s *soak) report(startUTC time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# kbridge soak, mode %s, %s\n\n", s.side.mode, startUTC.Format("2006-01-02 15:04 UTC"))
	rev, _ := exec.Command("git", "-C", s.root, "describe", "--always", "--dirty").Output()
	kern, _ := exec.Command("uname", "-r").Output()
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "- command: `%s` (SOAK_MINUTES=%g, windows of %g min)\n", s.command, s.total.Minutes(), s.window.Minutes())
	fmt.Fprintf(&b, "- tree: %s; host %s, kernel %s, %d CPUs (app lcore on CPU %s, kbridge and clients on %s)\n",
		strings.TrimSpace(string(rev)), host, strings.TrimSpace(string(kern)), numCPU(), s.appCPU, s.otherCPUs)
	if s.side.mode == "vhost" {
		b.WriteString("- mode vhost: the app is an unmodified `dpdk-testpmd` (io forwarding kbt-nic <-> a net_virtio_user port, server=1, TSO and checksum offloads on) and kbridge its vhost-user backend as the client (`vhost.client: true`); config tests/testbed/kbridge-vhost.yaml so changed\n")
	} else {
		b.WriteString("- mode ring: the app is the reference app (`kbridge-refapp`, kbridge.h), kbridge its DPDK secondary; config tests/testbed/kbridge.yaml\n")
	}
	fmt.Fprintf(&b, "- ran %v; load average at the end: %s\n", time.Since(s.started).Round(time.Second), harness.LoadAvg())
	b.WriteString("- workloads, concurrently, clients pinned with `taskset -c " + s.otherCPUs + "` in kbt-dut: `nfs-ls -R` (6001 entries checked), `nfs-cat big.bin` (sha256 checked), `iperf3 -t 5` alternating directions, `sockperf pp --tcp -t 5`; a policy reload every minute (adaptive -> interrupt -> busy -> adaptive ..., SIGHUP); a kbridge restart at 45% of the run and an app restart at 60% (" + map[bool]string{true: "kbridge exits with the app and is restarted after it", false: "kbridge serves on and takes the new app's port"}[s.side.kbridgeFollows] + ")\n")
	b.WriteString("- pool drift: " + s.side.pool + "\n")
	b.WriteString("- drops and park timeouts are deltas of `kbridge stats` over the window, summed across kbridge restarts; `ring_full` and the app's `to_kernel_dropped` are overload drops at full rings under iperf3 (kbridge's worker shares one CPU with every client and server), which TCP recovers: counted, not leaks or corruption; park timeouts are parks that ended after `policy.park_timeout` (100 ms) with nothing to do, as idle adaptive and interrupt workers do\n\n")
	b.WriteString(tableHead + "\n")
	var nfsOK, nfsFail, rOK, rMis, rFail int
	for _, w := range s.windows {
		b.WriteString(w.row() + "\n")
		nfsOK += w.nfsOK
		nfsFail += w.nfsFail
		rOK += w.readOK
		rMis += w.readMismatch
		rFail += w.readFail
	}
	fmt.Fprintf(&b, "\nTotals: NFS listings %d ok, %d failed; big.bin reads %d ok, %d mismatched, %d failed.\n", nfsOK, nfsFail, rOK, rMis, rFail)
	b.WriteString("\n## Events\n\n")
	for _, e := range s.events {
		b.WriteString("- " + e + "\n")
	}
	var errs []string
	for _, w := range s.windows {
		for _, list := range [][]string{w.nfsErrs, w.readErrs, w.iperfErrs, w.ppErrs} {
			errs = append(errs, list...)
		}
	}
	if len(errs) > 0 {
		b.WriteString("\n## Failed client runs (not data errors)\n\n")
		for _, e := range errs {
			b.WriteString("- " + e + "\n")
		}
	}
	b.WriteString("\n## Result\n\n")
	if len(s.failures) == 0 {
		b.WriteString("PASS: no leak, no data mismatch, no crash.\n")
	} else {
		b.WriteString("FAIL:\n")
		for _, f := range s.failures {
			b.WriteString("- " + f + "\n")
		}
	}
	return b.String()
}

func numCPU() int {
	n := 0
	if data, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		for _, part := range strings.Split(strings.TrimSpace(string(data)), ",") {
			var a, z int
			if c, _ := fmt.Sscanf(part, "%d-%d", &a, &z); c == 2 {
				n += z - a + 1
			} else {
				n++
			}
		}
	}
	return n
}

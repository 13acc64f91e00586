package main

// The markdown report: machine, result tables, the targets.

import (
	"fmt"
	"math"
	"strings"
)

// Machine describes where and how the run happened.
type Machine struct {
	NCPU               int
	Model, Kernel, HZ  string
	DPDK, Kbridge      string
	Command            string // as executed
	Make               string // the make command that ran it, if any
	Placement          string
	LoadStart, LoadEnd string
	BusyStart, BusyEnd string // other processes above 10% of a core
	Started            string // UTC
	Duration           string
	Quick, Interrupted bool
	PlotFile           string
	RawDir             string
}

// Target is one goal of an issue checked against the run.
type Target struct {
	Issue             string
	Name, Value, Goal string
	Verdict           string // "met ...", "missed ...", "n/a ..."
}

func (t Target) Met() bool { return strings.HasPrefix(t.Verdict, "met") }

// subject is the forwarder the targets are about: kbridge's default mode.
const subject = "kbridge-adaptive"

// evalTargets checks the targets for kbridge-adaptive; a
// missing figure makes a target "n/a" with the reason.
func evalTargets(res map[string]*Result) []Target {
	get := func(name, key string) (*Result, string) {
		r := res[name]
		if r == nil {
			return nil, name + " not measured"
		}
		if e := r.Errs[key]; e != "" {
			return nil, name + " failed"
		}
		if why := r.Skipped[key]; why != "" {
			return nil, name + ": " + why
		}
		if !measured(r, key) {
			return nil, name + " not measured"
		}
		return r, ""
	}
	na := func(why ...string) string {
		var w []string
		for _, s := range why {
			if s != "" {
				w = append(w, s)
			}
		}
		return "n/a (" + strings.Join(w, "; ") + ")"
	}
	var ts []Target
	// ratio: subject's figure over ref's, against limit (atLeast: >=, else <=).
	ratio := func(issue, name, goal, ref, key string, pick func(r *Result) float64, limit float64, atLeast bool, extra func() string) {
		t := Target{Issue: issue, Name: name, Goal: goal}
		ra, why := get(subject, key)
		rb, why2 := get(ref, key)
		if ra == nil || rb == nil || pick(rb) == 0 {
			t.Value, t.Verdict = "-", na(why, why2)
			ts = append(ts, t)
			return
		}
		v := pick(ra) / pick(rb)
		t.Value = fmt.Sprintf("%.2fx", v)
		if extra != nil {
			t.Value += extra()
		}
		ok := v <= limit
		if atLeast {
			ok = v >= limit
		}
		if ok {
			t.Verdict = fmt.Sprintf("met (by %.2fx)", math.Abs(limit-v))
		} else {
			t.Verdict = fmt.Sprintf("missed by %.2fx", math.Abs(v-limit))
		}
		ts = append(ts, t)
	}
	also := func(ref, key string, pick func(r *Result) float64, label string) func() string {
		return func() string {
			r, _ := get(ref, key)
			d, _ := get("direct", key)
			if r == nil || d == nil || pick(d) == 0 {
				return ""
			}
			return fmt.Sprintf(" (%s %.2fx)", label, pick(r)/pick(d))
		}
	}
	up := func(r *Result) float64 { return r.Up }
	down := func(r *Result) float64 { return r.Down }
	read := func(r *Result) float64 { return r.NFSRead }
	ratio("8", "iperf3 to peer: kbridge-adaptive / direct", ">= 0.8x", "direct", wUp, up, 0.8, true, also("testpmd", wUp, up, "testpmd"))
	ratio("8", "iperf3 to peer: kbridge-adaptive / testpmd", ">= 3x", "testpmd", wUp, up, 3, true, nil)
	ratio("8", "iperf3 from peer: kbridge-adaptive / direct", ">= 0.8x", "direct", wDown, down, 0.8, true, also("testpmd", wDown, down, "testpmd"))
	ratio("8", "iperf3 from peer: kbridge-adaptive / testpmd", ">= 3x", "testpmd", wDown, down, 3, true, nil)
	ratio("8", "NFS read of big.bin (MB/s): kbridge-adaptive / direct", ">= 0.8x", "direct", wNFSRead, read, 0.8, true, also("testpmd", wNFSRead, read, "testpmd"))

	// Latency: the subject against a reference, in microseconds.
	lat := func(issue, name, goal, key, ref string, pick func(r *Result) float64, slack float64) {
		t := Target{Issue: issue, Name: name, Goal: goal}
		a, why := get(subject, key)
		b, why2 := get(ref, key)
		if a == nil || b == nil {
			t.Value, t.Verdict = "-", na(why, why2)
			ts = append(ts, t)
			return
		}
		va, limit := pick(a), pick(b)+slack
		t.Value = fmt.Sprintf("%.1f us vs %s %.1f us", va, ref, pick(b))
		if va <= limit {
			t.Verdict = fmt.Sprintf("met (by %.1f us)", limit-va)
		} else {
			t.Verdict = fmt.Sprintf("missed by %.1f us (%+.0f%%)", va-limit, (va/limit-1)*100)
		}
		ts = append(ts, t)
	}
	lat("11", "ping-pong p50: kbridge-adaptive vs testpmd", "<= testpmd", wPP, "testpmd", func(r *Result) float64 { return r.PP.P50 }, 0)
	lat("11", "ping-pong p99: kbridge-adaptive vs testpmd", "<= testpmd", wPP, "testpmd", func(r *Result) float64 { return r.PP.P99 }, 0)
	lat("11", "cold p99: kbridge-adaptive vs testpmd", "<= testpmd", wCold, "testpmd", func(r *Result) float64 { return r.Cold.P99 }, 0)
	lat("11", "cold p99: kbridge-adaptive vs direct + 100 us", "<= direct + 100 us", wCold, "direct", func(r *Result) float64 { return r.Cold.P99 }, 100)
	nfs := func(r *Result) float64 { return r.NFS }
	ratio("11", "NFS ls -R: kbridge-adaptive / direct", "<= 1.15x", "direct", wNFS, nfs, 1.15, false, also("testpmd", wNFS, nfs, "testpmd"))

	t := Target{Issue: "11", Name: "idle CPU: kbridge-adaptive", Goal: "<= 1% of one core"}
	if r, why := get(subject, wIdle); r == nil {
		t.Value, t.Verdict = "-", na(why)
	} else {
		v := r.CPU[wIdle]
		t.Value = fmt.Sprintf("%.2f%%", v)
		if tp, _ := get("testpmd", wIdle); tp != nil {
			t.Value += fmt.Sprintf(" (testpmd %.0f%%)", tp.CPU[wIdle])
		}
		if v <= 1 {
			t.Verdict = fmt.Sprintf("met (by %.2f points)", 1-v)
		} else {
			t.Verdict = fmt.Sprintf("missed by %.2f points", v-1)
		}
	}
	ts = append(ts, t)
	lat("11", "HTTP keep-alive p99: kbridge-adaptive vs testpmd", "<= testpmd", wHTTP, "testpmd", func(r *Result) float64 { return r.HTTP.P99 }, 0)
	// CPU per Gbit/s: the offloaded kernel side against the same kbridge
	// with its offloads off (kbridge-plain, one frame per syscall).
	for _, d := range []struct {
		dir, key string
		gbps     func(r *Result) float64
	}{{"to peer", wUp, up}, {"from peer", wDown, down}} {
		pick := func(r *Result) float64 { return cpuPerGbit(r.CPU[d.key], d.gbps(r)) }
		ratio("8", "CPU per Gbit/s "+d.dir+": kbridge-adaptive / kbridge-plain (offloads off)", "<= 0.5x", "kbridge-plain", d.key,
			func(r *Result) float64 {
				if v := pick(r); !math.IsNaN(v) {
					return v
				}
				return 0
			}, 0.5, false, nil)
	}

	return ts
}

// cell renders a figure, the workload's error, or why it did not run.
func cell(r *Result, key string, format string, v float64) string {
	if e, ok := r.Errs[key]; ok {
		return "error: " + shorten(e, 70)
	}
	if why := r.Skipped[key]; why != "" {
		return why
	}
	return fmt.Sprintf(format, v)
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "|", "/")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}

// render writes the whole report.
func render(m Machine, order []string, res map[string]*Result, d Durations) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# kbridge benchmark, %s\n\n", m.Started)
	if m.Interrupted {
		w("**Interrupted: the figures below are incomplete.**\n\n")
	}
	w("- machine: %d CPUs, %s; kernel %s, HZ=%s; DPDK %s; kbridge %s\n", m.NCPU, m.Model, m.Kernel, m.HZ, m.DPDK, m.Kbridge)
	cmd := "`" + m.Command + "`"
	if m.Make != "" {
		cmd = "`" + m.Make + "` (runs " + cmd + ")"
	}
	if m.Quick {
		cmd += "; quick: shortened workloads, a smoke test"
	}
	w("- command: %s\n", cmd)
	w("- CPU placement (tests/testbed/README.md): %s\n", m.Placement)
	w("- load average (1/5/15 min) at start: %s; at end: %s\n", m.LoadStart, m.LoadEnd)
	if m.BusyStart != "" || m.BusyEnd != "" {
		w("- other processes above 10%% of a core (2 s sample, not the benchmark's) at start: %s; at end: %s\n", or(m.BusyStart, "?"), or(m.BusyEnd, "?"))
	}
	w("- run time: %s\n\n", m.Duration)

	var rows []string // forwarders of the comparison; bed-ceiling has its own table
	var ceil *Result
	for _, n := range order {
		if res[n].Ceiling != nil || n == "bed-ceiling" {
			ceil = res[n]
			continue
		}
		rows = append(rows, n)
	}

	w("## Results\n\n")
	w("### Latency\n\n")
	w("One-way (half the sockperf round trip) in microseconds. Continuous ping-pong: %v back to back; cold: `--mps 10` for %v (each request after ~100 ms of silence). ", d.PP, d.Cold)
	w("HTTP: `wrk -t1 -c1 -d%v --latency` (one keep-alive connection, back-to-back GETs of a %d-byte body from the bench's server in kbt-peer): full round trip in us, and requests/s.\n\n", d.HTTP, len(httpBody))
	w("| forwarder | pp p50 | pp p99 | pp p99.9 | pp max | cold p50 | cold p99 | cold max | HTTP p50 | HTTP p99 | HTTP req/s |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range rows {
		r := res[n]
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n,
			cell(r, wPP, "%.1f", r.PP.P50), dash(r, wPP, "%.1f", r.PP.P99), dash(r, wPP, "%.1f", r.PP.P999), dash(r, wPP, "%.1f", r.PP.Max),
			cell(r, wCold, "%.1f", r.Cold.P50), dash(r, wCold, "%.1f", r.Cold.P99), dash(r, wCold, "%.1f", r.Cold.Max),
			cell(r, wHTTP, "%.1f", r.HTTP.P50), dash(r, wHTTP, "%.1f", r.HTTP.P99), dash(r, wHTTP, "%.0f", r.HTTP.RPS))
	}

	w("\n### Throughput\n\n")
	w("NFS ls -R: wall time of `nfs-ls -R` of %d entries, best of %d. NFS read: `nfs-cat` of the 256 MiB big.bin (byte count checked), MB/s, best of %d. ", nfsEntries, d.NFSRuns, d.NFSReadRuns)
	w("iperf3: %v, Gbit/s at the receiver; `-P 4` is four streams from the peer (`-R`). `x direct`, `x testpmd`: ratio to that forwarder in this run (for a row at MTU 9000, `x direct` is to direct-9000; for a row on the offload bed, to direct-gro). ", d.Iperf)
	w("Drops: deltas of `kbridge stats` over the `-P 4` run, kbridge's own by reason, and the app's `to_kernel_dropped` (its ring to kbridge was full).\n\n")
	w("| forwarder | NFS ls -R (s) | x direct | NFS read (MB/s) | x direct | iperf3 to peer | x direct | x testpmd | iperf3 from peer | x direct | x testpmd | iperf3 -P 4 from peer | x direct | x testpmd | kbridge drops (-P 4) | app to_kernel drops (-P 4) |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range rows {
		r := res[n]
		nfs := cell(r, wNFS, "%.2f", r.NFS)
		if r.Errs[wNFS] == "" && r.NFSRuns == 1 && d.NFSRuns > 1 {
			nfs += " (1 run)"
		}
		read := cell(r, wNFSRead, "%.0f", r.NFSRead)
		if r.Errs[wNFSRead] == "" && r.ReadRuns == 1 && d.NFSReadRuns > 1 {
			read += " (1 run)"
		}
		x := func(key, ref string, pick func(*Result) float64) string {
			return ratioCell(res, n, ref, key, pick)
		}
		floor := floorOf(n) // a jumbo row beside the floor at its MTU
		xtp := func(key string, pick func(*Result) float64) string {
			if floor != "direct" {
				return "-" // testpmd ran at 1500
			}
			return x(key, "testpmd", pick)
		}
		nfsT := func(r *Result) float64 { return r.NFS }
		readT := func(r *Result) float64 { return r.NFSRead }
		up := func(r *Result) float64 { return r.Up }
		down := func(r *Result) float64 { return r.Down }
		down4 := func(r *Result) float64 { return r.Down4 }
		kbd, appd := "-", "-"
		if c, ok := r.Counters[wDown4]; ok {
			kbd, appd = c.kbDropsText(), fmt.Sprint(c.AppDrops)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n,
			nfs, x(wNFS, floor, nfsT), read, x(wNFSRead, floor, readT),
			cell(r, wUp, "%.2f", r.Up), x(wUp, floor, up), xtp(wUp, up),
			cell(r, wDown, "%.2f", r.Down), x(wDown, floor, down), xtp(wDown, down),
			cell(r, wDown4, "%.2f", r.Down4), x(wDown4, floor, down4), xtp(wDown4, down4),
			kbd, appd)
	}
	if kni := anyKNI(rows); kni {
		w("\n`kni-*` rows list the NFS tree and read big.bin once, with a 10 min timeout: with a 1 or 4 ms poll interval every NFS round trip waits for the poll, so one run is enough to show the pathology.\n")
	}

	w("\n### CPU of the forwarder process (%% of one core)\n\n")
	w("utime+stime of the whole forwarder process (kbridge's PID, or testpmd's) from /proc/PID/stat over each workload. ")
	w("Idle: %v after 1 s without traffic. `CPU/Gbit` is the forwarder's CPU during an iperf3 run divided by that run's Gbit/s: %% of a core per Gbit/s (lower is better). ", d.Idle)
	w("`app lcore` is the reference DPDK app's own busy-polling lcore (the customer's app, present with every kbridge mode; testpmd has no separate app); for kbridge-vhost it is the whole testpmd process, the unmodified app whose virtio-user port kbridge serves (its forwarding lcore polls both ports).\n\n")
	w("| forwarder | idle | NFS ls -R | NFS read | ping-pong | cold | HTTP | iperf3 to peer | iperf3 from peer | -P 4 from peer | CPU/Gbit to peer | CPU/Gbit from peer | CPU/Gbit -P 4 | app lcore (idle) |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range rows {
		r := res[n]
		row := []string{n}
		for _, k := range []string{wIdle, wNFS, wNFSRead, wPP, wCold, wHTTP, wUp, wDown, wDown4} {
			row = append(row, cpuCell(r, k))
		}
		for _, k := range []struct {
			key  string
			gbps float64
		}{{wUp, r.Up}, {wDown, r.Down}, {wDown4, r.Down4}} {
			v, ok := r.CPU[k.key]
			if _, bad := r.Errs[k.key]; bad || !ok {
				row = append(row, "-")
			} else if c := cpuPerGbit(v, k.gbps); math.IsNaN(c) {
				row = append(row, "-")
			} else {
				row = append(row, fmt.Sprintf("%.1f", c))
			}
		}
		if r.AppCPU >= 0 {
			row = append(row, fmt.Sprintf("%.0f", r.AppCPU))
		} else {
			row = append(row, "-")
		}
		w("| %s |\n", strings.Join(row, " | "))
	}

	w("\n### Placement\n\n")
	w("Where each forwarder's pieces ran: the CPUs each thread may use (`Cpus_allowed_list` in /proc/PID/task/*/status, read while it was measured). ")
	w("testpmd: `rte-worker-1` (`lcore-worker-1` in other DPDK versions) is the forwarding lcore, `dpdk-testpmd` the main lcore, the rest EAL control threads; the reference app polls on its main thread (`kbridge-refapp`); kbridge's Go threads (`kbridge`) carry its workers, beside the EAL threads of a DPDK secondary process. kbridge-vhost: the app is testpmd (KBT_MODE=vhost, io forwarding between kbt-nic and its virtio-user port, same `--lcores` as the testpmd row), and kbridge runs its own EAL (a primary, `--in-memory`) with the vhost-user thread of librte_vhost (`vhost-events`; `vhost-reconn` too when kbridge is the client).\n\n")
	w("| forwarder | forwarder process threads | app threads (reference app; testpmd for kbridge-vhost) | clients | servers (kbt-peer) |\n|---|---|---|---|---|\n")
	for _, n := range order {
		p := res[n].Place
		if p == (Placement{}) {
			continue
		}
		w("| %s | %s | %s | %s | %s |\n", n, or(p.Forwarder, "-"), or(p.App, "-"), or(p.Clients, "-"), or(p.Servers, "-"))
	}
	for _, n := range order {
		if f := res[n].Features; f != "" {
			w("\n%s: virtio features kbridge negotiated with testpmd's virtio-user port (kbridge's log): `%s`.\n", n, f)
		}
	}

	if ceil != nil {
		w("\n### The test bed's ceiling\n\n")
		w("testpmd alone on kbt-nic through net_af_packet, with no kernel side in kbt-dut (no TAP, no kb0): what the bed itself costs any forwarder built on net_af_packet. ")
		w("Latency: testpmd `5tswap` sends every frame back with MACs, IPs and ports swapped; a ping from the peer to 198.18.0.2 comes back as a request from 198.18.0.2, the peer's kernel answers it, and the answer comes back as the reply: one ping crosses testpmd twice, like a request and its response through a forwarder, without the far end's kernel stack and process wakeup. Shown as RTT/2, the unit of the sockperf columns. ")
		w("Throughput: testpmd `txonly` sends 1500-byte UDP frames as fast as net_af_packet takes them; the rate is what kbt-wire in kbt-peer received (the peer's IP layer then drops them). One direction only: the bed has no generator that could fill net_af_packet's receive side without a kernel stack in the way.\n\n")
		c := ceil.Ceiling
		if c == nil {
			c = &Ceiling{}
			for _, k := range allWorkloads {
				if e := ceil.Errs[k]; e != "" {
					c.PingErr, c.TxErr = e, e
					break
				}
			}
		}
		w("| measurement | p50 | p99 | p99.9 | max | Gbit/s | Mpps | testpmd CPU |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		if c.PingErr != "" && c.Ping.N == 0 {
			w("| ping through 5tswap, one-way (us) | error: %s | - | - | - | - | - | - |\n", shorten(c.PingErr, 70))
		} else {
			note := ""
			if c.PingErr != "" {
				note = " (" + shorten(c.PingErr, 60) + ")"
			}
			w("| ping through 5tswap, one-way (us), %d replies%s | %.1f | %.1f | %.1f | %.1f | - | - | - |\n", c.Ping.N, note, c.Ping.P50, c.Ping.P99, c.Ping.P999, c.Ping.Max)
		}
		if c.TxErr != "" {
			w("| txonly to the peer, 1500-byte frames | - | - | - | - | error: %s | - | - |\n", shorten(c.TxErr, 70))
		} else {
			w("| txonly to the peer, 1500-byte frames | - | - | - | - | %.2f | %.3f | %.0f%% |\n", c.TxGbps, c.TxMpps, c.TxCPU)
		}
	}

	var foreign []string
	for _, n := range order {
		if f := res[n].Foreign; f != "" {
			foreign = append(foreign, fmt.Sprintf("- %s: %s", n, f))
		}
	}
	if len(foreign) > 0 {
		w("\nLoad this benchmark does not control: processes outside the bed's namespaces above 5%% of a core, averaged over each forwarder's measurements (kernel threads may be working for the bed; processes that started and ended within the window are not seen), then each CPU's use over the same window from /proc/stat (the bed's own work included; steal: time the hypervisor ran another guest):\n\n%s\n", strings.Join(foreign, "\n"))
	}

	w("\n## Targets\n\n")
	w("For kbridge-adaptive, kbridge's default mode, against direct and testpmd measured in this run.\n\n")
	w("| issue | target | goal | this run | verdict |\n|---|---|---|---|---|\n")
	for _, t := range evalTargets(res) {
		w("| %s | %s | %s | %s | %s |\n", t.Issue, t.Name, t.Goal, t.Value, t.Verdict)
	}

	if kc := kbridgeRows(order, res); kc != "" {
		w("\n## kbridge counters per workload\n\n")
		w("Deltas of `kbridge stats` over each workload. Residence = app enqueue to TAP write (kernel-bound direction), as the upper bound of the histogram bucket holding p50/p99.\n\n")
		w("| forwarder | workload | pkts to kernel | pkts from kernel | parks | wakeups | park timeouts | sleeps | app kicks | drops (reason) | residence p50 | residence p99 |\n")
		w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		b.WriteString(kc)
	}

	var errs []string
	for _, n := range order {
		for _, k := range allWorkloads {
			if e := res[n].Errs[k]; e != "" {
				errs = append(errs, fmt.Sprintf("- %s, %s: %s", n, workloadNames[k], e))
			}
		}
	}
	if len(errs) > 0 {
		w("\n## Errors\n\n%s\n", strings.Join(errs, "\n"))
	}
	if m.PlotFile != "" {
		w("\n## Latency CDF\n\n![continuous ping-pong latency CDF](%s)\n", m.PlotFile)
	}
	if m.RawDir != "" {
		w("\nRaw outputs (sockperf full logs, kbridge stats): `%s`\n", m.RawDir)
	}
	return b.String()
}

// dash renders the second and later figures of a workload: "-" on error (the
// first column already says why).
func dash(r *Result, key, format string, v float64) string {
	if _, bad := r.Errs[key]; bad || r.Skipped[key] != "" {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func anyKNI(order []string) bool {
	for _, n := range order {
		if strings.HasPrefix(n, "kni-") {
			return true
		}
	}
	return false
}

func kbridgeRows(order []string, res map[string]*Result) string {
	var b strings.Builder
	for _, n := range order {
		r := res[n]
		for _, k := range allWorkloads {
			c, ok := r.Counters[k]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n", n, workloadNames[k],
				c.ToKernel, c.FromKernel, c.Parks, c.Wakeups, c.Timeouts, c.Sleeps, c.Kicks, c.dropsText(),
				fmtNs(c.residenceQuantile(0.5)), fmtNs(c.residenceQuantile(0.99)))
		}
	}
	return b.String()
}

// fmtNs renders a histogram bound: "<4 us", "<1 ms"; "-" when empty.
func fmtNs(ns uint64) string {
	switch {
	case ns == 0:
		return "-"
	case ns < 1000:
		return fmt.Sprintf("<%d ns", ns)
	case ns < 10000:
		return fmt.Sprintf("<%.1f us", float64(ns)/1e3)
	case ns < 1000000:
		return fmt.Sprintf("<%.0f us", float64(ns)/1e3)
	default:
		return fmt.Sprintf("<%.1f ms", float64(ns)/1e6)
	}
}

// cpuCell renders a forwarder's CPU over one workload.
func cpuCell(r *Result, k string) string {
	if _, bad := r.Errs[k]; bad {
		return "error"
	}
	if v, ok := r.CPU[k]; ok {
		return fmt.Sprintf("%.1f", v)
	}
	return "-"
}

// ratioCell renders name's figure over ref's ("0.85x"); "-" when either is
// missing, and for ref itself.
func ratioCell(res map[string]*Result, name, ref, key string, pick func(*Result) float64) string {
	a, b := res[name], res[ref]
	if a == nil || b == nil || name == ref || !measured(a, key) || !measured(b, key) ||
		a.Errs[key] != "" || b.Errs[key] != "" || pick(b) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", pick(a)/pick(b))
}

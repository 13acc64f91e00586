package main

// What the report says about the machine and about load the benchmark does
// not control (other people's processes on this shared machine).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// machineInfo gathers what the report header says about the machine.
func machineInfo(root string, ncpu int, cpus string, quick bool) Machine {
	m := Machine{NCPU: ncpu, Quick: quick, LoadStart: harness.LoadAvg(), Started: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	m.Command = strings.Join(os.Args, " ")
	m.Make = os.Getenv("KBT_BENCH_COMMAND") // set by make bench
	m.Model, m.Kernel, m.HZ, m.DPDK, m.Kbridge = "?", "?", "?", "?", "?"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := harness.Output(context.Background(), 5*time.Second, nil, "uname", "-r"); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	if out, err := harness.Output(context.Background(), 5*time.Second, nil, "sh", "-c", "zcat /proc/config.gz | grep '^CONFIG_HZ='"); err == nil {
		m.HZ = strings.TrimPrefix(strings.TrimSpace(string(out)), "CONFIG_HZ=")
	}
	if out, err := harness.Output(context.Background(), 5*time.Second, nil, "pkg-config", "--modversion", "libdpdk"); err == nil {
		m.DPDK = strings.TrimSpace(string(out))
	}
	if out, err := harness.Output(context.Background(), 5*time.Second, nil, "git", "-C", root, "describe", "--always", "--dirty"); err == nil {
		m.Kbridge = strings.TrimSpace(string(out))
	}
	app := ncpu - 1
	if v := os.Getenv("KBT_APP_CPU"); v != "" {
		app, _ = strconv.Atoi(v)
	}
	if cpus == "" {
		m.Placement = "1 CPU: nothing pinned"
	} else {
		mainCPU := cpus
		if i := strings.IndexAny(mainCPU, "-,"); i > 0 {
			mainCPU = mainCPU[:i]
		}
		lcores := os.Getenv("KBT_TESTPMD_LCORES")
		if lcores == "" {
			lcores = fmt.Sprintf("0@%s,1@%d", mainCPU, app)
		}
		m.Placement = fmt.Sprintf("reference app's polling lcore and testpmd's forwarding lcore on CPU %d; testpmd `--lcores %s` (main lcore and EAL control threads off the forwarding CPU); kbridge, servers and clients (`taskset -c %s`) on CPU %s; per forwarder, as read from /proc during the run, below", app, lcores, cpus, cpus)
	}
	return m
}

func clkTck() int {
	if out, err := harness.Output(context.Background(), 5*time.Second, nil, "getconf", "CLK_TCK"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return n
		}
	}
	return 100
}

// busyProcesses samples every process's CPU time over window and lists those
// (other than this one) that used more than minPct of a core: load that the
// benchmark does not control and that can disturb its figures.
func busyProcesses(window time.Duration, clk int, minPct float64) string {
	before := allProcs()
	t0 := time.Now()
	time.Sleep(window)
	after := allProcs()
	delete(after, os.Getpid())
	return strings.Join(busyList(before, after, clk, time.Since(t0).Seconds(), minPct), ", ")
}

func allProcs() map[int]procStat {
	out := map[int]procStat{}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if data, err := os.ReadFile(p); err == nil {
			if st, err := parseProcStat(string(data)); err == nil {
				out[pid] = st
			}
		}
	}
	return out
}

// busyList renders the processes of after that used more than minPct of a
// core since before, busiest first: "name (pid N, CPU c) 63%".
func busyList(before, after map[int]procStat, clk int, wall, minPct float64) []string {
	type busy struct {
		pid int
		st  procStat
		pct float64
	}
	var bs []busy
	for pid, a := range after {
		b, ok := before[pid]
		if !ok || a.Ticks < b.Ticks {
			continue
		}
		if pct := cpuPercent(a.Ticks-b.Ticks, clk, wall); pct > minPct {
			bs = append(bs, busy{pid, a, pct})
		}
	}
	sort.Slice(bs, func(i, j int) bool {
		if bs[i].pct != bs[j].pct {
			return bs[i].pct > bs[j].pct
		}
		return bs[i].pid < bs[j].pid
	})
	out := []string{}
	for _, b := range bs {
		out = append(out, fmt.Sprintf("%s (pid %d, CPU %d) %.0f%%", b.st.Comm, b.pid, b.st.CPU, b.pct))
	}
	if len(out) == 0 {
		out = append(out, "none")
	}
	return out
}

// outsideBed drops the processes that live in the bed's network namespaces
// (servers, forwarders, clients) and this process: what is left is load the
// benchmark does not control. Kernel threads (ksoftirqd, kworkers) stay; they
// may work for the bed or for others.
func outsideBed(procs map[int]procStat) map[int]procStat {
	bed := map[string]bool{}
	for _, ns := range []string{"kbt-peer", nsDUT, nsDirect} {
		if fi, err := os.Stat("/run/netns/" + ns); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				bed[fmt.Sprintf("net:[%d]", st.Ino)] = true
			}
		}
	}
	out := map[int]procStat{}
	for pid, p := range procs {
		if pid == os.Getpid() {
			continue
		}
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && bed[link] {
			continue
		}
		out[pid] = p
	}
	return out
}

// cpuTimes are one CPU's counters from /proc/stat, in clock ticks.
type cpuTimes struct{ Total, Idle, Steal uint64 }

// parseProcStatCPUs reads the per-CPU lines of /proc/stat ("cpu0 user nice
// system idle iowait irq softirq steal ..."); idle includes iowait.
func parseProcStatCPUs(text string) map[int]cpuTimes {
	out := map[int]cpuTimes{}
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var t cpuTimes
		for i, v := range f[1:] {
			x, _ := strconv.ParseUint(v, 10, 64)
			if i >= 8 { // guest, guest_nice: already in user, nice
				break
			}
			t.Total += x
			switch i {
			case 3, 4:
				t.Idle += x
			case 7:
				t.Steal += x
			}
		}
		out[n] = t
	}
	return out
}

func readCPUTimes() map[int]cpuTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	return parseProcStatCPUs(string(data))
}

// cpuBusyText renders each CPU's use between two snapshots: "CPU 0 95% busy
// (steal 3%), CPU 1 100% busy (steal 0%)". Busy includes the bed's own work;
// steal is time the hypervisor gave another guest.
func cpuBusyText(before, after map[int]cpuTimes) string {
	var cpus []int
	for c := range after {
		if _, ok := before[c]; ok {
			cpus = append(cpus, c)
		}
	}
	sort.Ints(cpus)
	var parts []string
	for _, c := range cpus {
		a, b := after[c], before[c]
		if a.Total <= b.Total {
			continue
		}
		tot := float64(a.Total - b.Total)
		parts = append(parts, fmt.Sprintf("CPU %d %.0f%% busy (steal %.0f%%)", c,
			100*(tot-float64(a.Idle-b.Idle))/tot, 100*float64(a.Steal-b.Steal)/tot))
	}
	return strings.Join(parts, ", ")
}

package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kbridge/kbridge/internal/cpulist"
)

const (
	cpuOnline   = "/sys/devices/system/cpu/online"
	cpuPossible = "/sys/devices/system/cpu/possible"
	cpuIsolated = "/sys/devices/system/cpu/isolated"
	cpuNohzFull = "/sys/devices/system/cpu/nohz_full"
)

// readCPUSet reads a sysfs CPU list; a missing file is an empty set,
// because isolated and nohz_full only exist on some kernels.
func (e *env) readCPUSet(hostPath string) ([]int, error) {
	s, err := e.read(hostPath)
	if err != nil {
		return nil, err
	}
	return cpulist.Parse(s)
}

// checkCPUs checks the workers' CPUs exist and do not share a CPU with
// the app's polling lcores, then whether they are isolated.
func checkCPUs(_ context.Context, e *env) []Result {
	workers := e.opts.WorkerCPUs
	if len(workers) == 0 {
		skip := Result{Check: CheckCPUs, Status: Skip,
			Evidence: "no worker CPUs configured: workers float over all CPUs"}
		if e.opts.PolicyMode != "busy" {
			return []Result{skip}
		}
		return []Result{skip, {Check: CheckCPUIsolation, Status: Warn,
			Evidence: "policy mode busy with workers floating over all CPUs: each spins on a CPU the scheduler shares, holding it from other tasks until preempted",
			Fix:      busyOnSharedFix("workers.cpus on a CPU kept free with isolcpus= or a cpuset")}}
	}
	return []Result{cpusResult(e, workers), isolationResult(e, workers)}
}

// busyOnSharedFix is the advice for policy mode busy on a CPU the scheduler
// shares, with how saying how to give the workers one. Measured on a shared
// CPU (docs/runs/2026-12-02-default-policy.md): busy's spinning holds the
// CPU the workload needs until the scheduler preempts the worker, so either
// way out will do.
func busyOnSharedFix(how string) string {
	return "give the workers a core of their own (" + how + "), or set policy mode adaptive, the preset for a shared CPU (docs/CONFIG.md, Presets)"
}

func cpusResult(e *env, workers []int) Result {
	r := Result{Check: CheckCPUs}
	online, err := e.readCPUSet(cpuOnline)
	if err != nil {
		r.Status, r.Evidence = Warn, fmt.Sprintf("%s: %v", e.path(cpuOnline), err)
		r.Fix = "run doctor on the host (sysfs missing)"
		return r
	}
	possible, _ := e.readCPUSet(cpuPossible)
	ev := []string{
		fmt.Sprintf("worker CPUs %s", cpulist.Format(workers)),
		fmt.Sprintf("%s=%s", e.path(cpuOnline), cpulist.Format(online)),
	}
	var problems, fixes []string
	if missing := subtract(workers, online); len(missing) > 0 {
		what := "offline"
		if len(possible) > 0 && len(subtract(missing, possible)) > 0 {
			what = "not present on this host"
		}
		problems = append(problems, fmt.Sprintf("%s %s %s", cpuNoun(missing), verb(missing, "is", "are"), what))
		fixes = append(fixes, "pick worker CPUs from "+cpulist.Format(online))
	}
	if dup := duplicates(workers); len(dup) > 0 {
		problems = append(problems, fmt.Sprintf("%s %s more than one worker", cpuNoun(dup), verb(dup, "carries", "carry")))
		fixes = append(fixes, "give each worker its own CPU")
	}
	lcores, src := e.appLcores()
	if len(lcores) == 0 {
		ev = append(ev, "app lcores unknown (not configured, app not found)")
	} else {
		ev = append(ev, fmt.Sprintf("%s %s", src, cpulist.Format(lcores)))
		if shared := intersect(workers, lcores); len(shared) > 0 {
			problems = append(problems, fmt.Sprintf("%s %s both app lcore and kbridge worker: two pollers on one CPU starve each other", cpuNoun(shared), verb(shared, "is", "are")))
			fixes = append(fixes, "move the workers to "+orNone(cpulist.Format(subtract(online, lcores))))
		}
	}
	r.Evidence = strings.Join(ev, "; ")
	if len(problems) > 0 {
		r.Status = Fail
		r.Evidence += ": " + strings.Join(problems, "; ")
		r.Fix = strings.Join(fixes, "; ")
		return r
	}
	r.Status = Pass
	return r
}

func isolationResult(e *env, workers []int) Result {
	r := Result{Check: CheckCPUIsolation}
	isolated, errI := e.readCPUSet(cpuIsolated)
	nohz, errN := e.readCPUSet(cpuNohzFull)
	ev := []string{fmt.Sprintf("worker CPUs %s", cpulist.Format(workers))}
	if errI != nil {
		ev = append(ev, e.path(cpuIsolated)+" unreadable")
	} else {
		ev = append(ev, fmt.Sprintf("%s=%q", e.path(cpuIsolated), cpulist.Format(isolated)))
	}
	if errN != nil {
		ev = append(ev, e.path(cpuNohzFull)+" absent (kernel without NO_HZ_FULL)")
	} else {
		ev = append(ev, fmt.Sprintf("%s=%q", e.path(cpuNohzFull), cpulist.Format(nohz)))
	}
	notIso := subtract(workers, isolated)
	r.Evidence = strings.Join(ev, "; ")
	if len(notIso) > 0 {
		// Isolation is advice, not a requirement: adaptive workers park
		// when idle, and a VM may not have CPUs to spare.
		r.Status = Warn
		r.Evidence += fmt.Sprintf(": %s %s not isolated, so the scheduler also runs other tasks there", cpuNoun(notIso), verb(notIso, "is", "are"))
		r.Fix = fmt.Sprintf("boot with isolcpus=%s nohz_full=%s rcu_nocbs=%s (or keep other work off them with systemd AllowedCPUs=)",
			cpulist.Format(workers), cpulist.Format(workers), cpulist.Format(workers))
		if e.opts.PolicyMode == "busy" {
			r.Evidence += "; policy mode busy spins there: unless a cpuset keeps other tasks off (doctor reads isolcpus only), it holds the CPU they need until the scheduler preempts it"
			r.Fix = busyOnSharedFix(r.Fix)
		}
		return r
	}
	r.Status = Pass
	if errN == nil && len(subtract(workers, nohz)) > 0 {
		r.Evidence += ": isolated, but the tick still runs on " + cpulist.Format(subtract(workers, nohz))
	}
	return r
}

func duplicates(cpus []int) []int {
	var dup []int
	seen := map[int]bool{}
	for _, c := range cpus {
		if seen[c] && !slices.Contains(dup, c) {
			dup = append(dup, c)
		}
		seen[c] = true
	}
	slices.Sort(dup)
	return dup
}

func orNone(s string) string {
	if s == "" {
		return "(no CPU left: add CPUs or shrink the app's lcores)"
	}
	return s
}

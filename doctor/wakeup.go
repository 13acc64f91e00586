package doctor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kbridge/kbridge/internal/cpulist"
)

// A parked worker is woken by the app's eventfd write from the app's CPU:
// an IPI to the worker's CPU, which went idle when the worker parked. What
// that costs is the host's: how deep the idle CPU sleeps, and in a VM
// whether the host must first schedule the halted vCPU again. The cpu-idle
// check reads why; the wakeup check measures how much.

const (
	cpuidleDir         = "/sys/devices/system/cpu/cpuidle"
	haltpollParams     = "/sys/module/haltpoll/parameters"
	cpuidleHaltpollPar = "/sys/module/cpuidle_haltpoll/parameters"
	procCmdline        = "/proc/cmdline"
	procCPUInfo        = "/proc/cpuinfo"
	procStatPath       = "/proc/stat"
	dmiVendor          = "/sys/class/dmi/id/sys_vendor"
	dmiProduct         = "/sys/class/dmi/id/product_name"
	hypervisorType     = "/sys/hypervisor/type"
)

// DefaultWakeupProbe is kbridge doctor's probe budget: long enough for a
// few hundred wakeups, short enough to run every time.
const DefaultWakeupProbe = time.Second

// wakeupGap is the idle time before each probed wakeup: past any guest
// halt-poll window that has shrunk (haltpoll's default limit is 200 us)
// and long enough for a bare-metal governor to pick a deep C-state, as a
// worker parked between cold requests sees. Longer gaps cost more on the
// test bed (docs/DOCTOR.md), but fit fewer wakeups into the budget.
const wakeupGap = 5 * time.Millisecond

// deepExitLatency is the C-state exit latency above which a bare-metal
// wakeup is worth a warning: it is as large as what a round trip through
// kbridge adds over the kernel alone on the test bed (docs/BENCHMARKS.md).
const deepExitLatency = 50 // us

// slowExtra is what the cross-CPU wakeup may add to the same wakeup within
// one CPU, at the median, before the wakeup check warns: about half of what
// a round trip through kbridge adds over the kernel alone on the test bed
// (docs/BENCHMARKS.md). A p99 over a millisecond (a jiffy at HZ=1000) warns
// too.
const slowExtra = 25 * time.Microsecond

// busyIdlePct is the idle share of the worker CPUs over the probe below
// which most wakeups found them running other tasks, not idle.
const busyIdlePct = 50

// cause is what the readings say a wakeup of an idle worker CPU costs.
type cause int

const (
	causeBusy       cause = iota // policy busy: the workers never park
	causeIdlePoll                // idle=poll: idle CPUs spin, no idle exit
	causeVMHalt                  // a VM whose idle vCPU halts at once
	causeVMHaltPoll              // a VM whose idle vCPU polls before halting
	causeDeepCState              // bare metal with a deep C-state enabled
	causeShallow                 // bare metal with shallow idle states only
)

// idleFacts are the readings both checks use, read once.
type idleFacts struct {
	workers  []int
	vm       bool
	ev       []string // evidence, in reading order
	cause    cause
	haltNs   int64   // guest_halt_poll_ns, -1 unknown
	deepName string  // deepest enabled C-state of a worker CPU
	deepUs   int     // and its exit latency
	steal    float64 // steal since boot, % of all CPU time; -1 unknown
}

// idleCPUs are the CPUs whose idle exit a wakeup pays: the workers', or
// every online CPU when they float.
func (e *env) idleCPUs() []int {
	if len(e.opts.WorkerCPUs) > 0 {
		return e.opts.WorkerCPUs
	}
	online, _ := e.readCPUSet(cpuOnline)
	return online
}

func (e *env) idle() *idleFacts {
	if e.idleFacts != nil {
		return e.idleFacts
	}
	f := &idleFacts{workers: e.idleCPUs(), haltNs: -1, steal: -1}
	e.idleFacts = f
	add := func(format string, a ...any) { f.ev = append(f.ev, fmt.Sprintf(format, a...)) }

	// Virtualization: the CPUID hypervisor bit (as /proc/cpuinfo shows
	// it) or Xen's sysfs; DMI only names the platform, since bare-metal
	// cloud instances carry their vendor's name too.
	var virt []string
	if cpuFlag(e, "hypervisor") {
		virt = append(virt, e.path(procCPUInfo)+" flags: hypervisor")
	}
	if t, err := e.read(hypervisorType); err == nil {
		virt = append(virt, fmt.Sprintf("%s=%s", e.path(hypervisorType), t))
	}
	driver, _ := e.read(cpuidleDir + "/current_driver")
	if driver == "haltpoll" {
		virt = append(virt, "cpuidle driver haltpoll (KVM guests only)")
	}
	f.vm = len(virt) > 0
	vendor, _ := e.read(dmiVendor)
	product, _ := e.read(dmiProduct)
	platform := strings.TrimSpace(vendor + " " + product)
	switch {
	case f.vm && platform != "":
		add("virtual machine (%s; DMI %q)", strings.Join(virt, ", "), platform)
	case f.vm:
		add("virtual machine (%s)", strings.Join(virt, ", "))
	case platform != "":
		add("bare metal (no hypervisor flag in %s; DMI %q)", e.path(procCPUInfo), platform)
	default:
		add("bare metal (no hypervisor flag in %s)", e.path(procCPUInfo))
	}

	governor, err := e.read(cpuidleDir + "/current_governor")
	if err != nil {
		governor, _ = e.read(cpuidleDir + "/current_governor_ro")
	}
	switch driver {
	case "":
		add("%s absent (no cpuidle: an idle CPU runs the architecture's default idle, HLT on x86)", e.path(cpuidleDir+"/current_driver"))
	case "none":
		add("%s=none (no cpuidle driver: the default idle, HLT on x86, unless idle=)", e.path(cpuidleDir+"/current_driver"))
	default:
		add("cpuidle driver %s, governor %s (%s)", driver, orDash(governor), e.path(cpuidleDir))
	}
	if driver == "haltpoll" || e.exists(haltpollParams) {
		f.haltNs = readHaltpoll(e, add)
	}

	cmdline, _ := e.read(procCmdline)
	idleArg := ""
	var boot []string
	for _, a := range strings.Fields(cmdline) {
		k, _, _ := strings.Cut(a, "=")
		switch k {
		case "idle":
			idleArg = a
			boot = append(boot, a)
		case "intel_idle.max_cstate", "processor.max_cstate", "cpuidle.off", "cpuidle_haltpoll.force", "haltpoll.guest_halt_poll_ns":
			boot = append(boot, a)
		}
	}
	if len(boot) > 0 {
		add("%s: %s", e.path(procCmdline), strings.Join(boot, " "))
	}

	if !f.vm && driver != "" {
		f.deepName, f.deepUs = deepestState(e, f.workers)
		if f.deepName != "" {
			add("deepest enabled idle state of %s: %s, exit latency %d us", cpuNoun(f.workers), f.deepName, f.deepUs)
		}
	}

	isolated, _ := e.readCPUSet(cpuIsolated)
	nohz, _ := e.readCPUSet(cpuNohzFull)
	if iso := intersect(f.workers, isolated); len(iso) > 0 {
		add("%s isolated (nothing else runs there: every wakeup is from idle)", cpuNoun(iso))
	}
	if nz := intersect(f.workers, nohz); len(nz) > 0 {
		add("%s nohz_full (an idle exit restarts the tick too)", cpuNoun(nz))
	}

	if st, err := readProcStat(e.path(procStatPath)); err == nil && f.vm {
		f.steal = st.all.stealPct()
		add("steal %.1f%% of CPU time since boot (%s)", f.steal, e.path(procStatPath))
	}

	switch {
	case e.opts.PolicyMode == "busy":
		f.cause = causeBusy
	case idleArg == "idle=poll":
		f.cause = causeIdlePoll
	case f.vm && (driver != "haltpoll" || f.haltNs == 0):
		f.cause = causeVMHalt
	case f.vm:
		f.cause = causeVMHaltPoll
	case f.deepUs > deepExitLatency:
		f.cause = causeDeepCState
	default:
		f.cause = causeShallow
	}
	return f
}

// readHaltpoll reads the guest halt-poll limit and its tuning, and says
// what it is; it returns guest_halt_poll_ns, or -1.
func readHaltpoll(e *env, add func(string, ...any)) int64 {
	ns := int64(-1)
	var ps []string
	for _, name := range []string{"guest_halt_poll_ns", "guest_halt_poll_grow_start", "guest_halt_poll_grow", "guest_halt_poll_shrink", "guest_halt_poll_allow_shrink"} {
		v, err := e.read(haltpollParams + "/" + name)
		if err != nil {
			continue
		}
		ps = append(ps, name+"="+v)
		if name == "guest_halt_poll_ns" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				ns = n
			}
		}
	}
	if force, err := e.read(cpuidleHaltpollPar + "/force"); err == nil {
		ps = append(ps, "cpuidle_haltpoll force="+force)
	}
	if len(ps) == 0 {
		add("%s unreadable", e.path(haltpollParams))
		return ns
	}
	add("%s: %s", e.path(haltpollParams), strings.Join(ps, " "))
	return ns
}

// deepestState returns the deepest enabled idle state over cpus and its
// exit latency in microseconds.
func deepestState(e *env, cpus []int) (string, int) {
	name, worst := "", -1
	for _, c := range cpus {
		dirs, _ := filepath.Glob(e.path(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cpuidle/state*", c)))
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, "disable")); err == nil && strings.TrimSpace(string(b)) == "1" {
				continue
			}
			n, _ := os.ReadFile(filepath.Join(d, "name"))
			l, err := os.ReadFile(filepath.Join(d, "latency"))
			if err != nil {
				continue
			}
			us, err := strconv.Atoi(strings.TrimSpace(string(l)))
			if err == nil && us > worst {
				name, worst = strings.TrimSpace(string(n)), us
			}
		}
	}
	return name, worst
}

// cpuFlag reports whether /proc/cpuinfo's first flags line has flag.
func cpuFlag(e *env, flag string) bool {
	f, err := os.Open(e.path(procCPUInfo))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "flags" {
			return slices.Contains(strings.Fields(v), flag)
		}
	}
	return false
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// haltPollFix is the guest-side fix and its limit: the vCPU polls only
// so long after going idle (Documentation/virt/guest-halt-polling.rst).
const haltPollFix = "guest halt polling (echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns, or haltpoll.guest_halt_poll_ns= at boot) covers only wakeups within that window of going idle, for host CPU spent polling"

// parkFix keeps the worker from parking at all.
const parkFix = "policy.mode busy on a core of its own (docs/CONFIG.md, Presets) never parks, the only way to avoid this wakeup"

// checkCPUIdle says what an idle worker CPU costs to wake, and why.
func checkCPUIdle(_ context.Context, e *env) []Result {
	f := e.idle()
	r := Result{Check: CheckCPUIdle, Evidence: strings.Join(f.ev, "; ")}
	switch f.cause {
	case causeBusy:
		r.Status = Pass
		r.Evidence += ": policy mode busy, the workers never park, so no wakeup is on their path"
	case causeIdlePoll:
		r.Status = Pass
		r.Evidence += ": idle=poll, idle CPUs spin, so a wakeup has no idle exit (each CPU is busy to the host, and to the power bill)"
	case causeVMHalt:
		r.Status = Warn
		if f.haltNs == 0 {
			r.Evidence += ": an idle vCPU halts at once (guest halt polling off)"
		} else {
			r.Evidence += ": an idle vCPU halts at once (no guest halt polling)"
		}
		r.Evidence += ", so waking a parked worker is an IPI the host delivers by a VM exit and by scheduling the halted vCPU again: tens to hundreds of us, milliseconds when the host is busy (steal)"
		r.Fix = wakeFix(e, f)
	case causeVMHaltPoll:
		r.Status = Pass
		r.Evidence += fmt.Sprintf(": an idle vCPU polls up to %d us before it halts, so a wakeup within that window is cheap; a worker parked through a longer silence still finds its vCPU halted", f.haltNs/1000)
	case causeDeepCState:
		r.Status = Warn
		r.Evidence += fmt.Sprintf(": a parked worker's CPU may sleep in %s, and each wakeup pays its %d us exit", f.deepName, f.deepUs)
		r.Fix = fmt.Sprintf("keep the worker CPUs shallower (cpupower -c %s idle-set -D %d, or a PM QoS request on /dev/cpu_dma_latency), for the power those states save; or %s",
			cpulist.Format(f.workers), deepExitLatency, parkFix)
	default: // causeShallow
		r.Status = Pass
		r.Evidence += ": shallow idle states only, a wakeup pays little idle exit"
	}
	return []Result{r}
}

// wakeFix is the fix for a VM whose idle vCPU halts at once.
func wakeFix(e *env, f *idleFacts) string {
	fix := parkFix + "; " + haltPollFix
	if f.haltNs != 0 {
		fix = parkFix + "; guest halt polling (modprobe cpuidle_haltpoll, with force=1 if the host does not advertise it) covers only wakeups within its window of going idle"
	}
	if !e.opts.Learn && (e.opts.PolicyMode == "" || e.opts.PolicyMode == "adaptive") {
		fix += "; policy.learn: true parks at once after long gaps (better cold p99, docs/BENCHMARKS.md)"
	}
	if f.steal >= 5 {
		fix += "; steal: only a host with dedicated CPUs helps"
	}
	return fix
}

// checkWakeup measures the wakeup: the app's CPU waking a thread parked
// on each worker CPU, beside the same wakeup on one CPU.
func checkWakeup(ctx context.Context, e *env) []Result {
	r := Result{Check: CheckWakeup}
	budget := e.opts.WakeupProbe
	prober := e.opts.WakeupProber
	switch {
	case budget <= 0:
		r.Status, r.Evidence = Skip, "not measured (kbridge doctor --probe-wakeup 0)"
		return []Result{r}
	case prober == nil && e.root != "/":
		r.Status, r.Evidence = Skip, "root "+e.root+" is not the live host and no wakeup prober was given"
		return []Result{r}
	case prober == nil:
		prober = LiveWakeupProbe{}
	}
	f := e.idle()
	from, fromSrc := e.wakerCPU()
	plan := WakeupPlan{From: from, To: f.workers, Gap: wakeupGap, Budget: budget}
	if len(plan.To) == 0 {
		r.Status, r.Evidence = Skip, "no worker CPUs and no online CPUs to probe"
		return []Result{r}
	}
	rep, err := prober.ProbeWakeup(ctx, plan)
	if err != nil {
		r.Status, r.Evidence = Warn, err.Error()
		switch {
		case errors.Is(err, ErrPin):
			r.Fix = "run kbridge doctor where it may use the app's and the workers' CPUs (outside taskset or a cpuset that excludes them)"
		case errors.Is(err, ErrProbeLost):
			r.Evidence += ": the host let a woken thread wait that long"
			fallthrough
		default:
			r.Fix = "run kbridge doctor again on a quieter host; if it persists, " + fixFor(f)
		}
		return []Result{r}
	}
	r.Evidence = wakeupEvidence(rep, from, fromSrc)
	r.Data = &rep
	cross := rep.Cross
	slow := cross.Samples > 0 && (cross.P50-rep.Same.P50 > slowExtra || cross.P99 > time.Millisecond)
	switch {
	case f.cause == causeBusy:
		r.Status = Pass
		r.Evidence += ": policy mode busy, the workers never park, so this is not on their path"
	case !slow:
		r.Status = Pass
	case rep.IdlePct >= 0 && rep.IdlePct < busyIdlePct:
		// The woken thread waited for other tasks rather than an idle
		// exit: say so instead of blaming the idle state.
		r.Status = Warn
		r.Evidence += ": the worker CPUs were busy, so this is mostly preemption by other tasks, not the idle exit a parked worker pays"
		r.Fix = "run kbridge doctor again when the host is quiet for the idle-exit cost; " + fixFor(&idleFacts{cause: causeShallow})
	default:
		r.Status = Warn
		r.Evidence += ": " + causeClause(f)
		r.Fix = fixFor(f)
	}
	return []Result{r}
}

// wakerCPU is the CPU the app wakes the workers from: its first lcore,
// else the highest online CPU, which kbridge leaves to the app by
// default (docs/CONFIG.md, workers.cpus).
func (e *env) wakerCPU() (int, string) {
	if lcores, src := e.appLcores(); len(lcores) > 0 {
		return lcores[0], src
	}
	online, _ := e.readCPUSet(cpuOnline)
	if len(online) == 0 {
		return 0, "CPU 0 (online CPUs unknown)"
	}
	return online[len(online)-1], "the highest online CPU, the app's by default"
}

func wakeupEvidence(rep WakeupReport, from int, fromSrc string) string {
	p := rep.Plan
	var b strings.Builder
	fmt.Fprintf(&b, "eventfd wakeups after %v idle, %v budget: ", p.Gap, p.Budget)
	if rep.Cross.Samples > 0 {
		fmt.Fprintf(&b, "CPU %d (%s) -> parked on %s %s; ", from, fromSrc, cpuNoun(subtract(p.To, []int{from})), statsText(rep.Cross))
	} else {
		fmt.Fprintf(&b, "the app's CPU %d (%s) is the only worker CPU, no cross-CPU wakeup; ", from, fromSrc)
	}
	fmt.Fprintf(&b, "within CPU %d (no IPI) %s", p.To[0], statsText(rep.Same))
	if rep.Cross.Samples > 0 && rep.Same.Samples > 0 {
		fmt.Fprintf(&b, "; the IPI and the idle exit add %s at the median", us(rep.Cross.P50-rep.Same.P50))
	}
	if rep.StealPct >= 0 {
		fmt.Fprintf(&b, "; steal %.1f%% over the probe", rep.StealPct)
	}
	if rep.IdlePct >= 0 {
		fmt.Fprintf(&b, ", %s %.0f%% idle", cpuNoun(p.To), rep.IdlePct)

	}
	return b.String()
}

func statsText(s WakeupStats) string {
	return fmt.Sprintf("p50 %s p99 %s max %s, %d of %d over 1 ms", us(s.P50), us(s.P99), us(s.Max), s.Over1ms, s.Samples)
}

// us prints a duration in microseconds, the unit of docs/BENCHMARKS.md.
func us(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + " us"
}

// causeClause names the cause of a slow wakeup from the readings.
func causeClause(f *idleFacts) string {
	switch f.cause {
	case causeVMHalt:
		return "the cross-CPU wakeup wakes a halted vCPU through the host (cpu-idle)"
	case causeVMHaltPoll:
		return "the vCPU had halted after its poll window; the host reschedules it (cpu-idle)"
	case causeDeepCState:
		return fmt.Sprintf("the idle CPU sleeps in %s (%d us exit, cpu-idle)", f.deepName, f.deepUs)
	}
	return "not the idle state (cpu-idle): other tasks or the host delayed the woken thread"
}

// fixFor is the wakeup check's fix: the cpu-idle check holds the full
// advice for an idle-state cause, so this one points there.
func fixFor(f *idleFacts) string {
	switch f.cause {
	case causeVMHalt, causeVMHaltPoll, causeDeepCState:
		return "see cpu-idle; in short, " + parkFix
	}
	return "keep other work off the worker CPUs (isolcpus=, or systemd AllowedCPUs= for everything else), or " + parkFix
}

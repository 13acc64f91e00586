package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kbridge/kbridge/internal/cpulist"
)

// irqLine is one device interrupt from /proc/interrupts.
type irqLine struct {
	irq  int
	name string // the action name, the last column
}

// parseInterrupts reads the numbered lines of /proc/interrupts: the IRQ,
// one count per CPU column, the chip and hw irq columns, then the action
// name(s). Named lines (NMI, LOC, ...) are not device IRQs.
func parseInterrupts(data string) []irqLine {
	lines := strings.Split(data, "\n")
	if len(lines) == 0 {
		return nil
	}
	ncpu := len(strings.Fields(lines[0]))
	var out []irqLine
	for _, l := range lines[1:] {
		num, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok {
			continue
		}
		irq, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		f := strings.Fields(rest)
		if len(f) <= ncpu+1 || isTriggerType(f[len(f)-1]) {
			continue // no action name: an unused vector
		}
		out = append(out, irqLine{irq: irq, name: f[len(f)-1]})
	}
	return out
}

// isTriggerType recognises the hwirq/trigger column ("1-edge",
// "PCI-MSI-edge" on old kernels), which ends a line without an action.
func isTriggerType(s string) bool {
	for _, t := range []string{"edge", "level", "fasteoi"} {
		if s == t || strings.HasSuffix(s, "-"+t) {
			return true
		}
	}
	return false
}

// nicIRQ is a NIC queue interrupt and where it points.
type nicIRQ struct {
	irq      int
	name     string
	queue    int
	affinity []int
	hint     []int // from affinity_hint; empty when the driver gives none
	raw      string
}

// nicIRQs finds the NIC's queue IRQs by the names drivers give them:
// Intel and ENA "<if>-TxRx-<n>" (i40e/iavf/ice prefix the driver name,
// ixgbe may split "-rx-"/"-tx-", ENA writes "-Tx-Rx-"), mlx5
// "mlx5_comp<n>@pci:<bdf>", virtio-net "virtio<k>-input.<n>".
func nicIRQs(e *env, nic string) (found bool, irqs []nicIRQ, err error) {
	devLink := "/sys/class/net/" + nic + "/device"
	if !e.exists("/sys/class/net/" + nic) {
		return false, nil, nil
	}
	var dev string
	if t, err := os.Readlink(e.path(devLink)); err == nil {
		dev = filepath.Base(t)
	}
	names := []string{regexp.QuoteMeta(nic)}
	if strings.Count(dev, ":") == 2 {
		names = append(names, regexp.QuoteMeta(dev))
	}
	pats := []*regexp.Regexp{
		regexp.MustCompile(`^(?:\S+-)?(?:` + strings.Join(names, "|") + `)-(?:TxRx|Tx-Rx|rx|tx|Rx|Tx|txrx)-(\d+)$`),
	}
	if strings.Count(dev, ":") == 2 {
		pats = append(pats, regexp.MustCompile(`^mlx5_comp(\d+)@pci:`+regexp.QuoteMeta(dev)+`$`))
	}
	if strings.HasPrefix(dev, "virtio") {
		pats = append(pats, regexp.MustCompile(`^`+regexp.QuoteMeta(dev)+`-(?:input|output)\.(\d+)$`))
	}
	data, err := e.read("/proc/interrupts")
	if err != nil {
		return true, nil, fmt.Errorf("read interrupts: %w", err)
	}
	for _, l := range parseInterrupts(data) {
		for _, p := range pats {
			m := p.FindStringSubmatch(l.name)
			if m == nil {
				continue
			}
			q, _ := strconv.Atoi(m[1])
			ni := nicIRQ{irq: l.irq, name: l.name, queue: q}
			base := "/proc/irq/" + strconv.Itoa(l.irq)
			ni.raw, err = e.read(base + "/smp_affinity_list")
			if err != nil {
				return true, nil, fmt.Errorf("IRQ %d: %w", l.irq, err)
			}
			if ni.affinity, err = cpulist.Parse(ni.raw); err != nil {
				return true, nil, fmt.Errorf("IRQ %d: %w", l.irq, err)
			}
			if h, err := e.read(base + "/affinity_hint"); err == nil {
				ni.hint, _ = parseCPUMask(h)
			}
			irqs = append(irqs, ni)
			break
		}
	}
	return true, irqs, nil
}

// Change is one IRQ affinity FixIRQ writes (or would write).
type Change struct {
	IRQ  int    `json:"irq"`
	Name string `json:"name"`
	Path string `json:"path"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

func (c Change) String() string {
	return fmt.Sprintf("IRQ %d (%s): %s -> %s", c.IRQ, c.Name, c.Old, c.New)
}

// PlanIRQ computes the smp_affinity_list values that move the NIC's queue
// IRQs off the app's lcores, without writing anything. IRQs already clear
// of the lcores are left alone.
func PlanIRQ(opts Options) ([]Change, error) {
	return planIRQ(newEnv(opts))
}

func planIRQ(e *env) ([]Change, error) {
	if e.opts.NIC == "" {
		return nil, errors.New("no NIC netdev configured: nothing to align")
	}
	lcores, _ := e.appLcores()
	if len(lcores) == 0 {
		return nil, errors.New("app lcores unknown: configure them or start the app")
	}
	online, err := e.readCPUSet(cpuOnline)
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	found, irqs, err := nicIRQs(e, e.opts.NIC)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("NIC %s has no netdev under %s", e.opts.NIC, e.path("/sys/class/net"))
	}
	// Prefer CPUs that neither poll for the app nor run workers; fall
	// back to worker CPUs rather than lcores, since a parked worker
	// tolerates an interrupt and a polling lcore does not.
	targets := subtract(subtract(online, lcores), e.opts.WorkerCPUs)
	if len(targets) == 0 {
		targets = subtract(online, lcores)
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("every online CPU (%s) is an app lcore: no CPU left for IRQs", cpulist.Format(online))
	}
	var out []Change
	for _, ni := range irqs {
		if len(intersect(ni.affinity, lcores)) == 0 {
			continue
		}
		next := intersect(ni.hint, targets) // the driver's NUMA-aware spread, when usable
		if len(next) == 0 {
			next = []int{targets[ni.queue%len(targets)]}
		}
		out = append(out, Change{IRQ: ni.irq, Name: ni.name,
			Path: e.path("/proc/irq/" + strconv.Itoa(ni.irq) + "/smp_affinity_list"),
			Old:  ni.raw, New: cpulist.Format(next)})
	}
	return out, nil
}

// writeAffinity is a variable so a test can make one write fail, as a
// managed IRQ does on a real host.
var writeAffinity = func(path, cpus string) error {
	return os.WriteFile(path, []byte(cpus+"\n"), 0o644)
}

// FixIRQ applies PlanIRQ: it writes each new smp_affinity_list under
// Options.Root and returns the changes that took. Managed IRQs refuse the
// write (EIO); their errors are joined and the rest still apply.
func FixIRQ(opts Options) ([]Change, error) {
	plan, err := PlanIRQ(opts)
	if err != nil {
		return nil, err
	}
	var done []Change
	var errs []error
	for _, c := range plan {
		if err := writeAffinity(c.Path, c.New); err != nil {
			errs = append(errs, fmt.Errorf("IRQ %d: write %s: %w", c.IRQ, c.Path, err))
			continue
		}
		done = append(done, c)
	}
	return done, errors.Join(errs...)
}

// checkIRQAffinity warns when the kernel side's processing lands on the
// app's polling lcores: the NIC's queue IRQs, and the TAP's receive path,
// which runs on whatever CPU the worker writes from.
func checkIRQAffinity(_ context.Context, e *env) []Result {
	r := Result{Check: CheckIRQAffinity}
	lcores, src := e.appLcores()
	var ev, problems []string
	if len(lcores) > 0 {
		ev = append(ev, fmt.Sprintf("%s %s", src, cpulist.Format(lcores)))
	}
	if e.opts.Interface != "" {
		if len(e.opts.WorkerCPUs) == 0 {
			ev = append(ev, e.opts.Interface+" (TAP) has no IRQs; its receive processing runs on the unpinned workers")
		} else {
			ev = append(ev, fmt.Sprintf("%s (TAP) has no IRQs; its receive processing runs on worker CPUs %s", e.opts.Interface, cpulist.Format(e.opts.WorkerCPUs)))
			if s := intersect(e.opts.WorkerCPUs, lcores); len(s) > 0 {
				problems = append(problems, fmt.Sprintf("%s processing shares %s with app lcores", e.opts.Interface, cpuNoun(s)))
			}
		}
	}
	var conflicting []nicIRQ
	switch nic := e.opts.NIC; {
	case nic == "":
		ev = append(ev, "no NIC netdev configured: NIC IRQs not checked")
	default:
		found, irqs, err := nicIRQs(e, nic)
		switch {
		case err != nil:
			r.Status, r.Evidence, r.Fix = Warn, strings.Join(append(ev, err.Error()), "; "), "run kbridge doctor as root"
			return []Result{r}
		case !found:
			ev = append(ev, fmt.Sprintf("NIC %s has no netdev (bound to DPDK: polled, no IRQs)", nic))
		case len(irqs) == 0:
			ev = append(ev, fmt.Sprintf("%s: no queue IRQs named for %s", e.path("/proc/interrupts"), nic))
		default:
			var parts []string
			for _, ni := range irqs {
				p := fmt.Sprintf("IRQ %d %s -> %s", ni.irq, ni.name, ni.raw)
				if len(ni.hint) > 0 {
					p += " (hint " + cpulist.Format(ni.hint) + ")"
				}
				parts = append(parts, p)
				if len(intersect(ni.affinity, lcores)) > 0 {
					conflicting = append(conflicting, ni)
				}
			}
			ev = append(ev, e.path("/proc/irq")+"/*/smp_affinity_list: "+strings.Join(parts, ", "))
			for _, ni := range conflicting {
				problems = append(problems, fmt.Sprintf("IRQ %d (%s) may fire on app lcores %s", ni.irq, ni.name, cpulist.Format(intersect(ni.affinity, lcores))))
			}
		}
	}
	if pid := findProcess(e, "irqbalance"); pid > 0 {
		ev = append(ev, fmt.Sprintf("irqbalance runs (pid %d) and rewrites affinities", pid))
	}
	r.Evidence = strings.Join(ev, "; ")
	switch {
	case len(lcores) == 0:
		r.Status = Skip
		r.Evidence += "; app lcores unknown (not configured, app not found): nothing to compare against"
	case len(problems) > 0:
		r.Status = Warn
		r.Evidence += ": " + strings.Join(problems, "; ")
		r.Fix = irqFix(e, lcores, conflicting)
	default:
		r.Status = Pass
	}
	return []Result{r}
}

func irqFix(e *env, lcores []int, conflicting []nicIRQ) string {
	var fixes []string
	if len(conflicting) > 0 {
		if plan, err := planIRQ(e); err == nil && len(plan) > 0 {
			var cs []string
			for _, c := range plan {
				cs = append(cs, fmt.Sprintf("IRQ %d -> %s", c.IRQ, c.New))
			}
			fixes = append(fixes, "kbridge doctor --fix sets "+strings.Join(cs, ", "))
		}
		if findProcess(e, "irqbalance") > 0 {
			fixes = append(fixes, "ban the app lcores from irqbalance (IRQBALANCE_BANNED_CPULIST) or it undoes this")
		}
	}
	if len(intersect(e.opts.WorkerCPUs, lcores)) > 0 {
		fixes = append(fixes, "pin the workers to CPUs that are not app lcores")
	}
	return strings.Join(fixes, "; ")
}

// findProcess returns the pid of a process whose comm is name, or 0.
func findProcess(e *env, name string) int {
	ents, err := os.ReadDir(e.path("/proc"))
	if err != nil {
		return 0
	}
	var pids []int
	for _, ent := range ents {
		if pid, err := strconv.Atoi(ent.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	for _, pid := range pids {
		if comm, err := e.read("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && comm == name {
			return pid
		}
	}
	return 0
}

package main

// `kbt-bench -profile` (`make profile`): where CPU 0's time goes
// during bulk transfers through kbridge. Per workload (iperf3 each way, the
// NFS read of big.bin, NFS ls -R) one `perf record -a -C 0 -g -e cpu-clock`
// enabled exactly around the workload (perf's control fifo), its stacks put
// in shares (profile_stacks.go), a flame graph per workload (flame.go) and a
// table of shares. Rounds run interleaved (every workload once, then again).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// profileWorkloads are the profile's workloads, in table order.
var profileWorkloads = []string{wUp, wDown, wNFSRead, wNFS}

// ProfileRun is one forwarder's profiles: per workload, per round.
type ProfileRun struct {
	Name   string
	Rounds map[string][]*Profile // workload -> one per round
	Figure map[string][]string   // workload -> what the workload measured, per round
	CPUs   map[string][]string   // workload -> each CPU's busy and steal time, per round (/proc/stat)
	Errs   map[string]string
}

func newProfileRun(name string) *ProfileRun {
	return &ProfileRun{Name: name, Rounds: map[string][]*Profile{}, Figure: map[string][]string{}, CPUs: map[string][]string{}, Errs: map[string]string{}}
}

// profileForwarders keeps the -forwarders that have kbridge on their bed
// ("all": kbridge-adaptive, the default mode): the shares are kbridge's.
func profileForwarders(list string) ([]Forwarder, error) {
	if list == "" || list == "all" {
		list = "kbridge-adaptive"
	}
	fws, err := selectForwarders(list)
	if err != nil {
		return nil, err
	}
	var out []Forwarder
	for _, f := range fws {
		if f.hasKbridge() {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-profile: no kbridge forwarder selected")
	}
	return out, nil
}

// profileAll runs the rounds against f, interleaved: every workload once per
// round, so that a noisy minute on the machine spreads over all of them.
func (rn *Runner) profileAll(ctx context.Context, f Forwarder, rounds int) *ProfileRun {
	pr := newProfileRun(f.Name)
	for r := 1; r <= rounds; r++ {
		for _, k := range profileWorkloads {
			if ctx.Err() != nil {
				pr.Errs[k] = "interrupted"
				return pr
			}
			if err := rn.bed.alive(); err != nil {
				pr.Errs[k] = err.Error()
				rn.log("%s: profile stopped: %v", f.Name, err)
				return pr
			}
			rn.log("%s: profile round %d/%d: %s ...", f.Name, r, rounds, workloadNames[k])
			p, fig, err := rn.profileOne(ctx, f, k, r)
			if aerr := rn.bed.alive(); err == nil && aerr != nil {
				// Someone took the bed over during the workload: its samples
				// are of another bed's processes.
				pr.Errs[k] = aerr.Error()
				rn.log("%s: profile %s discarded, and the profile stopped: %v", f.Name, workloadNames[k], aerr)
				return pr
			}
			if err != nil {
				pr.Errs[k] = err.Error()
				rn.log("%s: profile %s: %v", f.Name, workloadNames[k], err)
				continue
			}
			pr.Rounds[k] = append(pr.Rounds[k], p)
			pr.Figure[k] = append(pr.Figure[k], fig)
			pr.CPUs[k] = append(pr.CPUs[k], p.CPUs)
			if p.Wall > 0 && float64(p.Total) < 0.8*float64(p.Wall) {
				rn.log("%s: %s: only %.1f of %.1f s sampled on CPU 0 (perf lost samples, or the hypervisor ran something else)", f.Name, workloadNames[k], float64(p.Total)/1e9, p.Wall.Seconds())
			}
			rn.log("%s: %s: %s; %d ms sampled; kbridge %.1f%% own code, %.1f%% syscalls; idle %.1f%%", f.Name, workloadNames[k], fig,
				p.Total/1e6, p.Share(shKbUser), p.Share(shKbSys), p.Share(shIdle))
		}
	}
	return pr
}

// profileOne records CPU 0 over one workload and folds the stacks.
func (rn *Runner) profileOne(ctx context.Context, f Forwarder, key string, round int) (*Profile, string, error) {
	ns, ip := f.target()
	base := filepath.Join(rn.rawDir, fmt.Sprintf("%s-%s-r%d", f.Name, key, round))
	rec, err := startPerf(ctx, base+".perf.data")
	if err != nil {
		return nil, "", err
	}
	defer os.Remove(base + ".perf.data") // tens of MB; the folded stacks are kept
	if err := rec.enable(); err != nil {
		rec.stop()
		return nil, "", err
	}
	// /proc/stat over the same window as the recording: perf's start and
	// stop and perf script stay out of it.
	t0, cpus0 := time.Now(), readCPUTimes()
	r := newResult(f.Name)
	var werr error
	switch key {
	case wUp, wDown:
		werr = rn.iperfP(ctx, ns, ip, key == wDown, 1, r)
	case wNFSRead:
		werr = rn.nfsRead(ctx, f, ns, ip, r)
	case wNFS:
		werr = rn.nfs(ctx, f, ns, ip, r)
	}
	wall, cpus := time.Since(t0), cpuBusyText(cpus0, readCPUTimes())
	derr := rec.disable()
	rec.stop()
	if werr != nil {
		return nil, "", fmt.Errorf("%s: %w", workloadNames[key], werr)
	}
	if derr != nil {
		return nil, "", derr
	}
	fig := map[string]string{
		wUp: fmt.Sprintf("%.2f Gbit/s", r.Up), wDown: fmt.Sprintf("%.2f Gbit/s", r.Down),
		wNFSRead: fmt.Sprintf("best of %d: %.0f MB/s", r.ReadRuns, r.NFSRead), wNFS: fmt.Sprintf("best of %d: %.2f s", r.NFSRuns, r.NFS),
	}[key] + fmt.Sprintf(" (%.1f s recorded)", wall.Seconds())
	text, err := harness.Output(ctx, 5*time.Minute, nil, "perf", "script", "-i", base+".perf.data", "-F", "comm,pid,tid,cpu,period,ip,sym,dso")
	if err != nil {
		return nil, "", fmt.Errorf("perf script: %w", err)
	}
	samples, err := parsePerfScript(string(text))
	if err != nil {
		return nil, "", err
	}
	p := fold(key, samples, rn.who(f))
	p.Wall, p.CPUs = wall, cpus
	if err := os.WriteFile(base+".folded", []byte(p.foldedText()), 0o644); err != nil {
		return nil, "", err
	}
	return p, fig, nil
}

// who names the bed's processes for the classification.
func (rn *Runner) who(f Forwarder) Who {
	w := Who{Kbridge: rn.bed.fwdPID, App: rn.bed.appPID, Peer: map[int]bool{},
		ClientComms: map[string]bool{"iperf3": true, "nfs-cat": true, "nfs-ls": true, "wc": true}}
	for _, n := range []string{"iperf3", "ganesha", "sockperf"} {
		if pid, err := readPID(n); err == nil {
			w.Peer[pid] = true
		}
	}
	return w
}

// perfRec is a `perf record` started with its events disabled and driven
// through its control fifo, so the recording covers the workload alone and
// not perf's own start-up and the wait for it.
type perfRec struct {
	cmd      *exec.Cmd
	ctl, ack *os.File
	dir      string // the fifos, which perf opens by name
	done     chan error
}

func startPerf(ctx context.Context, data string) (*perfRec, error) {
	dir, err := os.MkdirTemp("", "kbt-perf-")
	if err != nil {
		return nil, err
	}
	ctlPath, ackPath := filepath.Join(dir, "ctl"), filepath.Join(dir, "ack")
	for _, p := range []string{ctlPath, ackPath} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return nil, fmt.Errorf("mkfifo %s: %w", p, err)
		}
	}
	// O_RDWR: opening a fifo this way never blocks, whether perf has opened
	// its end yet or failed to start.
	ctl, err := os.OpenFile(ctlPath, os.O_RDWR, 0)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ack, err := os.OpenFile(ackPath, os.O_RDWR, 0)
	if err != nil {
		ctl.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "perf", "record", "-a", "-C", "0", "-g", "-e", "cpu-clock", "-F", "997",
		"-D", "-1", "--control", "fifo:"+ctlPath+","+ackPath, "-o", data)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		ctl.Close()
		ack.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("perf record: %w", err)
	}
	r := &perfRec{cmd: cmd, ctl: ctl, ack: ack, dir: dir, done: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("perf record: %w: %s", err, harness.LastLine(out.String()))
		}
		r.done <- err
	}()
	return r, nil
}

// command writes a control command and waits for perf's ack.
func (r *perfRec) command(c string) error {
	if _, err := r.ctl.WriteString(c + "\n"); err != nil {
		return fmt.Errorf("perf control %s: %w", c, err)
	}
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 16)
		_, err := r.ack.Read(buf)
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("perf control %s: %w", c, err)
		}
		return nil
	case err := <-r.done:
		r.done <- err
		return fmt.Errorf("perf control %s: perf exited: %v", c, err)
	case <-time.After(20 * time.Second):
		return fmt.Errorf("perf control %s: no ack in 20s", c)
	}
}

func (r *perfRec) enable() error  { return r.command("enable") }
func (r *perfRec) disable() error { return r.command("disable") }

// stop ends perf with SIGINT (it then writes its data) and waits.
func (r *perfRec) stop() {
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.ctl.Close()
	r.ack.Close()
	os.RemoveAll(r.dir)
}

// pooled merges a workload's rounds (the picture and the main figure).
func pooled(ps []*Profile) *Profile {
	if len(ps) == 0 {
		return nil
	}
	p := &Profile{Workload: ps[0].Workload, Shares: map[string]uint64{}, Folded: map[string]uint64{}}
	for _, q := range ps {
		p.merge(q)
	}
	return p
}

// shareCell is the pooled share, with the range over rounds when there were
// several.
func shareCell(ps []*Profile, sh string) string { return cellOf(ps, sh, (*Profile).Share) }

// ownCell is shareCell for the shares of the bed's own work (Profile.Own).
func ownCell(ps []*Profile, sh string) string { return cellOf(ps, sh, (*Profile).Own) }

// cellOf is share's value of the pooled rounds, and its range over them.
func cellOf(ps []*Profile, sh string, share func(*Profile, string) float64) string {
	if len(ps) == 0 {
		return "-"
	}
	s := fmt.Sprintf("%.1f", share(pooled(ps), sh))
	if len(ps) > 1 {
		lo, hi := 100.0, 0.0
		for _, p := range ps {
			lo, hi = min(lo, share(p, sh)), max(hi, share(p, sh))
		}
		s += fmt.Sprintf(" (%.1f-%.1f)", lo, hi)
	}
	return s
}

// topComms lists a share's busiest commands, in % of all samples.
func topComms(p *Profile, sh string, n int) string {
	by := map[string]uint64{}
	for k, v := range p.Folded {
		if strings.HasPrefix(k, sh+";") {
			c, _, _ := strings.Cut(k[len(sh)+1:], ";")
			by[c] += v
		}
	}
	return topOf(by, p.Total, n)
}

// topLeaves lists a share's busiest leaf functions (self time), in % of all
// samples.
func topLeaves(p *Profile, sh string, n int) string {
	self := map[string]uint64{}
	for k, v := range p.Folded {
		if strings.HasPrefix(k, sh+";") {
			self[k[strings.LastIndexByte(k, ';')+1:]] += v
		}
	}
	return topOf(self, p.Total, n)
}

// topOf renders the n largest entries of m in % of total.
func topOf(m map[string]uint64, total uint64, n int) string {
	type kv struct {
		k string
		v uint64
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	var out []string
	for i := 0; i < len(l) && i < n; i++ {
		out = append(out, fmt.Sprintf("`%s` %.1f", l[i].k, 100*float64(l[i].v)/float64(total)))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// writeProfiles draws one flame graph per workload (rounds pooled) next to
// the report: <prefix>-<workload>.png. It returns the files, by workload.
func writeProfiles(prefix string, m Machine, pr *ProfileRun) map[string]string {
	files := map[string]string{}
	for _, k := range profileWorkloads {
		p := pooled(pr.Rounds[k])
		if p == nil {
			continue
		}
		var parts []string
		for _, sh := range shareOrder {
			if v := p.Share(sh); v >= 0.05 {
				parts = append(parts, fmt.Sprintf("%s %.1f%%", sh, v))
			}
		}
		title := fmt.Sprintf("CPU 0 during %s through %s (%s, %d round(s), %.1f s sampled, cpu-clock at 997 Hz)", workloadNames[k], pr.Name, m.Started,
			len(pr.Rounds[k]), float64(p.Total)/1e9)
		path := fmt.Sprintf("%s-%s.png", prefix, k)
		if err := writeFlame(path, title, strings.Join(parts, ", "), p.foldedText()); err != nil {
			pr.Errs[k] = "flame graph: " + err.Error()
			continue
		}
		files[k] = path
	}
	return files
}

// renderProfile writes the report: the shares per workload, the busiest
// functions, the pictures.
func renderProfile(m Machine, pr *ProfileRun, pics map[string]string) string {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("# kbridge CPU 0 profile, %s\n\n", m.Started)
	if m.Interrupted {
		w("**Interrupted: the figures below are incomplete.**\n\n")
	}
	w("- machine: %d CPUs, %s; kernel %s, HZ=%s; DPDK %s; kbridge %s\n", m.NCPU, m.Model, m.Kernel, m.HZ, m.DPDK, m.Kbridge)
	w("- command: `%s`\n- CPU placement (tests/testbed/README.md): %s\n", or(m.Make, m.Command), m.Placement)
	w("- load average (1/5/15 min) at start: %s; at end: %s\n- other processes above 10%% of a core at start: %s\n- run time: %s\n\n",
		m.LoadStart, m.LoadEnd, or(m.BusyStart, "none"), m.Duration)
	w("Forwarder %s. Per workload, `perf record -a -C 0 -g -e cpu-clock -F 997`, enabled through perf's control fifo just before the workload starts and disabled when it ends; ", pr.Name)
	w("cpu-clock, a timer, samples the idle task too (hardware cycles stop in halt), at the price of not seeing inside interrupts-off sections. ")
	w("Each sample is put in one share, first match wins: a softirq frame on the stack; the idle task; by process (kbridge, kbt-peer's servers, the clients, the reference app); inside kbridge and the clients, the innermost network frame decides between TCP/IP and the rest. ")
	w("Cells: %% of CPU 0's samples, all rounds pooled; with several rounds, the range over rounds in brackets.\n\n")
	w("| share | %s |\n|---|%s\n", strings.Join(wlNames(profileWorkloads), " | "), strings.Repeat("---:|", len(profileWorkloads)))
	for _, sh := range shareOrder {
		var cells []string
		for _, k := range profileWorkloads {
			cells = append(cells, shareCell(pr.Rounds[k], sh))
		}
		w("| %s | %s |\n", sh, strings.Join(cells, " | "))
	}
	cell := func(f func(k string) string) string {
		var c []string
		for _, k := range profileWorkloads {
			if len(pr.Rounds[k]) == 0 {
				c = append(c, or(shorten(pr.Errs[k], 60), "-"))
				continue
			}
			c = append(c, f(k))
		}
		return strings.Join(c, " | ")
	}
	w("| seconds sampled / recorded | %s |\n", cell(func(k string) string {
		p := pooled(pr.Rounds[k])
		return fmt.Sprintf("%.1f / %.1f", float64(p.Total)/1e9, p.Wall.Seconds())
	}))
	w("| the workload's own figure, per round | %s |\n", cell(func(k string) string { return strings.Join(pr.Figure[k], "; ") }))
	w("| each CPU's use over the recording (/proc/stat, the bed's work included), per round | %s |\n\n", cell(func(k string) string { return strings.Join(pr.CPUs[k], "; ") }))
	w("The same without idle and other, in %% of the bed's own work on CPU 0 (other users' load on this shared machine changes how much of CPU 0 the bed gets, less how the bed spends it):\n\n")
	w("| share | %s |\n|---|%s\n", strings.Join(wlNames(profileWorkloads), " | "), strings.Repeat("---:|", len(profileWorkloads)))
	for _, sh := range shareOrder {
		if sh == shIdle || sh == shOther {
			continue
		}
		var cells []string
		for _, k := range profileWorkloads {
			cells = append(cells, ownCell(pr.Rounds[k], sh))
		}
		w("| %s | %s |\n", sh, strings.Join(cells, " | "))
	}
	w("\n")
	for _, sh := range shareOrder {
		w("- %s: %s\n", sh, shareText[sh])
	}
	w("\nBusiest functions (self time, %% of CPU 0), rounds pooled:\n\n| workload | %s | %s | %s | %s | %s |\n|---|---|---|---|---|---|\n", shKbUser, shKbSys, shTCP, shSoftNIC, shSoftirq)
	for _, k := range profileWorkloads {
		p := pooled(pr.Rounds[k])
		if p == nil {
			continue
		}
		w("| %s | %s | %s | %s | %s | %s |\n", workloadNames[k], topLeaves(p, shKbUser, 5), topLeaves(p, shKbSys, 5), topLeaves(p, shTCP, 5),
			topLeaves(p, shSoftNIC, 5), topLeaves(p, shSoftirq, 5))
	}
	w("\nThe busiest commands in `other` (%% of CPU 0): ")
	var oc []string
	for _, k := range profileWorkloads {
		if p := pooled(pr.Rounds[k]); p != nil {
			oc = append(oc, workloadNames[k]+": "+topComms(p, shOther, 5))
		}
	}
	w("%s.\n", strings.Join(oc, "; "))
	w("\nFlame graphs (rounds pooled; first level: the share, second: the command):\n\n")
	for _, k := range profileWorkloads {
		if pics[k] != "" {
			w("- %s: `%s`\n", workloadNames[k], pics[k])
		}
	}
	if m.RawDir != "" {
		w("\nFolded stacks per round: `%s/*.folded`\n", m.RawDir)
	}
	return sb.String()
}

func wlNames(ks []string) []string {
	var out []string
	for _, k := range ks {
		out = append(out, workloadNames[k])
	}
	return out
}

// reportProfiles writes, per forwarder, results/profile-<UTC>[-<forwarder>].md
// and its flame graphs beside it, and prints the report.
func (rn *Runner) reportProfiles(m Machine, order []string, outDir, stamp string, logf func(string, ...any)) int {
	code := 0
	for _, n := range order {
		pr := rn.profile[n]
		if pr == nil {
			pr = newProfileRun(n)
			pr.Errs[wUp] = "not measured"
		}
		prefix := filepath.Join(outDir, "profile-"+stamp)
		if len(order) > 1 {
			prefix += "-" + n
		}
		pics := writeProfiles(prefix, m, pr)
		report := renderProfile(m, pr, pics)
		fmt.Print(report)
		if err := os.WriteFile(prefix+".md", []byte(report), 0o644); err != nil {
			logf("profile report: %v", err)
			code = 1
			continue
		}
		logf("profile report: %s.md; flame graphs: %s-*.png", prefix, prefix)
		if len(pics) < len(profileWorkloads) {
			code = 1
		}
	}
	if m.Interrupted {
		return 130
	}
	return code
}

package doctor

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kbridge/kbridge/internal/cpulist"
)

// appProc is the running DPDK primary found in /proc by its
// --file-prefix. Doctor reads its EAL arguments for what the
// configuration may not say: lcores and per-device devargs.
type appProc struct {
	pid      int
	lcores   []int
	lcoreArg string
	// devargs maps a full PCI address to its devargs ("large_llq_hdr=1").
	devargs map[string]string
}

// ealFlags are arguments that mark a command line as a DPDK EAL one when
// no --file-prefix is given (the default prefix "rte").
var ealFlags = []string{"-l", "-c", "--lcores", "-a", "--allow", "-w", "--pci-whitelist", "--vdev", "-n", "--in-memory", "--huge-dir", "--socket-mem"}

// findApp scans /proc once for the primary with the configured prefix.
func (e *env) findApp() *appProc {
	if e.appDone {
		return e.app
	}
	e.appDone = true
	ents, err := os.ReadDir(e.path("/proc"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, ent := range ents {
		if pid, err := strconv.Atoi(ent.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	for _, pid := range pids {
		b, err := os.ReadFile(e.path("/proc/" + strconv.Itoa(pid) + "/cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if app := parseEAL(pid, args, e.opts.FilePrefix); app != nil {
			e.app = app
			return app
		}
	}
	return nil
}

// parseEAL returns the app described by args when they are a DPDK
// primary's EAL arguments with the wanted prefix, else nil.
func parseEAL(pid int, args []string, wantPrefix string) *appProc {
	// kbridge is itself a secondary with the same prefix, and its own
	// flags (-c for a config file?) could pass for EAL ones. Only the
	// daemon is skipped: kbridge-refapp is a primary like any app.
	if len(args) < 2 || filepath.Base(args[0]) == "kbridge" {
		return nil
	}
	// EAL arguments end at "--"; what follows belongs to the app.
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[:i]
	}
	opts := map[string][]string{}
	for i := 1; i < len(args); i++ {
		name, val, ok := splitEALArg(args[i])
		if name == "" {
			continue
		}
		if !ok && i+1 < len(args) && takesValue(name) {
			val = args[i+1]
			i++
		}
		opts[name] = append(opts[name], val)
	}
	prefix := DefaultFilePrefix
	if v := opts["--file-prefix"]; len(v) > 0 {
		prefix = v[len(v)-1]
	} else if !slices.ContainsFunc(ealFlags, func(f string) bool { return len(opts[f]) > 0 }) {
		return nil
	}
	if prefix != wantPrefix {
		return nil
	}
	if v := opts["--proc-type"]; len(v) > 0 && v[len(v)-1] == "secondary" {
		return nil
	}
	app := &appProc{pid: pid, devargs: map[string]string{}}
	switch {
	case len(opts["-l"]) > 0:
		v := opts["-l"][0]
		app.lcores, _ = cpulist.Parse(v)
		app.lcoreArg = "-l " + v
	case len(opts["--lcores"]) > 0:
		v := opts["--lcores"][0]
		app.lcores = parseLcoresMap(v)
		app.lcoreArg = "--lcores " + v
	case len(opts["-c"]) > 0:
		v := opts["-c"][0]
		if m, err := parseCPUMask(v); err == nil {
			app.lcores, app.lcoreArg = m, "-c "+v
		}
	}
	for _, f := range []string{"-a", "--allow", "-w", "--pci-whitelist"} {
		for _, v := range opts[f] {
			addr, dev, _ := strings.Cut(v, ",")
			app.devargs[normalizePCI(addr)] = dev
		}
	}
	return app
}

// splitEALArg splits "--name=value", "-lVALUE" and bare flags.
func splitEALArg(a string) (name, val string, hasVal bool) {
	switch {
	case strings.HasPrefix(a, "--"):
		name, val, hasVal = strings.Cut(a, "=")
		return name, val, hasVal
	case strings.HasPrefix(a, "-") && len(a) >= 2:
		if len(a) > 2 {
			return a[:2], a[2:], true
		}
		return a, "", false
	}
	return "", "", false
}

// takesValue lists EAL options whose value may be the next argument.
func takesValue(name string) bool {
	switch name {
	case "-l", "-c", "-a", "-w", "-n", "-b", "-m", "--lcores", "--allow", "--pci-whitelist",
		"--file-prefix", "--proc-type", "--vdev", "--huge-dir", "--socket-mem", "--iova-mode",
		"--main-lcore", "--master-lcore", "--base-virtaddr", "--log-level":
		return true
	}
	return false
}

// parseLcoresMap reads the CPUs of an --lcores map such as
// "0-3" or "(0-1)@(2-3),4@5": the CPUs after '@', or the lcore ids
// themselves when there is no '@'.
func parseLcoresMap(s string) []int {
	var cpus []int
	depth, start := 0, 0
	var elems []string
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				elems = append(elems, s[start:i])
				start = i + 1
			}
		}
	}
	elems = append(elems, s[start:])
	for _, el := range elems {
		part := el
		if _, after, ok := strings.Cut(el, "@"); ok {
			part = after
		}
		part = strings.Trim(part, "()")
		if c, err := cpulist.Parse(part); err == nil {
			cpus = append(cpus, c...)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus)
}

// normalizePCI turns DPDK's short form "00:06.0" into "0000:00:06.0",
// the form sysfs uses.
func normalizePCI(addr string) string {
	addr = strings.ToLower(strings.TrimSpace(addr))
	if strings.Count(addr, ":") == 1 {
		return "0000:" + addr
	}
	return addr
}

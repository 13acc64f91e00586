package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

type mount struct {
	source, point, fstype, opts string
}

// readMounts parses /proc/mounts; a missing file is no mounts.
func readMounts(e *env) []mount {
	data, err := e.read("/proc/mounts")
	if err != nil {
		return nil
	}
	var out []mount
	for line := range strings.SplitSeq(data, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		out = append(out, mount{source: f[0], point: unescapeMount(f[1]), fstype: f[2], opts: f[3]})
	}
	return out
}

// unescapeMount undoes the octal escapes (\040 for space) of /proc/mounts.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkHugepages reports reserved and free hugepages, hugetlbfs mounts
// and the app's DPDK runtime directory: a secondary needs all three.
func checkHugepages(_ context.Context, e *env) []Result {
	mounts := readMounts(e)
	var huge []mount
	for _, m := range mounts {
		if m.fstype == "hugetlbfs" {
			huge = append(huge, m)
		}
	}
	runDir := filepath.Join(e.opts.RuntimeDir, e.opts.FilePrefix)
	running := e.exists(runDir + "/config")
	return []Result{
		hugepagesResult(e, huge, running),
		hugetlbfsResult(e, huge),
		runtimeResult(e, runDir, running),
	}
}

func hugepagesResult(e *env, huge []mount, running bool) Result {
	r := Result{Check: CheckHugepages}
	base := "/sys/kernel/mm/hugepages"
	ents, err := os.ReadDir(e.path(base))
	if err != nil {
		r.Status, r.Evidence = Fail, fmt.Sprintf("%s: %v", e.path(base), err)
		r.Fix = "use a kernel with CONFIG_HUGETLBFS"
		return r
	}
	var sizes []string
	total, free := 0, 0
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), "hugepages-") {
			continue
		}
		dir := base + "/" + ent.Name()
		nr, err1 := readInt(e, dir+"/nr_hugepages")
		fr, err2 := readInt(e, dir+"/free_hugepages")
		if err1 != nil || err2 != nil {
			sizes = append(sizes, fmt.Sprintf("%s unreadable", strings.TrimPrefix(ent.Name(), "hugepages-")))
			continue
		}
		total += nr
		free += fr
		sizes = append(sizes, fmt.Sprintf("%s nr_hugepages=%d free_hugepages=%d", strings.TrimPrefix(ent.Name(), "hugepages-"), nr, fr))
	}
	r.Evidence = e.path(base) + ": " + strings.Join(sizes, ", ")
	appFiles := countAppHugeFiles(huge, e)
	if appFiles > 0 {
		r.Evidence += fmt.Sprintf("; %d hugepage files named %smap_* in hugetlbfs", appFiles, e.opts.FilePrefix)
	}
	switch {
	case total == 0:
		r.Status = Fail
		r.Evidence += ": no hugepages reserved"
		r.Fix = "echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages (persist: vm.nr_hugepages or hugepages= on the kernel command line)"
	case !running && appFiles > 0:
		r.Status = Warn
		r.Evidence += ": the app is not running, so these files are stale and hold hugepages"
		r.Fix = fmt.Sprintf("remove the stale %smap_* files from the hugetlbfs mount (rm /dev/hugepages/%smap_*)", e.opts.FilePrefix, e.opts.FilePrefix)
	case !running && free == 0:
		r.Status = Warn
		r.Evidence += ": none free for the app to start"
		r.Fix = "reserve more hugepages or find what holds them (grep -l huge /proc/*/maps)"
	default:
		r.Status = Pass
	}
	return r
}

// countAppHugeFiles counts <prefix>map_* files in the hugetlbfs mounts:
// the pages the primary holds, or a crashed primary left behind.
func countAppHugeFiles(huge []mount, e *env) int {
	n := 0
	for _, m := range huge {
		matches, _ := filepath.Glob(filepath.Join(e.path(m.point), e.opts.FilePrefix+"map_*"))
		n += len(matches)
	}
	return n
}

func hugetlbfsResult(e *env, huge []mount) Result {
	r := Result{Check: CheckHugetlbfs}
	if len(huge) == 0 {
		r.Status = Fail
		r.Evidence = e.path("/proc/mounts") + ": no hugetlbfs mount"
		r.Fix = "mount -t hugetlbfs nodev /dev/hugepages (systemd: enable dev-hugepages.mount)"
		return r
	}
	var ms []string
	for _, m := range huge {
		ms = append(ms, fmt.Sprintf("%s (%s)", m.point, m.opts))
	}
	r.Status = Pass
	r.Evidence = e.path("/proc/mounts") + ": hugetlbfs on " + strings.Join(ms, ", ")
	return r
}

func runtimeResult(e *env, runDir string, running bool) Result {
	r := Result{Check: CheckDPDKRuntime}
	p := e.path(runDir)
	if !running {
		r.Status = Warn
		r.Evidence = p + "/config missing: no DPDK primary is running with --file-prefix " + e.opts.FilePrefix
		r.Fix = "start the DPDK app first, or set the file prefix to the app's --file-prefix (a non-root app uses $XDG_RUNTIME_DIR/dpdk)"
		return r
	}
	r.Evidence = p + ": config present"
	if !e.exists(runDir + "/mp_socket") {
		r.Status = Warn
		r.Evidence += ", mp_socket missing: the primary runs without multi-process support"
		r.Fix = "start the app without --no-shconf/--in-memory so a secondary can attach"
		return r
	}
	r.Status = Pass
	r.Evidence += ", mp_socket present"
	if app := e.findApp(); app != nil {
		r.Evidence += fmt.Sprintf("; primary pid %d", app.pid)
	}
	return r
}

func readInt(e *env, hostPath string) (int, error) {
	s, err := e.read(hostPath)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

package dpdkbed

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A DPDK primary leaves its hugepage files (<file prefix>map_<n>) in
// hugetlbfs when it exits, for secondaries that may still map them, and
// each file holds its page until removed: a test binary's 128 pages, or
// all 512 after a run that grew its memory, stayed until some later start
// of the same prefix. The test primary's prefix is the package's name and
// its pid (Setup), the reference apps' that and a suffix (StartRefapp):
// Teardown and StartRefapp's cleanup remove their own, and Setup those of
// a previous binary of the package that died before its Teardown.

// removeHugeFiles removes the files in every hugetlbfs mount whose name
// drop says.
func removeHugeFiles(drop func(name string) bool) {
	for _, dir := range hugetlbfsMounts() {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if drop(e.Name()) {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// removePrefixFiles removes the hugepage files of file prefix prefix.
func removePrefixFiles(prefix string) {
	removeHugeFiles(func(name string) bool {
		n, ok := strings.CutPrefix(name, prefix+"map_")
		_, err := strconv.Atoi(n)
		return ok && err == nil
	})
}

// removeDeadPrimariesFiles removes the hugepage files of base's test
// primaries and their apps (file prefix base, a pid, maybe a suffix) whose
// test binary is gone.
func removeDeadPrimariesFiles(base string) {
	removeHugeFiles(func(name string) bool {
		rest, ok := strings.CutPrefix(name, base)
		digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		n, err := strconv.Atoi(rest[:digits])
		return ok && strings.Contains(rest, "map_") && err == nil && n > 0 && !alive(n)
	})
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// hugetlbfsMounts lists the mount points of hugetlbfs.
func hugetlbfsMounts() []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 2 && fields[2] == "hugetlbfs" {
			dirs = append(dirs, fields[1])
		}
	}
	return dirs
}

package harness

// librte_kni as an application's build finds it once installed (make
// install-dev, docs/KNI.md): the library, its pkg-config files, and DPDK's
// own rte_kni.h for an app that was never written against kbridge's.

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// InstallDev runs `make install-dev PREFIX=<a temporary directory>` in the
// repository and returns the prefix: PREFIX/lib holds librte_kni,
// PREFIX/lib/pkgconfig the .pc files, naming PREFIX itself. librte_kni is
// built into a temporary BIN, never the tree's bin/ (which deploy/deb.sh
// may be packaging meanwhile), and LDCONFIG=: keeps the host's
// /etc/ld.so.cache out of it: the tests find the library by
// LD_LIBRARY_PATH.
func InstallDev(t *testing.T, root string) string {
	t.Helper()
	if _, err := exec.LookPath("pkg-config"); err != nil {
		t.Skip("pkg-config missing: make deps installs it")
	}
	// Directories of its own, not t.TempDir(): that is named after the
	// test, whose name may hold a comma, which the linker's -Wl, splits.
	prefix, err := os.MkdirTemp("", "kbridge-prefix-")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.MkdirTemp("", "kbridge-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(prefix)
		os.RemoveAll(bin)
	})
	c := exec.Command("make", "-s", "--no-print-directory", "install-dev", "PREFIX="+prefix, "BIN="+bin, "LDCONFIG=:")
	c.Dir = root
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("make install-dev PREFIX=%s: %v\n%s", prefix, err, out)
	}
	return prefix
}

// PkgConfig runs pkg-config with args against the .pc files InstallDev put
// in prefix and the system's (libdpdk), and returns its words.
func PkgConfig(t *testing.T, prefix string, args ...string) []string {
	t.Helper()
	c := exec.Command("pkg-config", args...)
	c.Env = append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(prefix, "lib/pkgconfig"))
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("pkg-config %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Fields(string(out))
}

// DPDKHadKNI says whether the DPDK pkg-config finds is older than 23.11,
// which removed KNI: only such a DPDK's source has an rte_kni.h of its own.
func DPDKHadKNI(t *testing.T) (bool, string) {
	t.Helper()
	out, err := exec.Command("pkg-config", "--modversion", "libdpdk").Output()
	if err != nil {
		t.Fatalf("pkg-config --modversion libdpdk: %v", err)
	}
	v := strings.TrimSpace(string(out))
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("DPDK version %q is not YY.MM", v)
	}
	y, err1 := strconv.Atoi(parts[0])
	m, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("DPDK version %q is not YY.MM", v)
	}
	return y < 23 || (y == 23 && m < 11), v
}

// DPDKKNIHeaderDir is the directory of DPDK's own lib/kni/rte_kni.h for
// the DPDK pkg-config finds: $DPDK_SRC/lib/kni when DPDK_SRC is set, else
// the copy deploy/dpdk-src.sh keeps (make deps). It skips t on a DPDK
// without KNI (23.11 on), where no such header exists, and fails it when a
// DPDK with KNI has none there.
func DPDKKNIHeaderDir(t *testing.T) string {
	t.Helper()
	had, v := DPDKHadKNI(t)
	if !had {
		t.Skipf("DPDK %s has no KNI and no rte_kni.h of its own: its KNI apps include kbridge's", v)
	}
	src := os.Getenv("DPDK_SRC")
	if src == "" {
		src = filepath.Join("/var/cache/kbridge/dpdk-src", v)
	}
	dir := filepath.Join(src, "lib/kni")
	if _, err := os.Stat(filepath.Join(dir, "rte_kni.h")); err != nil {
		t.Fatalf("no DPDK %s rte_kni.h in %s: make deps keeps it (deploy/dpdk-src.sh), or set DPDK_SRC to the source tree", v, dir)
	}
	return dir
}

// DPDKKNIVersionMap is DPDK's own lib/kni/version.map beside the header
// DPDKKNIHeaderDir finds (skipped, failed, as it is): the exports of
// DPDK's librte_kni.so.
func DPDKKNIVersionMap(t *testing.T) string {
	t.Helper()
	m := filepath.Join(DPDKKNIHeaderDir(t), "version.map")
	if _, err := os.Stat(m); err != nil {
		t.Fatalf("no DPDK version.map beside its rte_kni.h: make deps keeps it (deploy/dpdk-src.sh), or set DPDK_SRC to the source tree: %v", err)
	}
	return m
}

// KNIAPIFunctions are the functions rte_kni.h defines with RTE_KNI_API:
// KNI's API, which librte_kni exports; sorted.
func KNIAPIFunctions(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "include/kbridge/rte_kni.h"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "RTE_KNI_API ") && i+1 < len(lines) {
			if name, _, ok := strings.Cut(lines[i+1], "("); ok {
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names
}

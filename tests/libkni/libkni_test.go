// Package libkni checks librte_kni (docs/KNI.md, librte_kni) as what
// builds against it sees it once installed (make install-dev): the
// functions it exports and their symbol versions, the pkg-config files, and
// the links they give, shared and static. No root, no EAL: nothing here
// runs a KNI (tests/kni does, on the bed).
package libkni

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/tests/harness"
)

// mapVersions reads librte_kni/rte_kni.map: each exported name and its
// version node, the node's @ABI@ as the installed library's soname says.
func mapVersions(t *testing.T, root, abi string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "librte_kni/rte_kni.map"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	node := regexp.MustCompile(`^([A-Z_@0-9]+) \{$`)
	name := regexp.MustCompile(`^\s+(rte_kni_\w+);$`)
	out := map[string]string{}
	cur := ""
	for s := bufio.NewScanner(f); s.Scan(); {
		if m := node.FindStringSubmatch(s.Text()); m != nil {
			cur = strings.ReplaceAll(m[1], "@ABI@", abi)
		} else if m := name.FindStringSubmatch(s.Text()); m != nil {
			out[m[1]] = cur
		}
	}
	return out
}

// soABI is the N of the installed librte_kni.so.N (DPDK's ABI: 23 for 22.11).
func soABI(t *testing.T, prefix string) string {
	t.Helper()
	link, err := os.Readlink(filepath.Join(prefix, "lib/librte_kni.so"))
	if err != nil {
		t.Fatalf("librte_kni.so is not the link to the soname: %v", err)
	}
	abi, ok := strings.CutPrefix(link, "librte_kni.so.")
	if !ok || abi == "" {
		t.Fatalf("librte_kni.so links to %s, want librte_kni.so.N", link)
	}
	eal := harness.Sh(t, nil, "sh", "-c", "readelf -d \"$(pkg-config --variable=libdir libdpdk)/librte_eal.so\"")
	if !strings.Contains(eal, "[librte_eal.so."+abi+"]") {
		t.Errorf("librte_kni.so.%s, but DPDK's librte_eal is not .so.%s:\n%s", abi, abi, eal)
	}
	return abi
}

// TestLibrteKniExportsKNIsAPIByName: dlopen("librte_kni.so") and dlsym of
// each function rte_kni.h defines (what libmoon's LuaJIT FFI and Rust
// bindings do) find every one, each under DPDK's own symbol version
// (DPDK_23 on 22.11; rte_kni_update_link EXPERIMENTAL, as DPDK's); the map
// names exactly the header's functions, which are DPDK 22.11's twelve; and
// the library exports nothing else.
func TestLibrteKniExportsKNIsAPIByName(t *testing.T) {
	root := harness.RepoRoot(t)
	prefix := harness.InstallDev(t, root)
	abi := soABI(t, prefix)
	funcs := harness.KNIAPIFunctions(t, root)
	dpdk2211 := []string{"rte_kni_alloc", "rte_kni_close", "rte_kni_get", "rte_kni_get_name",
		"rte_kni_handle_request", "rte_kni_init", "rte_kni_register_handlers", "rte_kni_release",
		"rte_kni_rx_burst", "rte_kni_tx_burst", "rte_kni_unregister_handlers", "rte_kni_update_link"}
	if !slices.Equal(funcs, dpdk2211) {
		t.Errorf("rte_kni.h's RTE_KNI_API functions are %v, want DPDK 22.11's %v", funcs, dpdk2211)
	}
	versions := mapVersions(t, root, abi)
	var mapped []string
	for n := range versions {
		mapped = append(mapped, n)
	}
	slices.Sort(mapped)
	if !slices.Equal(mapped, funcs) {
		t.Errorf("librte_kni/rte_kni.map exports %v, rte_kni.h defines %v", mapped, funcs)
	}
	if v := versions["rte_kni_update_link"]; v != "EXPERIMENTAL" {
		t.Errorf("rte_kni_update_link is in node %q, DPDK's is EXPERIMENTAL", v)
	}

	prog := filepath.Join(t.TempDir(), "dlsym")
	harness.Sh(t, nil, "cc", "-O1", "-Wall", "-Werror", "-o", prog, "testdata/dlsym.c", "-ldl")
	var args []string
	for _, n := range funcs {
		args = append(args, n+"@"+versions[n])
	}
	out := harness.Sh(t, []string{"LD_LIBRARY_PATH=" + filepath.Join(prefix, "lib")}, prog, args...)
	for _, n := range funcs {
		if !strings.Contains(out, n+" found versioned\n") {
			t.Errorf("%s: dlsym/dlvsym(%s) did not find it: %q", n, versions[n], out)
		}
	}
	t.Logf("dlopen(\"librte_kni.so\"), soname librte_kni.so.%s:\n%s", abi, out)

	// Exported: the twelve, and the version nodes' own names.
	dyn := harness.Sh(t, nil, "readelf", "--wide", "--dyn-syms", filepath.Join(prefix, "lib/librte_kni.so"))
	for _, l := range strings.Split(dyn, "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || f[6] == "UND" || f[4] != "GLOBAL" && f[4] != "WEAK" {
			continue
		}
		name, _, _ := strings.Cut(f[7], "@")
		if !slices.Contains(funcs, name) && name != "DPDK_"+abi && name != "EXPERIMENTAL" {
			t.Errorf("librte_kni.so exports %s besides KNI's API", f[7])
		}
	}
}

// wholeArchives counts the -Wl,--whole-archive blocks in words.
func wholeArchives(words []string) int {
	n := 0
	for _, w := range words {
		if w == "-Wl,--whole-archive" {
			n++
		}
	}
	return n
}

// TestPkgConfigNamesDPDKOnce: every way docs/KNI.md and PACKAGING.md name
// the .pc files with libdpdk gives DPDK's static libraries once, as libdpdk
// alone does. kbridge.pc's `Requires: libdpdk` made Debian 12's pkgconf
// print libdpdk's --whole-archive block twice for `kbridge libdpdk`, and
// every static link failed on multiple definitions.
func TestPkgConfigNamesDPDKOnce(t *testing.T) {
	root := harness.RepoRoot(t)
	prefix := harness.InstallDev(t, root)
	want := wholeArchives(harness.PkgConfig(t, prefix, "--static", "--libs", "libdpdk"))
	for _, names := range []string{"kbridge libdpdk", "librte_kni libdpdk", "librte_kni kbridge libdpdk"} {
		got := wholeArchives(harness.PkgConfig(t, prefix, append([]string{"--static", "--libs"}, strings.Fields(names)...)...))
		if got != want {
			t.Errorf("pkg-config --static --libs %s: %d --whole-archive blocks, libdpdk alone %d", names, got, want)
		}
	}
	cflags := strings.Join(harness.PkgConfig(t, prefix, "--cflags", "kbridge"), " ")
	if !strings.Contains(cflags, "-I"+filepath.Join(prefix, "include/kbridge")) {
		t.Errorf("pkg-config --cflags kbridge is %q: no -I%s/include/kbridge", cflags, prefix)
	}
}

// TestLinkMinusLrteKni: a program that declares KNI's functions itself
// (testdata/knilink.c, no kbridge header) links with `pkg-config --libs
// librte_kni libdpdk` against librte_kni.so.N, and with --static against
// librte_kni.a: no librte_* library needed at run time at all (a shared
// DPDK beside the static one would be a second EAL). The same program
// including kbridge's rte_kni.h with librte_kni.pc's Cflags calls the
// library too (RTE_KNI_LIBRARY), not the header's inline bodies. Each
// starts: the loader resolved every function (-z now).
func TestLinkMinusLrteKni(t *testing.T) {
	root := harness.RepoRoot(t)
	prefix := harness.InstallDev(t, root)
	abi := soABI(t, prefix)
	dir := t.TempDir()
	for _, c := range []struct {
		name           string
		static, header bool
	}{{"shared", false, false}, {"static", true, false}, {"shared, rte_kni.h with librte_kni's Cflags", false, true},
		{"static, rte_kni.h with librte_kni's Cflags", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			pc := []string{"--cflags", "--libs", "librte_kni", "libdpdk"}
			if c.static {
				pc = append([]string{"--static"}, pc...)
			}
			prog := filepath.Join(dir, fmt.Sprintf("knilink-%v-%v", c.static, c.header))
			args := []string{"-O1", "-Wall", "-Werror", "-Wl,-z,now", "-o", prog, "testdata/knilink.c"}
			if c.header {
				args = append(args, "-DKNILINK_HEADER")
			}
			args = append(args, harness.PkgConfig(t, prefix, pc...)...)
			if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
				t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			needed := neededRTE(t, prog)
			if !c.static && !slices.Contains(needed, "librte_kni.so."+abi) {
				t.Errorf("linked shared, it needs %v: no librte_kni.so.%s", needed, abi)
			}
			if c.static {
				if len(needed) > 0 {
					t.Errorf("linked statically, it still needs %v at run time", needed)
				}
				// The archive's exported definition, not an inline copy
				// (t: a local function).
				if nm := harness.Sh(t, nil, "nm", prog); !strings.Contains(nm, " T rte_kni_alloc\n") {
					t.Errorf("linked statically, librte_kni.a's rte_kni_alloc is not in the binary")
				}
			}
			harness.Sh(t, []string{"LD_LIBRARY_PATH=" + filepath.Join(prefix, "lib")}, prog)
		})
	}
}

// neededRTE lists the DPDK libraries (librte_*) prog needs at run time.
func neededRTE(t *testing.T, prog string) []string {
	t.Helper()
	var libs []string
	re := regexp.MustCompile(`\(NEEDED\).*\[(librte_[^]]+)\]`)
	for _, m := range re.FindAllStringSubmatch(harness.Sh(t, nil, "readelf", "-d", prog), -1) {
		libs = append(libs, m[1])
	}
	return libs
}

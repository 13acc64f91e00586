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

// mapVersions reads librte_kni/rte_kni.map: each exported function and its
// version node, the node's @ABI@ as the installed library's soname says
// (KBRIDGE_PRIVATE_<ABI>'s registries left out).
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
		} else if m := name.FindStringSubmatch(s.Text()); m != nil && !strings.HasPrefix(cur, "KBRIDGE_PRIVATE_") {
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

	// Exported: the twelve, the version nodes' own names, and in
	// KBRIDGE_PRIVATE_<ABI> alone the registries of kbridge.h and rte_kni.h
	// (weak, for the dynamic linker to bind to an app's own copies:
	// tests/kni's mixwake runs that).
	private := "KBRIDGE_PRIVATE_" + abi
	var registries []string
	dyn := harness.Sh(t, nil, "readelf", "--wide", "--dyn-syms", filepath.Join(prefix, "lib/librte_kni.so"))
	for _, l := range strings.Split(dyn, "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || f[6] == "UND" || f[4] != "GLOBAL" && f[4] != "WEAK" {
			continue
		}
		name, node, _ := strings.Cut(f[7], "@")
		node = strings.TrimPrefix(node, "@")
		switch {
		case name == "DPDK_"+abi || name == "EXPERIMENTAL" || name == private:
		case slices.Contains(funcs, name) && f[3] == "FUNC" && f[4] == "GLOBAL":
		case node == private && f[3] == "OBJECT" && f[4] == "WEAK":
			registries = append(registries, name)
		default:
			t.Errorf("librte_kni.so exports %s (%s %s) besides KNI's API and its registries", f[7], f[3], f[4])
		}
	}
	slices.Sort(registries)
	v := registryVersion(t, root)
	want := []string{"kbridge_doorbell_fd_v" + v + "_", "kbridge_mp_foreign_said_v" + v + "_", "kbridge_mp_registered_v" + v + "_",
		"kbridge_ports_lock_v" + v + "_", "kbridge_registry_len_v" + v + "_", "kbridge_registry_v" + v + "_",
		"rte_kni_kbridge_v" + v + "_", "rte_kni_lock_v" + v + "_", "rte_kni_logtype_",
		"rte_kni_registry_len_v" + v + "_", "rte_kni_registry_v" + v + "_"}
	if !slices.Equal(registries, want) {
		t.Errorf("librte_kni.so exports %v in %s, want the registries %v", registries, private, want)
	}
}

// registryVersion is KBRIDGE_REGISTRY_V_ of
// include/kbridge/kbridge_wakeup.h: the header's version, which the
// registries' link names carry.
func registryVersion(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "include/kbridge/kbridge_wakeup.h"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#define KBRIDGE_REGISTRY_V_ (\d+) `).FindSubmatch(b)
	if m == nil {
		t.Fatal("include/kbridge/kbridge_wakeup.h defines no KBRIDGE_REGISTRY_V_")
	}
	return string(m[1])
}

// mapNodes reads a version script: each node's exported names, comments and
// local: left out, @ABI@ replaced by abi.
func mapNodes(t *testing.T, path, abi string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	node := regexp.MustCompile(`^([A-Z_@0-9]+) \{$`)
	member := regexp.MustCompile(`^\s+(\w+);$`)
	out := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		if m := node.FindStringSubmatch(l); m != nil {
			cur = strings.ReplaceAll(m[1], "@ABI@", abi)
			out[cur] = nil
		} else if m := member.FindStringSubmatch(l); m != nil && cur != "" {
			out[cur] = append(out[cur], m[1])
		}
	}
	for n := range out {
		slices.Sort(out[n])
	}
	return out
}

// TestLibrteKniMapIsDPDKs: librte_kni/rte_kni.map, its @ABI@ that of the
// DPDK built against, has DPDK's own lib/kni/version.map's nodes with the
// same names in each, and no other node but KBRIDGE_PRIVATE_<ABI>.
// Skipped on a DPDK without KNI (no map to compare with).
func TestLibrteKniMapIsDPDKs(t *testing.T) {
	root := harness.RepoRoot(t)
	dpdkMap := harness.DPDKKNIVersionMap(t)
	prefix := harness.InstallDev(t, root)
	abi := soABI(t, prefix)
	theirs := mapNodes(t, dpdkMap, abi)
	ours := mapNodes(t, filepath.Join(root, "librte_kni/rte_kni.map"), abi)
	if len(theirs) == 0 {
		t.Fatalf("no version node in %s", dpdkMap)
	}
	for n, names := range theirs {
		if !slices.Equal(ours[n], names) {
			t.Errorf("node %s: DPDK's %s exports %v, librte_kni/rte_kni.map %v", n, dpdkMap, names, ours[n])
		}
	}
	for n := range ours {
		if _, ok := theirs[n]; !ok && n != "KBRIDGE_PRIVATE_"+abi {
			t.Errorf("librte_kni/rte_kni.map has node %s, which DPDK's %s has not", n, dpdkMap)
		}
	}
}

// TestABinaryLinkedAgainstDPDKsLibrteKniRunsOnOurs: testdata/knilink.c
// linked against a stub librte_kni.so.N made from DPDK's own version.map
// (its soname, nodes and names: what a binary built where DPDK had KNI
// records) needs librte_kni.so.N with DPDK's versions, and starts with
// kbridge's library in the stub's place, every function bound at once
// (LD_BIND_NOW=1).
func TestABinaryLinkedAgainstDPDKsLibrteKniRunsOnOurs(t *testing.T) {
	root := harness.RepoRoot(t)
	dpdkMap := harness.DPDKKNIVersionMap(t)
	prefix := harness.InstallDev(t, root)
	abi := soABI(t, prefix)
	dir := t.TempDir()
	stubDir := filepath.Join(dir, "stub")
	if err := os.Mkdir(stubDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	var nodes []string
	for n, names := range mapNodes(t, dpdkMap, abi) {
		nodes = append(nodes, n)
		for _, f := range names {
			fmt.Fprintf(&src, "void %s(void) {}\n", f)
		}
	}
	stubC := filepath.Join(dir, "stub.c")
	if err := os.WriteFile(stubC, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.Sh(t, nil, "cc", "-shared", "-fPIC", "-o", filepath.Join(stubDir, "librte_kni.so."+abi), stubC,
		"-Wl,-soname,librte_kni.so."+abi, "-Wl,--version-script="+dpdkMap)
	if err := os.Symlink("librte_kni.so."+abi, filepath.Join(stubDir, "librte_kni.so")); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "knilink-dpdk")
	harness.Sh(t, nil, "cc", "-O1", "-Wall", "-Werror", "-o", prog, "testdata/knilink.c", "-L"+stubDir, "-lrte_kni")
	verneed := harness.Sh(t, nil, "readelf", "-V", "--wide", prog)
	i := strings.Index(verneed, "File: librte_kni.so."+abi)
	if i < 0 {
		t.Fatalf("the binary needs no version of librte_kni.so.%s:\n%s", abi, verneed)
	}
	for _, n := range nodes {
		if !strings.Contains(verneed[i:], "Name: "+n+" ") {
			t.Errorf("the binary linked against DPDK's map needs no %s of librte_kni.so.%s:\n%s", n, abi, verneed[i:])
		}
	}
	out := harness.Sh(t, []string{"LD_LIBRARY_PATH=" + filepath.Join(prefix, "lib"), "LD_BIND_NOW=1"}, prog)
	t.Logf("linked against DPDK's map (nodes %v), ran on kbridge's librte_kni.so.%s: %q", nodes, abi, out)
}

// TestKNIStructLayoutIsDPDKs: the offset and size of every member of
// struct rte_kni_conf and struct rte_kni_ops, and their sizes, are the same
// under DPDK's own rte_kni.h as under kbridge's (testdata/knilayout.c,
// built against each): an app built with DPDK's header hands librte_kni
// the structures it reads.
func TestKNIStructLayoutIsDPDKs(t *testing.T) {
	root := harness.RepoRoot(t)
	dpdkInc := harness.DPDKKNIHeaderDir(t)
	cflags := strings.Fields(harness.Sh(t, nil, "pkg-config", "--cflags", "libdpdk"))
	dir := t.TempDir()
	layout := func(name, inc string) string {
		prog := filepath.Join(dir, name)
		args := append([]string{"-O0", "-Wall", "-Werror", "-DALLOW_EXPERIMENTAL_API", "-I" + inc}, cflags...)
		harness.Sh(t, nil, "cc", append(args, "-o", prog, "testdata/knilayout.c")...)
		return harness.Sh(t, nil, prog)
	}
	dpdk, ours := layout("dpdk", dpdkInc), layout("kbridge", filepath.Join(root, "include", "kbridge"))
	if dpdk != ours {
		t.Errorf("the KNI structures differ:\nDPDK's rte_kni.h:\n%s\nkbridge's:\n%s", dpdk, ours)
	}
	if n := strings.Count(ours, "\n"); n < 16 {
		t.Errorf("only %d lines of layout: %q", n, ours)
	}
	t.Logf("the same under both headers:\n%s", ours)
}

// TestLibrteKniPcDefinesRTELibKNI: with librte_kni.pc's Cflags an app's
// `#ifdef RTE_LIB_KNI` code is compiled, as with a DPDK built with KNI
// (DPDK's examples and test_kni.c guard their KNI code so; Debian's DPDK
// defines it nowhere): without it the app would build and run without KNI,
// no error said.
func TestLibrteKniPcDefinesRTELibKNI(t *testing.T) {
	root := harness.RepoRoot(t)
	prefix := harness.InstallDev(t, root)
	src := filepath.Join(t.TempDir(), "guard.c")
	if err := os.WriteFile(src, []byte("#include <rte_kni.h>\n#ifndef RTE_LIB_KNI\n#error RTE_LIB_KNI is not defined: KNI code is compiled out\n#endif\nint main(void) { return rte_kni_init(0); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-Wall", "-Werror", "-fsyntax-only", src}, harness.PkgConfig(t, prefix, "--cflags", "librte_kni", "libdpdk")...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Errorf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestLibrteKniRefusesAnEALNeverInitialised: librte_kni.so called without
// rte_eal_init() (its DPDK a second, uninitialised one beside a static
// app's) fails rte_kni_init and rte_kni_alloc with the cause on stderr,
// instead of going on into that EAL's empty tables.
func TestLibrteKniRefusesAnEALNeverInitialised(t *testing.T) {
	root := harness.RepoRoot(t)
	prefix := harness.InstallDev(t, root)
	prog := filepath.Join(t.TempDir(), "knilink")
	args := append([]string{"-O1", "-Wall", "-Werror", "-o", prog, "testdata/knilink.c"},
		harness.PkgConfig(t, prefix, "--libs", "librte_kni", "libdpdk")...)
	harness.Sh(t, nil, "cc", args...)
	out := harness.Sh(t, []string{"LD_LIBRARY_PATH=" + filepath.Join(prefix, "lib")}, prog, "call")
	for _, want := range []string{"rte_kni_init(1) = -1\n", "rte_kni_alloc = NULL\n",
		"KNI: rte_kni_init: the DPDK this librte_kni calls was never initialised",
		"KNI: rte_kni_alloc: the DPDK this librte_kni calls was never initialised"} {
		if !strings.Contains(out, want) {
			t.Errorf("without rte_eal_init: no %q in\n%s", want, out)
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

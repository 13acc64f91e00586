// Package service boots a real systemd (systemd-nspawn --boot on a volatile
// root), installs kbridge's Debian package in it (make deb) and puts its
// kbridge.service through start, crash, watchdog, restart, an upgrade by
// dpkg -i of a newer version (kb0 kept), stop and BindsTo, with
// the real kbridge beside the reference DPDK app, then purges the package
// and finds nothing of it left; the template kbridge@.service likewise
// with two instances beside an app with two ports; a KNI app's own unit
// beside the kbridges it starts. TestGoStepOnFreshDebian runs make deps'
// Go step on fresh Debian 12 and 13 roots.
package service

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/tests/harness"
)

// buildDeb packages bin/kbridge as make deb does, into a temporary
// directory, and returns the .deb's path.
func buildDeb(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(root, "deploy/deb.sh"), t.TempDir()).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("deploy/deb.sh: %v\n%s", err, stderr)
	}
	deb := strings.TrimSpace(string(out))
	if !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("deploy/deb.sh printed %q, not a .deb", deb)
	}
	return deb
}

// newerDeb repacks deb with "+1" on its version, uncompressed: the upgrade
// dpkg -i makes, in half a second where a second deb.sh takes about 15.
func newerDeb(t *testing.T, deb string) string {
	t.Helper()
	dir := t.TempDir()
	tree, newer := filepath.Join(dir, "tree"), filepath.Join(dir, "kbridge-newer.deb")
	harness.Sh(t, nil, "dpkg-deb", "-R", deb, tree)
	harness.Sh(t, nil, "sed", "-i", "s/^Version: .*/&+1/", filepath.Join(tree, "DEBIAN/control"))
	harness.Sh(t, nil, "dpkg-deb", "-Znone", "-b", tree, newer)
	return newer
}

// runChecks runs one of deploy/'s nspawn check scripts and returns its
// PASS and FAIL lines, failing t (with the whole output) when it fails,
// reports a FAIL, or passes fewer than min checks.
func runChecks(t *testing.T, cmd *exec.Cmd, min int, name string) []string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var checks []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "PASS ") || strings.HasPrefix(l, "FAIL ") {
			checks = append(checks, l)
		}
	}
	t.Logf("checks:\n%s", strings.Join(checks, "\n"))
	if err != nil || len(checks) < min || strings.Contains(string(out), "FAIL ") {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return checks
}

// packageChecks fails t unless the package checks of nspawn-lib.sh ran and
// passed: the install's (dpkg -i, unit, conffile, pkg-config, a C build,
// the KNI app's build, librte_kni's dlopen and links) and the purge's.
func packageChecks(t *testing.T, checks []string) {
	t.Helper()
	var installed, purged int
	for _, c := range checks {
		switch {
		case strings.HasPrefix(c, "PASS  package: "):
			installed++
		case strings.HasPrefix(c, "PASS  purge: "):
			purged++
		}
	}
	if installed < 9 || purged < 7 {
		t.Errorf("package checks: %d install and %d purge checks passed, want 9 and 7", installed, purged)
	}
}

func TestUnitUnderRealSystemd(t *testing.T) {
	harness.NeedRoot(t, "booting systemd in a container needs root")
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		t.Skip("systemd-nspawn missing: make deps installs systemd-container")
	}
	root := harness.RepoRoot(t)
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"kbridge", "kbridge-refapp"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("bin/%s missing: run make build (make test does)", b)
		}
	}
	cfg := filepath.Join(t.TempDir(), "kbridge.yaml")
	if err := os.WriteFile(cfg, []byte(`dpdk:
  file_prefix: kbns
port: kb0
interface:
  name: kb0
  addresses: [198.18.9.2/24]
stats:
  metrics: ""
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// net_ring0: an ethdev with no traffic, so the app needs no NIC.
	app := "/opt/kbridge/bin/kbridge-refapp -l 1 --file-prefix kbns --proc-type primary --no-pci --vdev net_ring0 -m 64 -- --port kb0"
	deb := buildDeb(t, root)
	newer := newerDeb(t, deb)
	cmd := exec.Command("bash", filepath.Join(root, "deploy/nspawn-check.sh"), deb, app, cfg)
	cmd.Env = append(os.Environ(), "EXTRA_BINS="+filepath.Join(bin, "kbridge-refapp"), "UPGRADE_DEB="+newer)
	checks := runChecks(t, cmd, 8, "nspawn-check")
	upgraded := 0
	for _, c := range checks {
		if strings.HasPrefix(c, "PASS  upgrade: ") {
			upgraded++
		}
	}
	if upgraded != 3 {
		t.Errorf("%d upgrade checks passed, want 3 (dpkg -i, the restart on the new version, kb0 kept)", upgraded)
	}
	packageChecks(t, checks)
	noHugepageFiles(t, "kbns")
}

// noHugepageFiles fails t when the app's hugepage files (its --file-prefix)
// outlived the container: they would hold their pages until the next run.
func noHugepageFiles(t *testing.T, prefix string) {
	t.Helper()
	if left, _ := filepath.Glob("/dev/hugepages/" + prefix + "map_*"); len(left) > 0 {
		t.Errorf("%d hugepage files of the app's prefix %s left in /dev/hugepages (%s, ...)", len(left), prefix, left[0])
	}
}

// TestInstancesUnderRealSystemd runs two instances of the template unit,
// kbridge@kb0 and kbridge@kb1, from the package beside one reference app
// with two ports (deploy/nspawn-check-instances.sh): each on its own file,
// interface and control socket, a crash, stop or `systemctl clean` of one
// leaving the other, BindsTo stopping both, a purge with both running
// leaving nothing.
func TestInstancesUnderRealSystemd(t *testing.T) {
	harness.NeedRoot(t, "booting systemd in a container needs root")
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		t.Skip("systemd-nspawn missing: make deps installs systemd-container")
	}
	root := harness.RepoRoot(t)
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"kbridge", "kbridge-refapp"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("bin/%s missing: run make build (make test does)", b)
		}
	}
	// Two net_ring ethdevs: ports with no traffic, so the app needs no NIC.
	app := "/opt/kbridge/bin/kbridge-refapp -l 1 --file-prefix kbns --proc-type primary --no-pci " +
		"--vdev net_ring0 --vdev net_ring1 -m 128 -- --port kb0 --port kb1"
	cmd := exec.Command("bash", filepath.Join(root, "deploy/nspawn-check-instances.sh"), buildDeb(t, root), app)
	cmd.Env = append(os.Environ(), "EXTRA_BINS="+filepath.Join(bin, "kbridge-refapp"))
	runChecks(t, cmd, 25, "nspawn-check-instances")
	noHugepageFiles(t, "kbns")
}

// TestKNIAppUnitUnderRealSystemd runs the KNI test app (tests/kniapp) as a
// unit of its own, Type=notify with NotifyAccess=all, which says READY=1
// and its STATUS= itself and allocates and releases KNIs: every kbridge
// that rte_kni_alloc starts runs in the app's cgroup, and none may speak
// for the app's unit (deploy/nspawn-check-kni.sh). The unit stays active
// through the releases and keeps the app's status.
func TestKNIAppUnitUnderRealSystemd(t *testing.T) {
	harness.NeedRoot(t, "booting systemd in a container needs root")
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		t.Skip("systemd-nspawn missing: make deps installs systemd-container")
	}
	root := harness.RepoRoot(t)
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"kbridge", "kbridge-kniapp"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("bin/%s missing: run make build (make test does)", b)
		}
	}
	cmd := exec.Command("bash", filepath.Join(root, "deploy/nspawn-check-kni.sh"),
		filepath.Join(bin, "kbridge"), filepath.Join(bin, "kbridge-kniapp"))
	runChecks(t, cmd, 7, "nspawn-check-kni")
	noHugepageFiles(t, "kbkni")
}

// TestXDPUnitUnderRealSystemd runs deploy/kbridge.service with mode: xdp
// (loader kbridge) on a veth "NIC" inside the container's private network:
// active (running) without CAP_SYS_ADMIN, kb0 and the pins exist, a ping
// from the peer reaches kb0 through the redirect, stop leaves nothing.
func TestXDPUnitUnderRealSystemd(t *testing.T) {
	harness.NeedRoot(t, "booting systemd in a container needs root")
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		t.Skip("systemd-nspawn missing: make deps installs systemd-container")
	}
	root := harness.RepoRoot(t)
	bin := filepath.Join(root, "bin", "kbridge")
	if _, err := os.Stat(bin); err != nil {
		t.Fatal("bin/kbridge missing: run make build (make test does)")
	}
	checks := runChecks(t, exec.Command("bash", filepath.Join(root, "deploy/nspawn-check-xdp.sh"), buildDeb(t, root)), 20, "nspawn-check-xdp")
	packageChecks(t, checks)
}

// TestGoStepOnFreshDebian runs deploy/go.sh --install (make deps' Go
// step) in fresh debootstrapped Debian 12 and 13 roots, which have no Go:
// it must install Debian's own (bookworm-backports' golang-1.23-go, trixie's
// golang-go), and the go the Makefile then picks must be the toolchain
// go.mod names, its own binary (deploy/go.sh: the Makefile's GOEXPERIMENT
// panics trixie's Go 1.24 before it switches). Needs the network; about a
// minute.
func TestGoStepOnFreshDebian(t *testing.T) {
	harness.NeedRoot(t, "debootstrap and systemd-nspawn need root")
	for _, c := range []string{"debootstrap", "systemd-nspawn"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s missing: make deps installs it", c)
		}
	}
	root := harness.RepoRoot(t)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, l := range strings.Split(string(gomod), "\n") {
		if v, ok := strings.CutPrefix(l, "toolchain "); ok {
			want = "go version " + strings.TrimSpace(v) + " "
		}
	}
	if want == "" {
		t.Fatal("go.mod has no toolchain line: GOTOOLCHAIN would fetch its go line's release")
	}
	for _, tc := range []struct{ suite, installed string }{
		{"bookworm", "golang-1.23-go"},
		{"trixie", "golang-go"},
	} {
		t.Run(tc.suite, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command("bash", filepath.Join(root, "deploy/go-check.sh"), tc.suite).CombinedOutput()
			t.Logf("go-check.sh %s:\n%s", tc.suite, out)
			if err != nil {
				t.Fatalf("go-check.sh %s: %v", tc.suite, err)
			}
			if !strings.Contains(string(out), "go: installing "+tc.installed+"\n") {
				t.Errorf("go.sh did not install Debian's %s", tc.installed)
			}
			if !regexp.MustCompile(`make GO: /\S*/golang.org/toolchain@\S*go1\.\d+\.\d+\S*/bin/go\n`).Match(out) {
				t.Errorf("the Makefile's GO is not the toolchain's own binary in the module cache")
			}
			if !strings.Contains(string(out), "make go version: "+want) {
				t.Errorf("the Makefile's go does not say %q", want)
			}
		})
	}
}

// quickStartBlock returns README.md's quick start: the first sh block of
// its section "Quick start", as a reader copies it.
func quickStartBlock(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Quick start\n")
	if !ok {
		t.Fatal("README.md has no section Quick start")
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	_, block, ok := strings.Cut(sec, "\n```sh\n")
	if !ok {
		t.Fatal("README.md's quick start has no sh block")
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatal("README.md's quick start block does not end")
	}
	return block + "\n"
}

// TestQuickStart runs README.md's quick start as written (the block is cut
// out of README.md, so the two cannot drift apart) in a booted systemd:
// the package from make deb's deploy/deb.sh, the five lines of YAML,
// kbridge check, the unit started beside the reference app (the app's
// --file-prefix myapp and port kb0, as the text says), kbridge stats and
// doctor; every command must succeed, kbridge run, kb0 carry the address.
func TestQuickStart(t *testing.T) {
	harness.NeedRoot(t, "booting systemd in a container needs root")
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		t.Skip("systemd-nspawn missing: make deps installs systemd-container")
	}
	root := harness.RepoRoot(t)
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"kbridge", "kbridge-refapp"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("bin/%s missing: run make build (make test does)", b)
		}
	}
	block := filepath.Join(t.TempDir(), "quickstart.sh")
	if err := os.WriteFile(block, []byte(quickStartBlock(t, root)), 0o644); err != nil {
		t.Fatal(err)
	}
	app := "/opt/kbridge/bin/kbridge-refapp -l 1 --file-prefix myapp --proc-type primary --no-pci --vdev net_ring0 -m 64 -- --port kb0"
	cmd := exec.Command("bash", filepath.Join(root, "deploy/nspawn-quickstart.sh"), buildDeb(t, root), block, app)
	cmd.Env = append(os.Environ(), "EXTRA_BINS="+filepath.Join(bin, "kbridge-refapp"))
	runChecks(t, cmd, 5, "nspawn-quickstart")
	noHugepageFiles(t, "myapp")
}

// TestDebIsLintianClean runs lintian on the package deploy/deb.sh makes:
// no error, warning or information but those docs/PACKAGING.md argues,
// which the package overrides (usr/share/lintian/overrides/kbridge, each
// with its reason); those show as overridden, and none may go unused.
func TestDebIsLintianClean(t *testing.T) {
	if testing.Short() {
		t.Skip("lintian takes a minute or two: not under -short")
	}
	if _, err := exec.LookPath("lintian"); err != nil {
		t.Skip("lintian missing: make deps installs it")
	}
	root := harness.RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "bin", "kbridge")); err != nil {
		t.Fatal("bin/kbridge missing: run make build (make test does)")
	}
	deb := buildDeb(t, root)
	out, err := exec.Command("lintian", "--display-level", ">=pedantic", "--show-overrides", "--tag-display-limit", "0", deb).CombinedOutput()
	t.Logf("lintian %s:\n%s", filepath.Base(deb), out)
	var bad []string
	tag := regexp.MustCompile(`^[EWIPX]: `) // O: an override's, N: notes
	for _, l := range strings.Split(string(out), "\n") {
		if tag.MatchString(l) {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 {
		t.Errorf("lintian reports %d tags the package does not override (docs/PACKAGING.md):\n%s", len(bad), strings.Join(bad, "\n"))
	}
	if err != nil && len(bad) == 0 {
		t.Errorf("lintian: %v", err)
	}
}

// TestUnitNamesItsPrefix: the unit make install writes (deploy/unit.sh
// PREFIX) runs PREFIX/bin/kbridge, start and cleanup, and so does the
// template made from it: make install PREFIX=/opt writes
// ExecStart=/opt/bin/kbridge.
func TestUnitNamesItsPrefix(t *testing.T) {
	root := harness.RepoRoot(t)
	unit, err := exec.Command("bash", filepath.Join(root, "deploy/unit.sh"), "/opt").Output()
	if err != nil {
		t.Fatalf("unit.sh /opt: %v", err)
	}
	for _, want := range []string{
		"\nExecStart=/opt/bin/kbridge run --config /etc/kbridge/kbridge.yaml\n",
		"\nExecStopPost=-/opt/bin/kbridge cleanup --config /etc/kbridge/kbridge.yaml\n",
		"file:///opt/share/doc/kbridge/",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit.sh /opt lacks %q", want)
		}
	}
	if strings.Contains(string(unit), "/usr/local") {
		t.Error("unit.sh /opt still names /usr/local")
	}
	path := filepath.Join(t.TempDir(), "kbridge.service")
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := exec.Command("bash", filepath.Join(root, "deploy/instance-unit.sh"), path).Output()
	if err != nil || !strings.Contains(string(tmpl), "\nExecStart=/opt/bin/kbridge run --instance %I\n") {
		t.Errorf("the template from unit.sh /opt: %v\n%s", err, tmpl)
	}
}

// Package service boots a real systemd (systemd-nspawn --boot on a volatile
// root) and puts deploy/kbridge.service through start, crash, watchdog,
// stop and BindsTo, with the real kbridge beside the reference DPDK app.
package service

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnitUnderRealSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("booting systemd in a container needs root: run it as root (make test)")
	}
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		t.Skip("systemd-nspawn missing: make deps installs systemd-container")
	}
	root, _ := filepath.Abs("../..")
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
	cmd := exec.Command("bash", filepath.Join(root, "deploy/nspawn-check.sh"), filepath.Join(bin, "kbridge"), app, cfg)
	cmd.Env = append(os.Environ(), "EXTRA_BINS="+filepath.Join(bin, "kbridge-refapp"))
	out, err := cmd.CombinedOutput()
	var checks []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "PASS ") || strings.HasPrefix(l, "FAIL ") {
			checks = append(checks, l)
		}
	}
	t.Logf("checks:\n%s", strings.Join(checks, "\n"))
	if err != nil || len(checks) < 8 || strings.Contains(string(out), "FAIL ") {
		t.Fatalf("nspawn-check: %v\n%s", err, out)
	}
}

// TestXDPUnitUnderRealSystemd runs deploy/kbridge.service with mode: xdp
// (loader kbridge) on a veth "NIC" inside the container's private network:
// active (running) without CAP_SYS_ADMIN, kb0 and the pins exist, a ping
// from the peer reaches kb0 through the redirect, stop leaves nothing.
func TestXDPUnitUnderRealSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("booting systemd in a container needs root: run it as root (make test)")
	}
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		t.Skip("systemd-nspawn missing: make deps installs systemd-container")
	}
	root, _ := filepath.Abs("../..")
	bin := filepath.Join(root, "bin", "kbridge")
	if _, err := os.Stat(bin); err != nil {
		t.Fatal("bin/kbridge missing: run make build (make test does)")
	}
	out, err := exec.Command("bash", filepath.Join(root, "deploy/nspawn-check-xdp.sh"), bin).CombinedOutput()
	var checks []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "PASS ") || strings.HasPrefix(l, "FAIL ") {
			checks = append(checks, l)
		}
	}
	t.Logf("checks:\n%s", strings.Join(checks, "\n"))
	if err != nil || len(checks) < 20 || strings.Contains(string(out), "FAIL ") {
		t.Fatalf("nspawn-check-xdp: %v\n%s", err, out)
	}
}

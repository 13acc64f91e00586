package kni

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/tests/harness"
)

// TestCtrlThreadCreateErrorIsNegative: rte_ctrl_thread_create(), which KNI
// applications call and rte_kni_compat.h gives back on DPDK 23.11 and
// later, returns a negative errno when the control thread cannot take the
// control threads' CPUs, as DPDK 22.11's did: rte_thread_create_control()
// returns pthread_setaffinity_np()'s positive one there, which callers
// testing ret < 0 took for success (and then used a thread id never set).
// testdata/ctrlthread.c forces the failure by standing in for
// pthread_setaffinity_np; built here against rte_kni.h and the DPDK
// pkg-config finds (on 22.11 it checks DPDK's own call, which the shim
// leaves alone). Its EAL has no hugepages and no shared files.
func TestCtrlThreadCreateErrorIsNegative(t *testing.T) {
	harness.NeedRoot(t, "a DPDK EAL needs root")
	root := harness.RepoRoot(t)
	for _, tool := range []string{"cc", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing: %v", tool, err)
		}
	}
	flags := func(what string) []string {
		out, err := exec.Command("pkg-config", what, "libdpdk").Output()
		if err != nil {
			t.Fatalf("pkg-config %s libdpdk: %v", what, err)
		}
		return strings.Fields(string(out))
	}
	bin := filepath.Join(t.TempDir(), "ctrlthread")
	args := append([]string{"-O2", "-g", "-Wall", "-Wextra", "-Werror", "-rdynamic", "-I" + filepath.Join(root, "include", "kbridge")}, flags("--cflags")...)
	args = append(args, "-o", bin, filepath.Join(root, "tests/kni/testdata/ctrlthread.c"))
	args = append(append(args, flags("--libs")...), "-ldl")
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := exec.Command(bin, "-l", "0", "--no-huge", "-m", "64", "--no-pci", "--no-shconf",
		"--no-telemetry", "--log-level", "lib.eal:warning").CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "ctrlthread: ") {
			t.Log(l)
		}
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

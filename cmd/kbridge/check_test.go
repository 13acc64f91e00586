package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/doctor"
)

// hostTree writes a fixture host under a temporary root: 2 MB hugepages
// reserved and mounted, CPUs 0-3 online and, with app, a DPDK primary of
// file prefix myapp (its runtime directory's config and mp_socket).
func hostTree(t *testing.T, app bool) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/mounts": "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":   "512\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": "500\n",
		"sys/devices/system/cpu/online":                           "0-3\n",
		"sys/devices/system/cpu/possible":                         "0-3\n",
	}
	if app {
		files["var/run/dpdk/myapp/config"] = ""
		files["var/run/dpdk/myapp/mp_socket"] = ""
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// checkFile writes a configuration for the app of hostTree, with its
// control socket in a directory of the test's, and more lines.
func checkFile(t *testing.T, more string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "kbridge.yaml")
	body := "dpdk:\n  file_prefix: myapp\nworkers:\n  cpus: [0]\nstats:\n  socket: " + filepath.Join(dir, "run", "kbridge.sock") + "\n" + more
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// privileged stands in for a root kbridge's capabilities.
func privileged(t *testing.T) {
	old := privileges
	privileges = func() doctor.Result {
		return doctor.Result{Check: checkPrivileges, Status: doctor.Pass, Evidence: "test"}
	}
	t.Cleanup(func() { privileges = old })
}

// kbridge check exits 0 on a valid file and a ready host, each finding
// shown with its evidence.
func TestCheckPassesAValidFileOnAReadyHost(t *testing.T) {
	privileged(t)
	code, out, stderr := kbridge(t, "check", "--config", checkFile(t, ""), "--root", hostTree(t, true))
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, stderr, out)
	}
	for _, want := range []string{"PASS    config", "PASS    hugepages", "PASS    dpdk-runtime", "PASS    cpus", "PASS    control-socket", "0 fail"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// kbridge check exits 2 on a bad file, naming each key and value, and
// looks at no host.
func TestCheckRefusesABadFileWithExit2(t *testing.T) {
	privileged(t)
	code, out, stderr := kbridge(t, "check", "--config", checkFile(t, "log:\n  level: loud\nrequests:\n  timeout: 3\n"), "--root", hostTree(t, true))
	if code != 2 || !strings.Contains(stderr, `log.level: "loud": must be debug, info, warn, error`) || !strings.Contains(stderr, "requests.timeout: 3: a duration needs a unit") || out != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// kbridge check exits 1 on a host that is not ready: the app's DPDK not
// running (its runtime directory missing), or no privileges; each says
// why and how to fix it.
func TestCheckSaysWhatTheHostLacksWithExit1(t *testing.T) {
	privileged(t)
	code, out, _ := kbridge(t, "check", "--config", checkFile(t, ""), "--root", hostTree(t, false))
	if code != 1 || !strings.Contains(out, "FAIL    dpdk-runtime") || !strings.Contains(out, "start the DPDK app first") {
		t.Errorf("without the app: exit %d\n%s", code, out)
	}
	privileges = func() doctor.Result {
		return doctor.Result{Check: checkPrivileges, Status: doctor.Fail, Evidence: "uid 1000 lacks CAP_NET_ADMIN"}
	}
	code, out, _ = kbridge(t, "check", "--config", checkFile(t, ""), "--root", hostTree(t, true))
	if code != 1 || !strings.Contains(out, "FAIL    privileges") {
		t.Errorf("without privileges: exit %d\n%s", code, out)
	}
	// A control socket path that is no socket: the start would refuse it.
	cfg := checkFile(t, "")
	sock := filepath.Join(filepath.Dir(cfg), "run", "kbridge.sock")
	if err := os.MkdirAll(sock, 0o755); err != nil {
		t.Fatal(err)
	}
	privileged(t)
	code, out, _ = kbridge(t, "check", "--config", cfg, "--root", hostTree(t, true))
	if code != 1 || !strings.Contains(out, "FAIL    control-socket") {
		t.Errorf("a directory at the socket's path: exit %d\n%s", code, out)
	}
}

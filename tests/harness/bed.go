package harness

// The namespace test bed of tests/testbed/README.md, as the tests that bring
// it up with up.sh drive it: run commands in its namespaces, find the
// processes it started by their PID files, and check that tearing it down
// left nothing behind.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The bed's fixed names (tests/testbed/README.md and lib.sh).
const (
	RunDir      = "/run/kbt"
	PeerIP      = "198.18.0.1"
	TreeEntries = 2000*3 + 1 // 2000 directories, two files each, big.bin
	// ClientCPU is where clients run: off the app's lcore, the highest CPU.
	ClientCPU = "0"
	// LockFile serialises the bed's scripts and users (lib.sh's KBT_LOCKFILE).
	LockFile = "/run/kbt.lock"
)

// LockedEnv is the environment of up.sh and down.sh run by a test that holds
// LockFile (ClaimBed): they must not wait for the lock themselves.
var LockedEnv = []string{"KBT_LOCK_HELD=1"}

// Namespaces and Links are what the bed creates.
var (
	Namespaces = []string{"kbt-peer", "kbt-dut", "kbt-direct"}
	Links      = []string{"kbt-wire", "kbt-nic", "kbt-alt", "kbt-base", "kb0"}
)

// RepoRoot returns the repository root, two levels above a tests/X package.
func RepoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Command returns name with args and env added to the test's environment.
func Command(env []string, name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Env = append(os.Environ(), env...)
	return c
}

// Sh runs a command and fails the test, with its output, if it fails.
func Sh(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	out, err := Command(env, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// In runs a client command in namespace ns, pinned to ClientCPU.
func In(t *testing.T, env []string, ns string, args ...string) string {
	t.Helper()
	return Sh(t, env, "ip", append([]string{"netns", "exec", ns, "taskset", "-c", ClientCPU}, args...)...)
}

// PidOf reads the PID the bed recorded for process name.
func PidOf(t *testing.T, name string) int {
	t.Helper()
	pid, err := ReadPID(name)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// ReadPID reads the PID the bed recorded for process name in RunDir.
func ReadPID(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(RunDir, name+".pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid in %s/%s.pid", RunDir, name)
	}
	return pid, nil
}

// Procs reads every PID the bed recorded (RunDir/NAME.pid), by name.
func Procs() map[string]int {
	procs := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(RunDir, "*.pid"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		if pid, err := ReadPID(name); err == nil {
			procs[name] = pid
		}
	}
	return procs
}

// Alive reports whether pid runs. A zombie has exited: this VM's init reaps
// orphans slowly.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')') // the state follows the command name
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// WaitGone waits up to d for pid to exit and reports whether it did.
func WaitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for Alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// StopPID sends SIGTERM to pid, a process the bed started (what names it),
// and fails t unless it exits within d.
func StopPID(t *testing.T, what string, pid int, d time.Duration) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !WaitGone(pid, d) {
		t.Fatalf("%s did not stop on SIGTERM", what)
	}
}

// CheckNothingLeft reports every namespace, link (the bed's and extraLinks)
// and recorded process that survived make testbed-down.
func CheckNothingLeft(t *testing.T, extraLinks ...string) {
	t.Helper()
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	for _, ns := range Namespaces {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace %s left after testbed-down", ns)
		}
	}
	links, _ := exec.Command("ip", "-o", "link").CombinedOutput()
	for _, l := range append(append([]string(nil), Links...), extraLinks...) {
		if strings.Contains(string(links), " "+l+":") || strings.Contains(string(links), " "+l+"@") {
			t.Errorf("link %s left in the root namespace after testbed-down", l)
		}
	}
	for name, pid := range Procs() {
		if Alive(pid) {
			t.Errorf("process %d (%s.pid) still alive after testbed-down", pid, name)
		}
	}
}

// ClaimBed waits until no one else's test bed is up, then holds
// /run/kbt.lock for the whole test, so that another user's up.sh waits for
// this test instead of tearing its bed down (the protocol of kbt_claim_bed in
// tests/testbed/lib.sh).
func ClaimBed(t *testing.T, root string) {
	// Wait as long as the test binary's -timeout allows, less what the test
	// itself needs; KBT_BED_WAIT overrides.
	wait := 10 * time.Minute
	if d, ok := t.Deadline(); ok {
		wait = time.Until(d) - 2*time.Minute
	}
	if v, err := time.ParseDuration(os.Getenv("KBT_BED_WAIT")); err == nil {
		wait = v
	}
	deadline := time.Now().Add(wait)
	users := func() string {
		out, _ := exec.Command("bash", "-c", ". "+filepath.Join(root, "tests/testbed/lib.sh")+" && kbt_bed_users").Output()
		return strings.Join(strings.Fields(string(out)), " ")
	}
	said := false
	for {
		f, err := os.OpenFile(LockFile, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		who := "(another script holds " + LockFile + ")"
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if who = users(); who == "" {
				t.Cleanup(func() { f.Close() })
				if said {
					t.Logf("the test bed is free now")
				}
				return
			}
		}
		f.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the test bed is still in use after %v: %s (a crashed run? tests/testbed/down.sh removes it; KBT_BED_WAIT sets the wait)", wait, who)
		}
		if !said {
			t.Logf("the test bed is in use by someone else: %s; waiting up to %v", who, wait)
			said = true
		}
		time.Sleep(5 * time.Second)
	}
}

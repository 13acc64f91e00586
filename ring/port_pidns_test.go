package ring

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary run again plays one of two processes: with holdLockEnv
// set, a primary holding its configuration lock; with checkEnv set (to
// "DIR PREFIX"), kbridge checking it from where it runs.
const (
	holdLockEnv = "KBRIDGE_TEST_HOLD_CONFIG_LOCK"
	checkEnv    = "KBRIDGE_TEST_CHECK_PRIMARY"
)

func init() {
	if dir, prefix, ok := strings.Cut(os.Getenv(checkEnv), " "); ok {
		if err := CheckPrimaryVisible(dir, prefix); err != nil {
			os.Stdout.WriteString(err.Error())
		}
		os.Exit(0)
	}
	path := os.Getenv(holdLockEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK})
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Minute) // killed by the test before
	os.Exit(0)
}

// holdConfigLock starts a lock holder on dir/prefix/config and waits until
// it holds the lock.
func holdConfigLock(t *testing.T, dir, prefix string) {
	t.Helper()
	path := filepath.Join(dir, prefix, "config")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdLockEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		t.Fatalf("the lock holder did not lock %s: %q %v", path, line, err)
	}
}

func TestAPrimaryInThisPIDNamespaceIsVisible(t *testing.T) {
	dir := t.TempDir()
	holdConfigLock(t, dir, "here")
	if err := CheckPrimaryVisible(dir, "here"); err != nil {
		t.Fatalf("a holder in this PID namespace: %v", err)
	}
	if err := CheckPrimaryVisible(dir, "nobody"); err != nil {
		t.Fatalf("no config file is PrimaryAlive's to report: %v", err)
	}
}

func TestAPrimaryInAnotherPIDNamespaceIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace of its own needs root (unshare --pid)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) not found")
	}
	dir := t.TempDir()
	holdConfigLock(t, dir, "app")
	// kbridge in a PID namespace of its own, as in a container of a pod
	// that shares no process namespace: the holder has no pid there.
	check := exec.Command(unshare, "--pid", "--fork", "--kill-child", os.Args[0], "-test.run=^$")
	check.Env = append(os.Environ(), checkEnv+"="+dir+" app")
	out, err := check.Output()
	if err != nil {
		t.Fatalf("the check in a PID namespace of its own: %v", err)
	}
	if !strings.Contains(string(out), ErrOtherPIDNamespace.Error()) {
		t.Fatalf("the check in a PID namespace of its own said %q, want %q", out, ErrOtherPIDNamespace)
	}
	t.Log(string(out))
}

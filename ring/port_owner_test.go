package ring

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The liveness rule kbridge's claim and kbridge.h's kbridge_port_free()
// share (kbridge_owner_state_), on real processes: a child that runs, one
// whose recorded start time is not its own (a reused pid), one that was
// killed and not reaped (a zombie), one reaped. The child's command name has
// spaces and parentheses, which /proc/<pid>/stat does not escape.
func TestOwnerFate(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	odd := filepath.Join(t.TempDir(), "a) (b c")
	if err := os.Symlink(sleep, odd); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	start := kbPidStart(pid)
	if start == 0 {
		t.Fatalf("no start time read for pid %d", pid)
	}
	me := Owner{PID: pid, Start: uint32(start)}
	if f := me.Fate(); f != "" {
		t.Errorf("a running process: fate %q, want alive", f)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if f := me.Fate(); f != "" {
		t.Errorf("a stopped process: fate %q, want alive", f)
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if f := (Owner{PID: pid, Start: uint32(start) + 1}).Fate(); !strings.Contains(f, "another start time") {
		t.Errorf("the pid with another start time: fate %q, want a reused pid", f)
	}
	if f := (Owner{}).Fate(); f != "none" {
		t.Errorf("no owner: fate %q, want none", f)
	}

	// Killed and not reaped (no Wait yet): a zombie.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for me.Fate() == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if f := me.Fate(); !strings.Contains(f, "a zombie") {
		t.Errorf("a killed, unreaped child: fate %q, want a zombie", f)
	}
	_ = cmd.Wait()
	if f := me.Fate(); f != "exited" {
		t.Errorf("a reaped child: fate %q, want exited", f)
	}
}

package harness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a child process a test started: its output collects in Log while
// it runs, and it is stopped by its PID when the test ends (or earlier, by
// Stop, Kill or Quit).
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  *Buffer // stdout and stderr
	// StopWait is how long Stop waits after SIGTERM before it kills the
	// process and fails the test.
	StopWait time.Duration

	t      testing.TB
	stdin  io.Closer
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's error, set before exited closes
	once   sync.Once     // one of Stop, Kill, Quit ends it
}

// Spec shapes Start.
type Spec struct {
	Env []string // added to the test's environment
	// Stdin holds the process's stdin open until it is stopped (testpmd
	// without -i exits when its stdin ends; Quit closes it).
	Stdin bool
	// ExtraFiles are passed from fd 3 on (os/exec's ExtraFiles).
	ExtraFiles []*os.File
}

// Start runs args (the program, then its arguments) as name, in a process
// group of its own; Cleanup stops it.
func Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	return StartSpec(t, name, Spec{}, args...)
}

// StartSpec is Start with the environment and stdin of s.
func StartSpec(t testing.TB, name string, s Spec, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Log: &Buffer{}, StopWait: 10 * time.Second, t: t, exited: make(chan struct{})}
	p.Cmd = exec.Command(args[0], args[1:]...)
	if s.Env != nil {
		p.Cmd.Env = append(os.Environ(), s.Env...)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Log, p.Log
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.Cmd.ExtraFiles = s.ExtraFiles
	if s.Stdin {
		w, err := p.Cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdin = w
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.Stop(false) })
	return p
}

// Pid is the process's PID (`ip netns exec` and nsenter exec the program
// in place, so it is the program's).
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Running reports whether the process has not exited.
func (p *Proc) Running() bool { return !p.ExitedWithin(0) }

// ExitedWithin reports whether the process exited, waiting at most d.
func (p *Proc) ExitedWithin(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	}
	select {
	case <-p.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// Exited is closed once the process exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited (Cmd.Wait's error), once it did.
func (p *Proc) Err() error {
	<-p.exited
	return p.err
}

// ExitCode is the exit status once the process exited: -1 when a signal
// ended it, -2 when Wait failed otherwise.
func (p *Proc) ExitCode() int {
	err := p.Err()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	return -2
}

// Stop sends SIGTERM to the process and waits StopWait for it, then kills
// it and fails the test. With check, an exit other than 0 fails the test.
func (p *Proc) Stop(check bool) {
	p.once.Do(func() {
		_ = p.Signal(syscall.SIGTERM)
		if !p.ExitedWithin(p.StopWait) {
			_ = p.Cmd.Process.Kill()
			<-p.exited
			p.t.Errorf("%s ignored SIGTERM for %v\n%s", p.Name, p.StopWait, p.Log)
		} else if check && p.err != nil {
			p.t.Errorf("%s exited with %v after SIGTERM\n%s", p.Name, p.err, p.Log)
		}
		p.closeStdin()
	})
}

// Kill sends SIGKILL (a crash: none of the process's own clean-up runs)
// and waits for the exit; a process that survives it 10 s fails the test.
func (p *Proc) Kill() {
	p.t.Helper()
	p.once.Do(func() {
		// A process that exited a moment ago was reaped by Wait before
		// Running notices: os.ErrProcessDone is not a failure to kill.
		if err := p.Cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) && p.Running() {
			p.t.Fatal(err)
		}
		if !p.ExitedWithin(10 * time.Second) {
			p.t.Fatalf("%s survived SIGKILL for 10s", p.Name)
		}
		p.closeStdin()
	})
}

// Quit closes the process's stdin (Spec.Stdin) and waits StopWait for it
// to exit, then kills it. It returns how the process exited.
func (p *Proc) Quit() error {
	var err error
	p.once.Do(func() {
		p.closeStdin()
		if p.ExitedWithin(p.StopWait) {
			err = p.err
			return
		}
		_ = p.Cmd.Process.Kill()
		<-p.exited
		err = fmt.Errorf("%s did not quit when its stdin ended", p.Name)
	})
	return err
}

func (p *Proc) closeStdin() {
	if p.stdin != nil {
		p.stdin.Close()
	}
}

// WaitLog waits until the process's output holds what; it fails the test
// when the process exits first or after timeout.
func (p *Proc) WaitLog(what string, timeout time.Duration) {
	p.t.Helper()
	p.WaitCount(what, 1, timeout)
}

// WaitCount waits until what occurs n times in the process's output (the
// n-th connect of a frontend, say); it fails the test when the process
// exits first or after timeout.
func (p *Proc) WaitCount(what string, n int, timeout time.Duration) {
	p.t.Helper()
	p.WaitCountIn(p.t, what, n, timeout)
}

// WaitCountIn is WaitCount failing t, a subtest of the one that started p.
func (p *Proc) WaitCountIn(t testing.TB, what string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for p.Log.Count(what) < n {
		// Wait returns once the output is copied: what the process wrote
		// before it exited is in Log.
		if !p.Running() && p.Log.Count(what) < n {
			t.Fatalf("%s exited (%v) before %q #%d:\n%s", p.Name, p.err, what, n, p.Log)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q %d times, not %d, after %v:\n%s", p.Name, what, p.Log.Count(what), n, timeout, p.Log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CheckRunning fails t if the process has exited.
func (p *Proc) CheckRunning(t testing.TB) {
	t.Helper()
	if !p.Running() {
		t.Fatalf("%s died (%v):\n%s", p.Name, p.err, p.Log)
	}
}

// WaitReady polls ready every 20 ms until it holds: the process is up and
// serving (what says how: "answer on SOCK"). It fails t when the process
// exits first or after timeout.
func (p *Proc) WaitReady(t testing.TB, what string, timeout time.Duration, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ready() {
		if p.ExitedWithin(20 * time.Millisecond) {
			t.Fatalf("%s exited at start-up: %v\n%s", p.Name, p.err, p.Log)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not %s within %v\n%s", p.Name, what, timeout, p.Log)
		}
	}
}

// WaitUntil polls cond every 2 ms until it holds; it fails t after
// timeout, saying what it waited for. It returns how long it took.
func WaitUntil(t testing.TB, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// Run runs args (the program, then its arguments) to the end and returns
// its combined output; it fails t, with the output, when the program fails.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	return Sh(t, nil, args[0], args[1:]...)
}

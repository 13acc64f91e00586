package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kbridge/kbridge/config"

	"github.com/kbridge/kbridge/tests/harness"
)

// fakeRunner applies policy.* live like the ring path, without DPDK.
type fakeRunner struct {
	mu      sync.Mutex
	cfg     config.Config
	reloads int
	alive   atomic.Bool
	done    chan struct{}
	err     error
	stops   atomic.Int32
}

func newFake() *fakeRunner {
	return &fakeRunner{cfg: config.Default(), done: make(chan struct{})}
}

func (f *fakeRunner) Reload(cfg config.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloads++
	if err := checkReload(f.cfg, cfg); err != nil {
		return err
	}
	f.cfg.Policy = cfg.Policy
	return restartNeeded(f.cfg, cfg, "policy")
}

func (f *fakeRunner) policy() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.cfg.Policy.Mode)
}

func (f *fakeRunner) Alive() bool           { return f.alive.Load() }
func (f *fakeRunner) Done() <-chan struct{} { return f.done }
func (f *fakeRunner) Err() error            { return f.err }
func (f *fakeRunner) Status() any           { return map[string]string{"mode": f.policy()} }
func (f *fakeRunner) Summary() string       { return "faking" }
func (f *fakeRunner) Collector() prometheus.Collector {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "x", Help: "x"})
}
func (f *fakeRunner) Stop() error { f.stops.Add(1); return nil }

type notes struct {
	mu sync.Mutex
	s  []string
}

func (n *notes) add(s string) { n.mu.Lock(); n.s = append(n.s, s); n.mu.Unlock() }
func (n *notes) count(prefix string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, s := range n.s {
		if strings.HasPrefix(s, prefix) {
			c++
		}
	}
	return c
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for " + what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type serveRig struct {
	f      *fakeRunner
	sigs   chan os.Signal
	cfg    string
	sock   string
	log    *harness.Buffer
	notes  *notes
	cancel context.CancelFunc
	errc   chan error
}

func startServe(t *testing.T, watchdog time.Duration) *serveRig {
	t.Helper()
	dir := t.TempDir()
	r := &serveRig{f: newFake(), sigs: make(chan os.Signal, 1), cfg: filepath.Join(dir, "kbridge.yaml"),
		sock: filepath.Join(dir, "kbridge.sock"), notes: &notes{}, errc: make(chan error, 1)}
	r.write(t, "policy:\n  mode: adaptive\n")
	log, buf := bufLogger()
	r.log = buf
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(cancel)
	go func() {
		r.errc <- Serve(ctx, r.f, Options{ConfigPath: r.cfg, Socket: r.sock, Log: log,
			Notify: r.notes.add, Watchdog: watchdog, Signals: r.sigs})
	}()
	eventually(t, "READY=1", func() bool { return r.notes.count("READY=1") == 1 })
	return r
}

func (r *serveRig) write(t *testing.T, yaml string) {
	t.Helper()
	tmp := r.cfg + ".new"
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, r.cfg); err != nil {
		t.Fatal(err)
	}
}

func (r *serveRig) stop(t *testing.T) error {
	t.Helper()
	r.sigs <- syscall.SIGTERM
	select {
	case err := <-r.errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after SIGTERM")
		return nil
	}
}

func TestServeReloadsOnSIGHUPAndFileChanges(t *testing.T) {
	r := startServe(t, 0)
	if !ControlAnswers(r.sock) {
		t.Fatal("no control socket")
	}
	raw, err := ReadStatusRaw(r.sock)
	if err != nil || !strings.Contains(string(raw), `"adaptive"`) {
		t.Fatalf("status %s, %v", raw, err)
	}

	// A file change alone.
	r.write(t, "policy:\n  mode: busy\n")
	eventually(t, "the file change to apply", func() bool { return r.f.policy() == "busy" })

	// SIGHUP; a key that cannot change live is named, the policy applies.
	r.write(t, "policy:\n  mode: interrupt\ninterface:\n  mtu: 9000\n")
	r.sigs <- syscall.SIGHUP
	eventually(t, "SIGHUP to apply", func() bool { return r.f.policy() == "interrupt" })
	eventually(t, "the restart warning", func() bool {
		return strings.Contains(r.log.String(), "need_restart=interface.mtu")
	})

	// An invalid file is refused and changes nothing.
	r.write(t, "policy:\n  mode: totally-invalid\n")
	r.sigs <- syscall.SIGHUP
	eventually(t, "the refusal", func() bool { return strings.Contains(r.log.String(), "reload refused") })
	if r.f.policy() != "interrupt" {
		t.Errorf("an invalid file changed the policy to %s", r.f.policy())
	}

	if err := r.stop(t); err != nil {
		t.Errorf("Serve after SIGTERM = %v, want nil", err)
	}
	if r.f.stops.Load() != 1 {
		t.Errorf("Stop called %d times", r.f.stops.Load())
	}
	if ControlAnswers(r.sock) {
		t.Error("the control socket outlived Serve")
	}
	if r.notes.count("STOPPING=1") != 1 {
		t.Error("no STOPPING=1")
	}
}

func TestServePingsTheWatchdogOnlyWhileAlive(t *testing.T) {
	r := startServe(t, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	if n := r.notes.count("WATCHDOG=1"); n != 0 {
		t.Fatalf("%d watchdog pings while not alive", n)
	}
	r.f.alive.Store(true)
	eventually(t, "watchdog pings", func() bool { return r.notes.count("WATCHDOG=1") >= 3 })
	r.f.alive.Store(false)
	time.Sleep(30 * time.Millisecond)
	n := r.notes.count("WATCHDOG=1")
	time.Sleep(100 * time.Millisecond)
	if m := r.notes.count("WATCHDOG=1"); m != n {
		t.Errorf("%d pings after Alive turned false", m-n)
	}
	_ = r.stop(t)
}

func TestServeReturnsWhyThePathStopped(t *testing.T) {
	r := startServe(t, 0)
	r.f.err = fmt.Errorf("the DPDK app (pid 4242) %w", ErrAppExited)
	close(r.f.done)
	select {
	case err := <-r.errc:
		if !errors.Is(err, ErrAppExited) || !strings.Contains(err.Error(), "pid 4242") {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return when the path stopped")
	}
	if r.f.stops.Load() != 1 {
		t.Errorf("Stop called %d times", r.f.stops.Load())
	}
}

func TestServeRefusesASecondDaemonAndStopsItsRunner(t *testing.T) {
	r := startServe(t, 0)
	f := newFake()
	err := Serve(context.Background(), f, Options{Socket: r.sock, Log: quiet(), Notify: func(string) {}})
	if !errors.Is(err, ErrServing) {
		t.Errorf("second Serve = %v", err)
	}
	if f.stops.Load() != 1 {
		t.Error("the refused runner was not stopped")
	}
	_ = r.stop(t)
}

// Whoever waits for READY=1 (systemd) or for /status (the tests, an
// orchestrator) finds the metrics served: they listen before either.
func TestServeListensForMetricsBeforeItSaysReady(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // no other P to run a late listener on
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	dir := t.TempDir()
	ready := make(chan error, 1)
	notify := func(s string) {
		if strings.HasPrefix(s, "READY=1") {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			ready <- err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, newFake(), Options{Socket: filepath.Join(dir, "kbridge.sock"), Metrics: addr,
			Log: quiet(), Notify: notify, Signals: make(chan os.Signal)})
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Errorf("metrics not served when READY=1 was sent: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no READY=1")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Serve = %v", err)
	}
}

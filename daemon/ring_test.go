package daemon

import (
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/bridge/bridgetest"
	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/policy"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testRing is a Ring over bridgetest's fakes: real workers, no DPDK, no
// TAP. With run false the workers are built but never run.
func testRing(t *testing.T, queues int, run bool) *Ring {
	t.Helper()
	cfg := config.Default()
	d := &Ring{tapPath: &tapPath{crew: newCrew(quiet()), cfg: cfg}, stopApp: func() {}}
	for q := 0; q < queues; q++ {
		k, err := bridgetest.NewKernel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Close)
		out := bridgetest.NewOut(32, 4)
		w, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: cfg.Policy},
			bridgetest.App(out, bridgetest.NewIn(32, 1600), &bridgetest.Waker{Out: out}), k)
		if err != nil {
			t.Fatal(err)
		}
		d.workers = append(d.workers, w)
		if run {
			d.run(w)
		}
	}
	d.beats = make([]uint64, queues)
	if run {
		go d.waitWorkers()
		t.Cleanup(func() { _ = d.Stop() })
	}
	return d
}

func TestRingReloadAppliesPolicyLive(t *testing.T) {
	d := testRing(t, 2, true)
	cfg := d.Config()
	cfg.Policy.Mode = policy.Busy
	if err := d.Reload(cfg); err != nil {
		t.Fatalf("reload of policy.* only: %v", err)
	}
	for i, w := range d.Workers() {
		if w.Policy().Mode != policy.Busy {
			t.Errorf("worker %d runs %s, want busy", i, w.Policy().Mode)
		}
	}
	if d.Config().Policy.Mode != policy.Busy {
		t.Errorf("Config().Policy.Mode = %s after reload", d.Config().Policy.Mode)
	}
}

func TestRingReloadNamesWhatNeedsARestartAndAppliesTheRest(t *testing.T) {
	d := testRing(t, 1, false)
	cfg := d.Config()
	cfg.Policy.Mode = policy.Interrupt
	cfg.Interface.MTU = 9000
	cfg.Stats.Metrics = ""
	err := d.Reload(cfg)
	var re *RestartError
	if !errors.As(err, &re) {
		t.Fatalf("Reload = %v, want a *RestartError", err)
	}
	if !slices.Equal(re.Keys, []string{"interface.mtu", "stats.metrics"}) {
		t.Errorf("keys needing a restart: %v", re.Keys)
	}
	if !strings.Contains(err.Error(), "interface.mtu") || !strings.Contains(err.Error(), "need a restart") {
		t.Errorf("message: %v", err)
	}
	if got := d.Workers()[0].Policy().Mode; got != policy.Interrupt {
		t.Errorf("the live part was not applied: worker runs %s", got)
	}
	if d.Config().Interface.MTU != 1500 {
		t.Errorf("the configuration in force took the MTU that was not applied")
	}
}

func TestRingReloadOfAnInvalidConfigChangesNothing(t *testing.T) {
	d := testRing(t, 1, false)
	for name, mutate := range map[string]func(*config.Config){
		"invalid policy": func(c *config.Config) { c.Policy.Mode = "totally-invalid" },
		"mode change":    func(c *config.Config) { c.Mode = config.ModeXDP; c.XDP.NIC = "eth1"; c.Policy.Mode = policy.Busy },
		"invalid other":  func(c *config.Config) { c.Policy.Mode = policy.Busy; c.Workers.Batch = 0 },
	} {
		cfg := d.Config()
		mutate(&cfg)
		err := d.Reload(cfg)
		if !IsConfigError(err) {
			t.Errorf("%s: Reload = %v, want a ConfigError", name, err)
		}
		if got := d.Workers()[0].Policy().Mode; got != policy.Adaptive {
			t.Errorf("%s: the worker switched to %s", name, got)
		}
	}
}

func TestChangedKeys(t *testing.T) {
	a := config.Default()
	b := a
	b.Interface.Addresses = []string{"198.18.0.2/24"}
	b.Policy.Backoff.Max = time.Millisecond
	b.Interface.TxQueue = 10
	want := []string{"interface.addresses", "interface.txqueuelen", "policy.backoff.max"}
	if got := ChangedKeys(a, b); !slices.Equal(got, want) {
		t.Errorf("ChangedKeys = %v, want %v", got, want)
	}
	if got := ChangedKeys(a, a); len(got) != 0 {
		t.Errorf("ChangedKeys of equal configs = %v", got)
	}
}

func TestRingAlivePokesParkedWorkersAndSeesStoppedOnes(t *testing.T) {
	d := testRing(t, 2, true)
	d.Alive() // the first call only records the beats
	for i := 0; i < 3; i++ {
		// adaptive mode parks after spinning: every worker must answer the poke of the
		// previous call by the next. The calls are spaced as a watchdog's are, not
		// back to back: a call pokes only the workers that did not beat since the one
		// before, so with calls 10 ms apart on a loaded machine two workers that each
		// wake late took turns being the one behind until the deadline.
		deadline := time.Now().Add(10 * time.Second)
		for !d.Alive() {
			if time.Now().After(deadline) {
				t.Fatal("running workers never reported alive")
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if d.Alive() {
		t.Error("Alive after Stop")
	}
	if d.Err() != nil {
		t.Errorf("Err after a requested Stop = %v, want nil", d.Err())
	}
}

func TestRingNotRunningIsNotAlive(t *testing.T) {
	d := testRing(t, 1, false)
	d.Alive()
	if d.Alive() {
		t.Error("a worker whose loop never ran reported alive")
	}
}

func TestAppNameNeverSaysPidZero(t *testing.T) {
	for _, pid := range []int{0, -1} {
		if s := appName(pid); strings.Contains(s, "pid 0") || !strings.Contains(s, "pid unknown") {
			t.Errorf("appName(%d) = %q", pid, s)
		}
	}
	if s := appName(42); s != "the DPDK app (pid 42)" {
		t.Errorf("appName(42) = %q", s)
	}
	if _, _, err := watchPID(0); err == nil {
		t.Error("watchPID(0) watched something")
	}
}

func TestWatchPID(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep(1):", err)
	}
	gone, stop, err := watchPID(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		t.Skip("pidfd_open not available:", err)
	}
	defer stop()
	select {
	case <-gone:
		t.Fatal("gone before the process exited")
	case <-time.After(50 * time.Millisecond):
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the exit was not noticed")
	}

	// stop ends a watch whose process still runs.
	cmd = exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	gone, stop, err = watchPID(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	stop()
	select {
	case <-gone:
		t.Fatal("stop reported the process gone")
	case <-time.After(50 * time.Millisecond):
	}
}

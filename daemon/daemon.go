// Package daemon runs kbridge: Start brings up the data path of the
// configured mode as a Runner (runner.go), and Serve (serve.go) runs
// everything around it until a signal, a fault or the path's own end: the
// control socket, the metrics, reloads on SIGHUP and file changes, systemd's
// READY/STATUS/WATCHDOG notifications and the stop. daemon.go has Ring, the
// ring mode (the app's DPDK rings <-> a TAP interface, one bridge.Worker per
// queue, the app watched through a pidfd), and xdp.go has XDP, the XDP
// redirect mode. control.go has the control socket (ListenControl: mode
// 0600, root or the daemon's user only, a live or foreign path refused;
// ReadStatus for `kbridge stats`), status.go what it serves, and metrics.go
// the Prometheus collector and ServeMetrics, which retries a busy address
// instead of failing. Reload errors are a *ConfigError (nothing changed) or a
// *RestartError (live keys applied, the named ones need a restart). See
// docs/ARCHITECTURE.md, "The lifecycle" and "Faults".
package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap"
)

// Ring is the running ring path: the app's DPDK rings <-> the TAP
// interface, one worker per queue. It is a Runner.
type Ring struct {
	crew
	cfg      config.Config // cfg.Policy is the policy in force; guarded by mu
	port     *ring.Port
	dev      *tap.Device
	stopApp  func() // ends the app watch
	stopKeep func() // ends the interface's keeper (kernel.go)
	stopOnce sync.Once
	stopErr  error
}

var _ Runner = (*Ring)(nil)

// StartRing joins the DPDK primary, opens the port, creates the TAP
// interface, starts the workers and watches the app's process. On error
// nothing is left behind but the EAL, which cannot be left.
func StartRing(cfg config.Config, log *slog.Logger, progress func(string)) (*Ring, error) {
	progress("joining the DPDK primary (file prefix " + cfg.DPDK.FilePrefix + ")")
	deadline := time.Now().Add(cfg.DPDK.Wait)
	if err := waitFor(deadline, log, progress, "the DPDK primary with --file-prefix="+cfg.DPDK.FilePrefix,
		func() error { return ring.PrimaryAlive(cfg.DPDK.RuntimeDir, cfg.DPDK.FilePrefix) }); err != nil {
		return nil, err
	}
	// Before EAL: a secondary of another DPDK fails inside rte_eal_init
	// with a line of EAL's log; this says which versions and what to do.
	if err := ring.CheckPrimaryVersion(cfg.DPDK.RuntimeDir, cfg.DPDK.FilePrefix); err != nil {
		return nil, err
	}
	if err := ring.InitSecondary(ring.EALConfig{
		FilePrefix:  cfg.DPDK.FilePrefix,
		RuntimeDir:  cfg.DPDK.RuntimeDir,
		CPU:         cfg.WorkerCPU(0),
		ControlCPUs: cfg.WorkerCPUs(),
		Args:        cfg.DPDK.EALArgs,
	}); err != nil {
		return nil, err
	}
	var port *ring.Port
	if err := waitFor(deadline, log, progress, "kbridge port "+cfg.Port+" in the DPDK app", func() (err error) {
		port, err = ring.OpenPort(cfg.Port)
		return err
	}); err != nil {
		return nil, err
	}
	if err := claimPort(port, log); err != nil {
		return nil, err
	}
	mtu := cfg.Interface.MTU
	if frame, room := tap.FrameLen(mtu), port.DataRoom()*cfg.Workers.MaxSegments; frame > room {
		port.Release()
		return nil, &ConfigError{conferr.Errorf("interface.mtu", mtu, "frames of that size need %d bytes, but %d segments of the app's %d-byte mbufs hold %d (raise workers.max_segments)",
			frame, cfg.Workers.MaxSegments, port.DataRoom(), room)}
	}
	dev, err := tap.Create(cfg.Interface, tap.Options{
		Queues: port.NumQueues(), Batch: cfg.Workers.Batch, MaxSegs: cfg.Workers.MaxSegments, Log: log,
	})
	if err != nil {
		port.Release()
		return nil, err
	}
	d := &Ring{crew: newCrew(log), cfg: cfg, port: port, dev: dev, stopApp: func() {}, stopKeep: func() {}}
	d.watchClosing()
	for q := 0; q < port.NumQueues() && err == nil; q++ {
		var w *bridge.Worker
		if w, err = d.newWorker(q); err != nil {
			break
		}
		d.workers = append(d.workers, w)
		d.run(w)
	}
	go d.waitWorkers()
	if err != nil {
		return nil, errors.Join(err, d.Stop())
	}
	d.beats = make([]uint64, len(d.workers))
	d.watchApp()
	d.keepInterface()
	log.Info("bridge running", "port", cfg.Port, "interface", cfg.Interface.Name,
		"queues", port.NumQueues(), "app_pid", port.AppPID(), "app_dpdk", port.AppDPDK(), "mode", cfg.Policy.Mode,
		"wakeups", d.workers[0].CanKick(), "offload", cfg.Interface.Offload, "coalescing", dev.Queue(0).Merging())
	return d, nil
}

// waitFor retries try until it succeeds or the deadline passes, saying what
// it waits for at once and every few seconds. The last error is returned.
func waitFor(deadline time.Time, log *slog.Logger, progress func(string), what string, try func() error) error {
	err := try()
	if err == nil || !time.Now().Before(deadline) {
		return err
	}
	msg := "waiting for " + what
	log.Info(msg, "until", deadline.Format(time.TimeOnly), "cause", err)
	progress(msg)
	next := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if err = try(); err == nil {
			return nil
		}
		if time.Now().After(next) {
			log.Info("still "+msg, "cause", err)
			next = time.Now().Add(5 * time.Second)
		}
	}
	return fmt.Errorf("gave up after dpdk.wait: %w", err)
}

func (d *Ring) newWorker(q int) (*bridge.Worker, error) {
	queue, err := d.port.Queue(q)
	if err != nil {
		return nil, err
	}
	out, err := queue.Out(d.cfg.Workers.Batch, d.cfg.Workers.MaxSegments)
	if err != nil {
		return nil, err
	}
	in, err := queue.In(d.cfg.Workers.Batch, tap.FrameLen(d.cfg.Interface.MTU))
	if err != nil {
		out.Close()
		return nil, err
	}
	w, err := bridge.NewWorker(bridge.WorkerConfig{
		CPU:    d.cfg.WorkerCPU(q),
		Policy: d.cfg.Policy,
	}, out, in, queue, d.dev.Queue(q))
	if err != nil {
		out.Close()
		in.Close()
		return nil, err
	}
	return w, nil
}

// run runs w on its own goroutine.

// finish closes Done once, with err as the reason.

// watchApp ends the path when the DPDK app's process exits.
func (d *Ring) watchApp() {
	pid := d.port.AppPID()
	app := appName(pid)
	if pid <= 0 {
		d.log.Warn("the port does not say the DPDK app's pid: kbridge cannot notice the app exiting", "app_pid", pid)
		return
	}
	gone, stop, err := watchPID(pid)
	if errors.Is(err, unix.ESRCH) {
		d.finish(fmt.Errorf("%s exited: kbridge stops with it", app))
		return
	}
	if err != nil {
		d.log.Warn("not watching the DPDK app", "app", app, "err", err)
		return
	}
	d.stopApp = stop
	go func() {
		select {
		case <-gone:
			d.finish(fmt.Errorf("%s exited: kbridge stops with it", app))
		case <-d.done:
		}
	}()
}

// appName names the DPDK app by its pid, or says the pid is unknown.
func appName(pid int) string {
	if pid <= 0 {
		return "the DPDK app (pid unknown)"
	}
	return fmt.Sprintf("the DPDK app (pid %d)", pid)
}

// Done is closed when the path stops by itself (every worker returned, or
// the app exited; Err says which) and once Stop has stopped it.
func (d *Ring) Done() <-chan struct{} { return d.done }

// Reload applies cfg's policy.* to the running workers, between bursts.
// An invalid cfg, or one of another mode, changes nothing and returns a
// *ConfigError. Otherwise the policy is applied; if keys that cannot change
// live differ too, a *RestartError lists them.
func (d *Ring) Reload(cfg config.Config) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := checkReload(d.cfg, cfg); err != nil {
		return err
	}
	if err := d.reloadPolicy(&d.cfg.Policy, cfg.Policy); err != nil {
		return err
	}
	if on := cfg.Interface.Offload; on != d.cfg.Interface.Offload {
		if err := d.dev.SetOffload(on); err != nil {
			return err
		}
		d.cfg.Interface.Offload = on
		d.log.Info("interface offloads switched", "offload", on)
	}
	return restartNeeded(d.cfg, cfg, "policy", "interface.offload")
}

// Summary is the one-line STATUS= for systemd.
func (d *Ring) Summary() string {
	return "bridging " + d.cfg.Port + " <-> " + d.cfg.Interface.Name
}

// Collector exports the counters to Prometheus.
func (d *Ring) Collector() prometheus.Collector { return newCollector(d) }

// Port returns the exception port.
func (d *Ring) Port() *ring.Port { return d.port }

// Workers returns the workers, one per queue.
func (d *Ring) Workers() []*bridge.Worker { return d.workers }

// Config returns the configuration in force, with the live policy.
func (d *Ring) Config() config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Stop stops the workers, which free every mbuf they hold, then removes the
// TAP interface. It returns what the workers failed with too. It may be
// called more than once.
func (d *Ring) Stop() error {
	d.stopOnce.Do(func() {
		d.stopping.Store(true)
		d.stopApp()
		if d.stopKeep != nil {
			d.stopKeep() // before the queues close: a repair dup3s onto their fds
		}
		for _, w := range d.workers {
			w.Stop()
		}
		<-d.workersDone
		d.finish(nil)
		var errs []error
		if d.dev != nil {
			errs = append(errs, d.dev.Close())
		}
		d.mu.Lock()
		errs = append(errs, d.errs...)
		d.mu.Unlock()
		d.stopErr = errors.Join(errs...)
		if d.port != nil {
			d.log.Info("stopped", "pool_in_use", d.port.PoolInUse(), "queues", len(d.workers))
			d.port.Release()
		}
	})
	return d.stopErr
}

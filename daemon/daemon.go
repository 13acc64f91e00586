// Package daemon runs kbridge: Start brings up the data path of the
// configured mode as a Runner, and Serve runs everything around it until a
// signal, a fault or the path's own end: the control socket (mode 0600, root
// or the daemon's user only, a live or foreign path refused), the metrics,
// reloads on SIGHUP and file changes, systemd's READY/STATUS/WATCHDOG
// notifications and the stop. Ring (the app's DPDK rings) and Vhost (a
// vhost-user backend for the app's virtio-user port) share one TAP path: the
// interface, one bridge.Worker per queue, the interface's keeper, the live
// interface.offload switch, the stop order and the status base; each adds
// only its app sides, its watchers and its status extras. XDP is the XDP
// redirect mode. Reload errors are a *ConfigError (nothing changed) or a
// *RestartError (live keys applied, the named ones need a restart). See
// docs/ARCHITECTURE.md, "The lifecycle" and "Faults".
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap"
)

// Ring is the running ring path: the app's DPDK rings <-> the TAP
// interface, one worker per queue (tapPath). It is a Runner.
type Ring struct {
	*tapPath
	port     *ring.Port
	stopApp  func()   // ends the app watch
	recovery Recovery // what claimPort found of a predecessor
}

var _ Runner = (*Ring)(nil)

// StartRing joins the DPDK primary, opens the port, creates the TAP
// interface, starts the workers and watches the app's process. On error
// nothing is left behind but the EAL, which cannot be left.
func StartRing(cfg config.Config, log *slog.Logger, progress func(string)) (*Ring, error) {
	return startRing(context.Background(), cfg, log, progress)
}

func startRing(ctx context.Context, cfg config.Config, log *slog.Logger, progress func(string)) (*Ring, error) {
	progress("joining the DPDK primary (file prefix " + cfg.DPDK.FilePrefix + ")")
	deadline := time.Now().Add(cfg.DPDK.Wait)
	if err := waitFor(ctx, deadline, log, progress, "the DPDK primary with --file-prefix="+cfg.DPDK.FilePrefix,
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
	if err := cancelled(ctx); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, deadline, log, progress, "kbridge port "+cfg.Port+" in the DPDK app", func() (err error) {
		port, err = ring.OpenPort(cfg.Port)
		return err
	}); err != nil {
		return nil, err
	}
	if err := cancelled(ctx); err != nil {
		return nil, err
	}
	recovery, err := claimPort(port, log)
	if err != nil {
		return nil, err
	}
	mtu := cfg.Interface.MTU
	if frame, room := tap.FrameLen(mtu), port.DataRoom()*cfg.Workers.MaxSegments; frame > room {
		port.Release()
		return nil, &ConfigError{conferr.Errorf("interface.mtu", mtu, "frames of that size need %d bytes, but %d segments of the app's %d-byte mbufs hold %d (raise workers.max_segments)",
			frame, cfg.Workers.MaxSegments, port.DataRoom(), room)}
	}
	p, err := newTapPath(cfg, port.NumQueues(), log)
	if err != nil {
		port.Release()
		return nil, err
	}
	d := &Ring{tapPath: p, port: port, stopApp: func() {}, recovery: recovery}
	d.watchClosing()
	if err := d.startWorkers(d.appSide); err != nil {
		return nil, errors.Join(err, d.Stop())
	}
	d.watchApp()
	d.keepInterface()
	log.Info("bridge running", "port", cfg.Port, "interface", cfg.Interface.Name,
		"queues", port.NumQueues(), "app_pid", port.AppPID(), "app_dpdk", port.AppDPDK(), "mode", cfg.Policy.Mode,
		"wakeups", d.workers[0].CanKick(), "offload", cfg.Interface.Offload, "coalescing", p.dev.Queue(0).Merging())
	return d, nil
}

// waitFor retries try until it succeeds or the deadline passes, saying what
// it waits for at once and every few seconds. The last error is returned.
// It gives up at once when ctx ends.
func waitFor(ctx context.Context, deadline time.Time, log *slog.Logger, progress func(string), what string, try func() error) error {
	err := try()
	if err == nil || !time.Now().Before(deadline) {
		return err
	}
	msg := "waiting for " + what
	log.Info(msg, "until", deadline.Format(time.TimeOnly), "cause", err)
	progress(msg)
	next := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return cancelled(ctx)
		case <-time.After(100 * time.Millisecond):
		}
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

// cancelled returns ErrStartCancelled, with the cause, once ctx ended.
func cancelled(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrStartCancelled, context.Cause(ctx))
}

// appSide is queue q's app side: the port's rings.
func (d *Ring) appSide(q int) (appSide, error) {
	queue, err := d.port.Queue(q)
	if err != nil {
		return appSide{}, err
	}
	out, err := queue.Out(d.cfg.Workers.Batch, d.cfg.Workers.MaxSegments)
	if err != nil {
		return appSide{}, err
	}
	in, err := queue.In(d.cfg.Workers.Batch, tap.FrameLen(d.cfg.Interface.MTU))
	if err != nil {
		out.Close()
		return appSide{}, err
	}
	return appSide{out: out, in: in, waker: queue}, nil
}

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

// Summary is the one-line STATUS= for systemd.
func (d *Ring) Summary() string {
	return "bridging " + d.cfg.Port + " <-> " + d.cfg.Interface.Name
}

// Collector exports the counters to Prometheus.
func (d *Ring) Collector() prometheus.Collector { return newCollector(d) }

// Port returns the exception port.
func (d *Ring) Port() *ring.Port { return d.port }

// Stop stops the app watch, then the path (tapPath.stop: the keeper, the
// workers, which free every mbuf they hold, the TAP interface), then
// releases the port. It returns what the workers failed with too. It may be
// called more than once.
func (d *Ring) Stop() error {
	return d.stop(func() error { d.stopApp(); return nil }, func() {
		if d.port != nil {
			d.log.Info("stopped", "pool_in_use", d.port.PoolInUse(), "queues", len(d.workers))
			d.port.Release()
		}
	})
}

// Package daemon assembles a running kbridge from its configuration: it joins
// the app's DPDK instance, opens the exception port, creates the TAP
// interface, runs one bridge.Worker per queue and serves the control socket.
package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap"
)

// Daemon is a running bridge.
type Daemon struct {
	cfg     config.Config
	port    *ring.Port
	dev     *tap.Device
	workers []*bridge.Worker
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
	done    chan struct{}
	log     *slog.Logger
}

// Start joins the DPDK primary, opens the port, creates the TAP interface and
// starts the workers. On error nothing is left behind but the EAL, which
// cannot be left.
func Start(cfg config.Config, log *slog.Logger, progress func(string)) (*Daemon, error) {
	deadline := time.Now().Add(cfg.DPDK.Wait)
	if err := waitFor(deadline, log, progress, "the DPDK primary with --file-prefix="+cfg.DPDK.FilePrefix,
		func() error { return ring.PrimaryAlive(cfg.DPDK.RuntimeDir, cfg.DPDK.FilePrefix) }); err != nil {
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
	mtu := cfg.Interface.MTU
	if frame, room := tap.FrameLen(mtu), port.DataRoom()*cfg.Workers.MaxSegments; frame > room {
		return nil, fmt.Errorf("interface.mtu: %d: frames of that size need %d bytes, but %d segments of the app's %d-byte mbufs hold %d (raise workers.max_segments)",
			mtu, frame, cfg.Workers.MaxSegments, port.DataRoom(), room)
	}
	dev, err := tap.Create(cfg.Interface, tap.Options{
		Queues: port.NumQueues(), Batch: cfg.Workers.Batch, MaxSegs: cfg.Workers.MaxSegments, Log: log,
	})
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, port: port, dev: dev, done: make(chan struct{}), log: log}
	for q := 0; q < port.NumQueues() && err == nil; q++ {
		var w *bridge.Worker
		if w, err = d.newWorker(q); err != nil {
			break
		}
		d.workers = append(d.workers, w)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if err := w.Run(); err != nil {
				d.fail(err)
			}
		}()
	}
	go func() {
		d.wg.Wait()
		close(d.done)
	}()
	if err != nil {
		return nil, errors.Join(err, d.Stop())
	}
	log.Info("bridge running", "port", cfg.Port, "interface", cfg.Interface.Name,
		"queues", port.NumQueues(), "app_pid", port.AppPID(), "mode", cfg.Policy.Mode,
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

func (d *Daemon) newWorker(q int) (*bridge.Worker, error) {
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

func (d *Daemon) fail(err error) {
	d.mu.Lock()
	d.errs = append(d.errs, err)
	d.mu.Unlock()
	d.log.Error("worker stopped", "err", err)
}

// Done is closed when every worker has returned.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Port returns the exception port.
func (d *Daemon) Port() *ring.Port { return d.port }

// Workers returns the workers, one per queue.
func (d *Daemon) Workers() []*bridge.Worker { return d.workers }

// Config returns the configuration in force.
func (d *Daemon) Config() config.Config { return d.cfg }

// Stop stops the workers, which free every mbuf they hold, then removes the
// TAP interface.
func (d *Daemon) Stop() error {
	for _, w := range d.workers {
		w.Stop()
	}
	<-d.done
	var errs []error
	if d.dev != nil {
		errs = append(errs, d.dev.Close())
	}
	d.mu.Lock()
	errs = append(errs, d.errs...)
	d.mu.Unlock()
	return errors.Join(errs...)
}

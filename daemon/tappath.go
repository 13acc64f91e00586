package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/tap"
)

// tapPath is what every mode with a TAP interface runs, written once: the
// TAP device, one worker per queue between it and the app's side, the
// interface's keeper, the live interface.offload switch, the stop order and
// the status base. Ring and Vhost embed it and supply only their per-queue
// app sides, their watchers and their status extras.
type tapPath struct {
	crew
	cfg      config.Config // cfg.Policy, cfg.Interface.Offload: what is in force; guarded by mu
	dev      *tap.Device
	stopKeep func() // ends the interface's keeper
	// asks and ask hand the interface's changes to the app (ring mode
	// with an app that takes requests); nil: the keeper asks nothing.
	asks     func(tap.ChangeKind) bool
	ask      func(ctx context.Context, c, old tap.Change) error
	stopOnce sync.Once
	stopErr  error
	adopted  *Adopted // the interface adopted, nil when made
	// store is systemd's fd store (fdstore.go); stored: the queues are
	// in it, and a re-made interface's go there again.
	store  fdStore
	stored bool
	// carrierRestored counts the carriers the keeper set back.
	carrierRestored atomic.Uint64
	// sockets keeps the burst core's view of the host's sockets current
	// (sockets.go), the process's one, which sockUser joined; nil until
	// the workers run.
	sockets  *sockWatch
	sockUser *sockUser
	// releaseFirst runs stop's last (a Ring: the port's release) before
	// the interface closes, which takes the kernel tens of milliseconds:
	// a port set lets the app's free go on at once (portset.go).
	releaseFirst bool
	// mtuFromApp: the interface's MTU is what the app asked for, which
	// the keeper need not tell it at start.
	mtuFromApp bool
}

// newTapPath adopts the TAP interface a holds or creates it (makeDevice)
// with queues queues, whose MTU may later be raised live up to maxMTU (the
// app accepting).
func newTapPath(cfg config.Config, queues, maxMTU int, log *slog.Logger, a *adoption) (*tapPath, error) {
	dev, adopted, err := makeDevice(cfg, tap.Options{
		Queues: queues, Batch: cfg.Workers.Batch, MaxSegs: cfg.Workers.MaxSegments, MaxMTU: maxMTU, Log: log,
	}, a, log)
	if err != nil {
		return nil, err
	}
	return &tapPath{crew: newCrew(log), cfg: cfg, dev: dev, stopKeep: func() {}, adopted: adopted}, nil
}

// startWorkers starts one worker per TAP queue, each between queue q and
// the app side app(q) makes. On error the workers already started run on:
// the caller stops the path.
func (p *tapPath) startWorkers(app func(q int) (bridge.App, error)) error {
	var err error
	for q := 0; q < p.dev.NumQueues() && err == nil; q++ {
		var w *bridge.Worker
		if w, err = p.newWorker(q, app); err == nil {
			p.workers = append(p.workers, w)
			p.run(w)
		}
	}
	go p.waitWorkers()
	p.beats = make([]uint64, len(p.workers))
	p.sockUser = &sockUser{cfg: func() copp.Config { return p.Config().CoPP }, ifindex: p.dev.Index, log: p.log}
	p.sockets = joinSockets(p.sockUser)
	return err
}

func (p *tapPath) newWorker(q int, app func(q int) (bridge.App, error)) (*bridge.Worker, error) {
	a, err := app(q)
	if err != nil {
		return nil, err
	}
	w, err := bridge.NewWorker(bridge.WorkerConfig{CPU: p.cfg.WorkerCPU(q), Policy: p.cfg.Policy}, a, p.dev.Queue(q))
	if err == nil && p.cfg.CoPP.Enabled {
		err = w.SetCoPP(p.cfg.CoPP)
	}
	if err != nil {
		a.Close()
		return nil, err
	}
	return w, nil
}

// keepInterface repairs what others do to the TAP interface while the
// bridge runs: the device's Watch reports, the keeper (keeper.go) decides.
// A deleted interface is made again and its new queues take the old fd
// numbers under the running workers, which are then poked so that their
// next park watches the new fds; routes come back after a down/up; a
// changed MTU, admin state, MAC or flag is asked of the app when it takes
// requests, else an MTU is set back. If the interface cannot be made again,
// the path stops with the cause (ErrInterfaceLost) and kbridge exits
// non-zero, so that systemd's Restart=on-failure brings it back.
func (p *tapPath) keepInterface() {
	w, err := p.dev.Watch(p.log)
	if err != nil {
		p.log.Warn("not watching the interface: a deleted interface will not be made again, nor routes re-applied after a down/up", "err", err)
		return
	}
	k := &keeper{
		dev: p.dev, log: p.log.With("interface", p.dev.Name()), takes: p.asks, askApp: p.ask,
		recreated: func() {
			for _, w := range p.workers {
				w.Poke()
			}
			if p.stored { // systemd dropped the old queues (POLLERR)
				p.store.storeQueues(p.dev.Name(), p.dev.Fds(), 0)
			}
		},
		lost: func(err error) {
			p.log.Error("stopping", "err", err)
			p.finish(err)
		},
		carrierRestored: func() { p.carrierRestored.Add(1) },
		mtuAgreed:       p.mtuFromApp,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Close()
		k.run(ctx, w.Events())
	}()
	p.stopKeep = func() {
		cancel() // ends a wait for the app's answer
		w.Close()
		<-done // a repair in progress dup3s onto the queues' fds
	}
}

// Reload applies cfg's policy.* and copp.* to the running workers, between
// bursts, and interface.offload and interface.on_stop to the TAP interface.
// An invalid cfg, or one of another mode, changes nothing and returns a *ConfigError. Otherwise the live keys
// are applied; if keys that cannot change live differ too, a *RestartError
// lists them.
func (p *tapPath) Reload(cfg config.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := checkReload(p.cfg, cfg); err != nil {
		return err
	}
	if err := p.reloadPolicy(&p.cfg.Policy, cfg.Policy); err != nil {
		return err
	}
	if err := p.reloadCoPP(cfg.CoPP); err != nil {
		return err
	}
	if on := cfg.Interface.Offload; on != p.cfg.Interface.Offload {
		if err := p.dev.SetOffload(on); err != nil {
			return err
		}
		p.cfg.Interface.Offload = on
		p.log.Info("interface offloads switched", "offload", on)
	}
	if keep := cfg.Interface.Keep(); keep != p.cfg.Interface.Keep() {
		if err := p.dev.Persist(keep); err != nil {
			return err
		}
		p.log.Info("what a stop does to the interface switched", "on_stop", cfg.Interface.OnStop)
	}
	p.cfg.Interface.OnStop = cfg.Interface.OnStop
	return restartNeeded(p.cfg, cfg, "policy", "interface.offload", "interface.on_stop", "copp")
}

// reloadCoPP puts c in force on every worker at its next burst when it
// differs from the copp section in force. The caller holds mu.
func (p *tapPath) reloadCoPP(c copp.Config) error {
	if reflect.DeepEqual(c, p.cfg.CoPP) {
		return nil
	}
	for _, w := range p.workers {
		if err := w.SetCoPP(c); err != nil {
			return &ConfigError{err}
		}
	}
	p.cfg.CoPP = c
	p.log.Info("control-plane protection switched", "enabled", c.Enabled)
	return nil
}

// Config returns the configuration in force, with the live keys.
func (p *tapPath) Config() config.Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// Workers returns the workers, one per queue.
func (p *tapPath) Workers() []*bridge.Worker { return p.workers }

// Device returns the TAP interface.
func (p *tapPath) Device() *tap.Device { return p.dev }

// status is the Status every mode shares: the interface and each queue's
// worker counters. extra adds a mode's own to queue q.
func (p *tapPath) status(cfg config.Config, extra func(q int, qs *Queue)) Status {
	s := Status{Interface: cfg.Interface.Name, Carrier: p.dev.Carrier(), CarrierRestored: p.carrierRestored.Load(), Adopted: p.adoptedNow()}
	if p.sockets != nil && cfg.CoPP.Enabled {
		st := p.sockets.Status()
		s.Sockets = &st
	}
	for q, w := range p.workers {
		snap := w.Counters().Snapshot()
		snap.Queue = q
		snap.Mode = string(w.Policy().Mode)
		qs := Queue{Snapshot: snap, CanKick: w.CanKick(), CPU: cfg.WorkerCPU(q)}
		if cs := new(copp.Snapshot); cfg.CoPP.Enabled && w.CoPP(cs) {
			qs.CoPP = cs
		}
		if extra != nil {
			extra(q, &qs)
		}
		s.Queues = append(s.Queues, qs)
	}
	return s
}

// stop stops the path in the one order every mode needs: first the mode's
// watchers (first; their errors are returned), then the keeper (before the
// queues close: a repair dup3s onto their fds), then the workers, which
// free every mbuf they hold, then the TAP interface; last runs after. It
// returns what the workers failed with too, and runs once.
func (p *tapPath) stop(first func() error, last func()) error {
	p.stopOnce.Do(func() { p.halt(first, last, true) })
	return p.stopErr
}

// handOff is stop but for the interface, for a successor (handover.go):
// last runs once the workers stopped, and the queue fds are returned open
// with release, which closes them. Once the path is stopping it refuses.
func (p *tapPath) handOff(first func() error, last func()) (fds []int, release func(), err error) {
	ran := false
	p.stopOnce.Do(func() {
		ran = true
		p.halt(first, last, false)
	})
	if !ran {
		return nil, nil, fmt.Errorf("%w: %w", ErrTakeoverRefused, errStopping)
	}
	return p.dev.Fds(), func() { _ = p.dev.Close() }, nil
}

// unstore drops the interface's queues from systemd's fd store, where this
// path stored them: a port set's port that went for good must not keep its
// interface there.
func (p *tapPath) unstore() {
	if !p.stored {
		return
	}
	for q := range p.dev.NumQueues() {
		p.store.remove(queueFdName(p.dev.Name(), q))
	}
}

// halt is stop's body; closeDev false leaves the interface open.
func (p *tapPath) halt(first func() error, last func(), closeDev bool) {
	p.stopping.Store(true)
	var errs []error
	if first != nil {
		errs = append(errs, first())
	}
	if p.stopKeep != nil {
		p.stopKeep()
	}
	if p.sockets != nil {
		leaveSockets(p.sockUser)
	}
	for _, w := range p.workers {
		w.Stop()
	}
	<-p.workersDone
	p.finish(nil)
	if p.releaseFirst && last != nil {
		last()
		last = nil
	}
	if p.dev != nil && closeDev {
		errs = append(errs, p.dev.Close())
	}
	p.mu.Lock()
	errs = append(errs, p.errs...)
	p.mu.Unlock()
	p.stopErr = errors.Join(errs...)
	if last != nil {
		last()
	}
}

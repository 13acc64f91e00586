package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/policy"
)

// crew is the workers of a running path (ring or vhost) and how the path
// ends by itself: it runs them, tells a parked worker from a stuck one for
// the watchdog, switches their policy live, and closes done once, with the
// reason, when a worker fails or all have returned.
type crew struct {
	workers []*bridge.Worker
	wg      sync.WaitGroup
	mu      sync.Mutex // guards errs and beats, and the runner's own state
	errs    []error
	log     *slog.Logger

	workersDone chan struct{} // closed when every worker has returned
	done        chan struct{} // closed when the path stopped by itself or was stopped
	doneOnce    sync.Once
	err         error    // why done closed; set before it closes
	beats       []uint64 // the workers' beats at the last Alive; guarded by mu
	stopping    atomic.Bool
}

func newCrew(log *slog.Logger) crew {
	return crew{log: log, workersDone: make(chan struct{}), done: make(chan struct{})}
}

// run starts w on its own goroutine.
func (c *crew) run(w *bridge.Worker) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := w.Run(); err != nil {
			c.fail(err)
		}
	}()
}

// waitWorkers closes workersDone when every worker has returned, and done
// too, with the reason, unless Stop stopped them.
func (c *crew) waitWorkers() {
	c.wg.Wait()
	close(c.workersDone)
	if !c.stopping.Load() {
		c.mu.Lock()
		err := errors.Join(c.errs...)
		c.mu.Unlock()
		if err == nil {
			err = fmt.Errorf("every %w", ErrWorkerStopped)
		}
		c.finish(err)
	}
}

// fail records why a worker stopped and ends the path at once: a queue
// that no longer moves is not a partial success to keep running (only
// systemd's watchdog would notice it otherwise).
func (c *crew) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
	c.log.Error("worker stopped", "err", err)
	if !c.stopping.Load() {
		c.finish(fmt.Errorf("a %w: %w", ErrWorkerStopped, err))
	}
}

// finish closes done once, with the reason.
func (c *crew) finish(err error) {
	c.doneOnce.Do(func() {
		c.err = err
		close(c.done)
	})
}

// Done is closed when the path stopped by itself, and once Stop ran.
func (c *crew) Done() <-chan struct{} { return c.done }

// Err says why Done closed by itself; nil before, and if Stop closed it.
func (c *crew) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Alive reports whether every worker's loop advanced since the last call.
// A worker that did not is poked, so that a parked one advances before the
// next call; a stuck one does not, and neither does a stopped one.
func (c *crew) Alive() bool {
	select {
	case <-c.done:
		return false
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.beats) != len(c.workers) {
		c.beats = make([]uint64, len(c.workers))
	}
	alive := true
	for i, w := range c.workers {
		b := w.Beats()
		if b == c.beats[i] {
			alive = false
			w.Poke()
		}
		c.beats[i] = b
	}
	return alive
}

// reloadPolicy switches the workers to p when it differs from *cur, the
// policy in force, and records p there. The caller holds mu.
func (c *crew) reloadPolicy(cur *policy.Policy, p policy.Policy) error {
	if p == *cur {
		return nil
	}
	if err := c.setPolicy(*cur, p); err != nil {
		return err
	}
	*cur = p
	return nil
}

// setPolicy switches every worker from old to p, between bursts; if one
// refuses (Validate passed, so it cannot), those that switched go back.
// The caller holds mu.
func (c *crew) setPolicy(old, p policy.Policy) error {
	for _, w := range c.workers {
		if err := w.SetPolicy(p); err != nil {
			for _, w := range c.workers {
				_ = w.SetPolicy(old)
			}
			return &ConfigError{err}
		}
	}
	return nil
}

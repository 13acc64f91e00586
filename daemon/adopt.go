package daemon

import (
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/tap"
)

// Adopted is the interface a kbridge adopted rather than made: `kbridge
// stats` shows it under recovery.
type Adopted struct {
	tap.Adopted
	How  string `json:"how"`  // handed over by pid N, kept in systemd's fd store, left persistent
	Text string `json:"text"` // the whole as one line
}

// adoption is an interface to adopt: queue fds, and where they came from.
// Its fds are the start's until newTapPath takes them.
type adoption struct {
	fds []int
	how string
}

// close closes fds nobody adopted: the kernel removes the interface if
// nothing else holds it.
func (a *adoption) close() {
	if a == nil {
		return
	}
	for _, fd := range a.fds {
		unix.Close(fd)
	}
	a.fds = nil
}

// closeStored closes the fds systemd passed to a mode that adopts none.
func closeStored(fds []ListenFd, log *slog.Logger) {
	for _, f := range fds {
		log.Warn("systemd passed an fd this mode does not adopt: closed", "fdname", f.Name)
		unix.Close(f.Fd)
	}
}

// makeDevice adopts the interface a holds, or one a kbridge with
// interface.on_stop: keep left, or else makes it (tap.Create). An
// interface that cannot be adopted is said loudly and made anew. With
// on_stop: keep, the interface is made persistent.
func makeDevice(cfg config.Config, opt tap.Options, a *adoption, log *slog.Logger) (*tap.Device, *Adopted, error) {
	name := cfg.Interface.Name
	if a == nil || len(a.fds) == 0 {
		fds, err := tap.OpenPersistent(name, opt.Queues)
		switch {
		case err != nil && !errors.Is(err, tap.ErrInUse):
			log.Warn("not adopting the persistent interface left by an earlier kbridge", "interface", name, "err", err)
		case len(fds) > 0:
			a = &adoption{fds: fds, how: "left persistent"}
		}
	}
	var dev *tap.Device
	var adopted *Adopted
	if a != nil && len(a.fds) > 0 {
		fds := a.fds
		a.fds = nil // Adopt's now, adopted or closed
		d, got, err := tap.Adopt(fds, cfg.Interface, opt)
		if err != nil {
			log.Error("not adopting the interface: making it anew (addresses, routes and sockets others bound to it are lost)",
				"interface", name, "how", a.how, "err", err)
		} else {
			dev = d
			adopted = &Adopted{Adopted: got, How: a.how,
				Text: fmt.Sprintf("adopted %s (ifindex %d) from pid %d, %s", name, got.Index, got.From, a.how)}
			log.Warn(adopted.Text, "interface", name, "queues_handed", got.Handed, "queues_opened", got.Opened, "queues_closed", got.Closed)
		}
	}
	if dev == nil {
		var err error
		if dev, err = tap.Create(cfg.Interface, opt); err != nil {
			return nil, nil, err
		}
	}
	if cfg.Interface.Keep() {
		if err := dev.Persist(true); err != nil {
			log.Warn("the interface is not persistent: it goes when kbridge stops", "interface", name, "err", err)
		}
	}
	return dev, adopted, nil
}

// storeFds stores the queue fds in systemd's fd store, where one listens,
// and drops queues from the count on up to had, those a predecessor stored.
func (p *tapPath) storeFds(had int) {
	p.stored = p.store.notify != nil
	p.store.storeQueues(p.dev.Name(), p.dev.Fds(), had)
}

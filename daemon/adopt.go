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
// stats` shows it as "adopted".
type Adopted struct {
	tap.Adopted
	How string `json:"how"` // HowHanded, HowStored, HowPersistent or HowTakenBack
	// Successor is the pid whose takeover was not confirmed (HowTakenBack).
	Successor int `json:"successor_pid,omitempty"`
	// Backlog is the frames the queues held at the adoption (what the
	// kernel sent while no kbridge read them), delivered since; Drained
	// once every queue was read empty.
	Backlog uint64 `json:"backlog_frames"`
	Drained bool   `json:"backlog_drained"`
	Text    string `json:"text"` // the whole as one line (Line)
}

// How an interface came to be adopted (Adopted.How).
const (
	HowHanded     = "handed over"                // by the kbridge before, through the control socket (--takeover)
	HowStored     = "kept in systemd's fd store" // across a restart or a crash of the unit
	HowPersistent = "left persistent"            // by a kbridge with interface.on_stop: keep
	HowTakenBack  = "taken back"                 // by this kbridge, executed again after a takeover not confirmed (TakeBack)
)

// Line says a in one line: where the interface came from and the backlog
// delivered.
func (a Adopted) Line(name string) string {
	from := fmt.Sprintf("from pid %d (%s)", a.From, a.How)
	switch a.How {
	case HowStored:
		from = fmt.Sprintf("from the fd store (last served by pid %d)", a.From)
	case HowPersistent:
		from = fmt.Sprintf("left persistent by pid %d", a.From)
	case HowTakenBack:
		from = fmt.Sprintf("taken back from a takeover pid %d did not confirm", a.Successor)
	}
	backlog := "backlog delivered"
	if !a.Drained {
		backlog += " so far"
	}
	return fmt.Sprintf("adopted %s (ifindex %d) %s; %s: %d frames", name, a.Index, from, backlog, a.Backlog)
}

// adoptedNow is what the path adopted, with the backlog as delivered so
// far; nil when it made its interface.
func (p *tapPath) adoptedNow() *Adopted {
	if p.adopted == nil {
		return nil
	}
	a := *p.adopted
	a.Backlog, a.Drained = p.dev.Backlog()
	a.Text = a.Line(p.dev.Name())
	return &a
}

// adoption is an interface to adopt: queue fds, and where they came from.
// Its fds are the start's until newTapPath takes them.
type adoption struct {
	fds []int
	how string
	// handed is the takeover that handed the fds over (HowHanded), until
	// confirmed: the old kbridge takes back unless confirm reaches it.
	handed *Takeover
	from   int // the pid that handed them over
}

// close closes fds nobody adopted: the kernel removes the interface if
// nothing else holds it; and an unconfirmed takeover, which the kbridge
// that handed over then takes back.
func (a *adoption) close() {
	if a == nil {
		return
	}
	for _, fd := range a.fds {
		unix.Close(fd)
	}
	a.fds = nil
	a.handed.Close()
	a.handed = nil
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
			a = &adoption{fds: fds, how: HowPersistent}
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
			adopted = &Adopted{Adopted: got, How: a.how}
			if a.how == HowTakenBack {
				adopted.Successor = a.from
			}
			log.Warn(fmt.Sprintf("adopted %s (ifindex %d) from pid %d, %s", name, got.Index, got.From, a.how),
				"interface", name, "queues_handed", got.Handed, "queues_opened", got.Opened, "queues_closed", got.Closed)
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

// storedAdoption sorts the fds systemd passed (opts.Stored): the queues
// of interface name to adopt, in queue order; the others (another
// interface.name's, a gap's) are closed and dropped from the store. It
// returns the unit's fd store and how many queues it held.
func storedAdoption(opts StartOpts, name string, log *slog.Logger) (*adoption, fdStore, int) {
	how := HowStored
	if opts.TakenBackFrom != 0 {
		how = HowTakenBack
	}
	stored, others, dropped := storedQueues(opts.Stored, name)
	store := newFdStore(log)
	for _, f := range others {
		log.Warn("systemd passed an fd that is no queue of this interface: closed and dropped from the fd store", "fdname", f.Name)
		unix.Close(f.Fd)
		store.remove(f.Name)
	}
	for _, n := range dropped {
		store.remove(n)
	}
	return &adoption{fds: stored, how: how, from: opts.TakenBackFrom}, store, len(stored)
}

// storeFds stores the queue fds in systemd's fd store, where one listens,
// and drops queues from the count on up to had, those a predecessor stored.
func (p *tapPath) storeFds(had int) {
	p.stored = p.store.notify != nil
	p.store.storeQueues(p.dev.Name(), p.dev.Fds(), had)
}

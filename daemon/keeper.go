package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kbridge/kbridge/tap"
)

// What an administrator (or another tool) can do to the TAP interface
// behind kbridge's back, and what the keeper decides (package tap reports
// it and offers the means):
//
//   - deletes it (ip link del): the queues' fds stay open but dead (read and
//     write fail with EBADFD, epoll reports EPOLLERR). The keeper has it
//     made again (tap.Device.Recreate: the same name, queues, offloads, MTU,
//     MAC, addresses and routes, the new queues' fds dup3'd onto the old
//     ones) and pokes the workers, which keep their fd numbers and go on
//     without a restart. If that fails, the path stops with why
//     (ErrInterfaceLost).
//   - sets it down and up: the kernel drops its routes (and IPv6 addresses)
//     on the way down; on the way up the keeper adds the configured
//     addresses and routes again.
//   - changes its MTU, admin state, MAC, promiscuous or all-multicast
//     flag: when the app takes requests of that kind (ring mode, kbridge.h
//     version 5), the keeper asks it and keeps an accepted change (a new
//     MTU takes effect in the queues from their next burst, up to
//     tap.Device.MaxMTU) or sets a refused or unanswered one back, logging
//     the app's answer. When it does not, an MTU change is set back (the
//     app's buffers and the queues' frame limits are sized for the MTU)
//     and the rest are left as the administrator made them. At start, an
//     app that takes MTU requests is asked for the interface's MTU once, so
//     that a port an earlier kbridge changed agrees again.
//   - turns its carrier (TUNSETCARRIER from a queue of its own, ip link set
//     carrier): the carrier is kbridge's to say (the app's link, mode
//     vhost's frontend), and the keeper sets it back, counted.
//
// What is kept (accepted, or left as the administrator made it) is
// remembered in the device, so that a re-made interface gets it.

// linkDevice is what the keeper needs of the TAP interface: *tap.Device.
type linkDevice interface {
	Name() string
	Index() int
	State() (tap.State, error)
	Set(c tap.Change) error
	Known(k tap.ChangeKind) tap.Change
	Remember(c tap.Change) error
	MTU() int
	MaxMTU() int
	SetMTU(mtu int) error
	Recreate() error
	RestoreRoutes() (addresses, routes int, err error)
	Carrier() bool
	RestoreCarrier() (restored bool, err error)
}

// keeper decides what to do about each of the interface's link events.
type keeper struct {
	dev linkDevice
	log *slog.Logger
	// takes reports whether askApp takes changes of kind k; nil: none.
	takes func(k tap.ChangeKind) bool
	// askApp hands a change made to the interface to the app and returns its
	// answer: nil keeps the change, an error sets it back to old. It may
	// block (the app answers from its control path) until ctx ends, which
	// it does when the keeper stops; the keeper handles the interface's
	// next event after it returns.
	askApp func(ctx context.Context, c, old tap.Change) error
	// recreated is called after a deleted interface was made again and its
	// queues took the old fd numbers: wake the workers so that they watch
	// the new fds.
	recreated func()
	// lost is called once when the interface was deleted and could not be
	// made again; the keeper then stops.
	lost func(error)
	// carrierRestored is called each time the keeper set back a carrier
	// someone else turned; nil: nobody counts.
	carrierRestored func()
	// mtuAgreed: the interface's MTU is the one the app asked for
	// (kbridge_port_set_interface()), which it need not be told.
	mtuAgreed bool
}

// run looks at the interface as it is (events before the watch began were
// missed), tells an app that takes MTU requests the interface's MTU, then
// handles each event until events closes or ctx ends (both: the keeper
// stops), or the interface is lost.
func (k *keeper) run(ctx context.Context, events <-chan tap.Event) {
	if !k.start(ctx) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			k.log.Debug("interface event", "event", ev.String())
			// Whatever the event says, the interface is looked at as it
			// is now: it may have changed again since.
			if !k.sync(ctx) {
				return
			}
		}
	}
}

// start is run's beginning; false: the keeper stops.
func (k *keeper) start(ctx context.Context) bool {
	if k.takes == nil || k.askApp == nil {
		k.takes = func(tap.ChangeKind) bool { return false }
	}
	k.learnFlags()
	if !k.sync(ctx) {
		return false
	}
	if !k.mtuAgreed {
		k.agreeMTU(ctx)
	}
	return true
}

// learnFlags takes the promiscuous and all-multicast flags as the
// interface has them now (kbridge does not configure them) as known.
func (k *keeper) learnFlags() {
	if s, err := k.dev.State(); err == nil {
		k.remember(s.Value(tap.ChangePromisc))
		k.remember(s.Value(tap.ChangeAllmulti))
	}
}

func (k *keeper) remember(c tap.Change) {
	if err := k.dev.Remember(c); err != nil {
		k.log.Error("not remembered", "change", c.Kind.String(), "err", err)
	}
}

// sync looks at the interface as it is now: made again if it is gone, else
// compared with what it is known to be. It returns false when the keeper
// must stop.
func (k *keeper) sync(ctx context.Context) bool {
	s, err := k.dev.State()
	if errors.Is(err, tap.ErrDeleted) {
		if !k.recreate() {
			return false
		}
		// The watch drops updates of the new interface until Recreate
		// gives it the new ifindex: look at it once.
		s, err = k.dev.State()
	}
	switch {
	case err != nil:
		k.log.Warn("cannot read the interface", "err", err)
		return true
	case s.Name != k.dev.Name():
		k.log.Warn("the interface was renamed; kbridge keeps using it", "new_name", s.Name)
	}
	k.check(ctx, s)
	return true
}

// recreate has a deleted interface made again and the workers poked. It
// returns false, having told lost, if it cannot.
func (k *keeper) recreate() bool {
	start := time.Now()
	k.log.Warn("the interface was deleted: making it again")
	if err := k.dev.Recreate(); err != nil {
		k.lost(fmt.Errorf("interface %s was %w: %w", k.dev.Name(), ErrInterfaceLost, err))
		return false
	}
	k.learnFlags()
	k.recreated()
	k.log.Warn("the interface was deleted and made again; the workers use its new queues",
		"ifindex", k.dev.Index(), "took", time.Since(start).Round(time.Microsecond).String())
	return true
}

// check compares the interface as it is with what it is known to be (as
// configured, or as kept since) and handles each difference: asked of the
// app, kept or set back.
func (k *keeper) check(ctx context.Context, s tap.State) {
	k.carrier(s)
	k.admin(ctx, s.Up)
	k.mtu(ctx, s.MTU)
	k.mac(ctx, s)
	k.flag(ctx, s.Value(tap.ChangePromisc))
	k.flag(ctx, s.Value(tap.ChangeAllmulti))
}

// carrier sets back a carrier someone else turned: the kernel's differs
// from what kbridge set last (tap.Device.RestoreCarrier reads both again
// under the device's lock, so a change kbridge makes meanwhile is not
// undone). An interface that is down shows no carrier: left.
func (k *keeper) carrier(s tap.State) {
	if !s.Up || s.Carrier == k.dev.Carrier() {
		return
	}
	restored, err := k.dev.RestoreCarrier()
	switch {
	case err != nil:
		k.log.Error("the interface's carrier was turned outside kbridge and cannot be set back", "carrier", s.Carrier, "err", err)
	case restored:
		k.log.Warn("the interface's carrier was turned outside kbridge: set back (the carrier is the app's link)",
			"was", s.Carrier, "carrier", !s.Carrier)
		if k.carrierRestored != nil {
			k.carrierRestored()
		}
	}
}

// ask hands c to the app and logs its answer. keep: the app applied it.
// Otherwise setBack says whether the interface still shows c: an admin
// may have changed it again while the app was asked, and that is then
// not undone but handled as a change of its own at the next event (the
// interface gone meanwhile: nothing to set back either).
func (k *keeper) ask(ctx context.Context, c, old tap.Change) (keep, setBack bool) {
	start := time.Now()
	err := k.askApp(ctx, c, old)
	took := time.Since(start).Round(time.Microsecond).String()
	if err == nil {
		k.log.Info("the app applied the interface's change", "change", c.Kind.String(), "value", c.Value(), "took", took)
		return true, false
	}
	k.log.Error("the app did not take the interface's change: setting it back",
		"change", c.Kind.String(), "value", c.Value(), "back_to", old.Value(), "answer", err.Error(), "took", took)
	s, serr := k.dev.State()
	return false, serr == nil && s.Value(c.Kind).Value() == c.Value()
}

// agreeMTU tells the app, once at start, the MTU the interface starts
// with. The app's port may still have an MTU an earlier kbridge's
// interface had (a request it accepted), and a port whose MTU differs from
// the interface's drops or cuts the kernel's largest frames, or hands the
// kernel frames kb0 counts as oversize. Refused or unanswered: logged, and
// the interface keeps its MTU, the configured one.
func (k *keeper) agreeMTU(ctx context.Context) {
	if !k.takes(tap.ChangeMTU) {
		return
	}
	c := tap.Change{Kind: tap.ChangeMTU, MTU: k.dev.MTU()}
	start := time.Now()
	err := k.askApp(ctx, c, c)
	took := time.Since(start).Round(time.Microsecond).String()
	if err != nil {
		k.log.Warn("the app's port did not take the interface's MTU at start: the two may disagree until an MTU change both take",
			"mtu", c.MTU, "answer", err.Error(), "took", took)
		return
	}
	k.log.Info("the app's port took the interface's MTU at start", "mtu", c.MTU, "took", took)
}

// admin handles the interface set up or down: asked of the app when it
// takes link requests; addresses and routes again after it came up.
func (k *keeper) admin(ctx context.Context, up bool) {
	was := k.dev.Known(tap.ChangeLink).On
	if up == was {
		return
	}
	now, old := tap.Change{Kind: tap.ChangeLink, On: up}, tap.Change{Kind: tap.ChangeLink, On: was}
	if k.takes(tap.ChangeLink) {
		keep, back := k.ask(ctx, now, old)
		if !keep {
			if !back {
				return
			}
			if err := k.dev.Set(old); err != nil {
				k.log.Error("could not set the interface's admin state back", "up", was, "err", err)
				return
			}
			if !was {
				return
			}
			// Back up: the way down took the routes.
		} else {
			k.remember(now)
		}
	} else {
		k.remember(now)
	}
	if !k.dev.Known(tap.ChangeLink).On {
		return
	}
	if addresses, routes, err := k.dev.RestoreRoutes(); err != nil {
		k.log.Error("the interface is up again, but its addresses and routes could not all be re-applied", "err", err)
	} else {
		k.log.Info("the interface is up again: addresses and routes re-applied", "addresses", addresses, "routes", routes)
	}
}

// mtu handles an MTU change: taken live when the app accepts it and the
// queues can carry it, else the MTU in force set back.
func (k *keeper) mtu(ctx context.Context, mtu int) {
	cur := k.dev.MTU()
	if mtu == cur {
		return
	}
	switch {
	case !k.takes(tap.ChangeMTU):
		k.log.Error("the interface's MTU was changed outside kbridge: setting interface.mtu back "+
			"(the app does not take MTU requests, and its buffers and kbridge's frame limits are sized for it; "+
			"to change the MTU, change interface.mtu and restart kbridge)",
			"mtu", mtu, "interface_mtu", cur)
	case mtu > k.dev.MaxMTU():
		k.log.Error("the interface's MTU was changed beyond what kbridge can carry to the app: setting it back "+
			"(the app's mbufs times workers.max_segments, or the largest MTU the app declared)",
			"mtu", mtu, "max_mtu", k.dev.MaxMTU(), "interface_mtu", cur)
	default:
		keep, back := k.ask(ctx, tap.Change{Kind: tap.ChangeMTU, MTU: mtu}, tap.Change{Kind: tap.ChangeMTU, MTU: cur})
		if keep {
			err := k.dev.SetMTU(mtu)
			if err == nil {
				return
			}
			k.log.Error("the queues cannot take the MTU the app accepted: setting it back", "mtu", mtu, "err", err)
		} else if !back {
			return
		}
	}
	if err := k.dev.Set(tap.Change{Kind: tap.ChangeMTU, MTU: cur}); err != nil {
		k.log.Error("could not set the MTU back", "mtu", cur, "err", err)
	}
}

// mac handles a new hardware address: asked of the app when it takes MAC
// requests (kept, and a re-made interface gets it, or set back); else left.
func (k *keeper) mac(ctx context.Context, s tap.State) {
	old := k.dev.Known(tap.ChangeMAC)
	if len(s.MAC) == 0 || s.MAC.String() == old.MAC.String() || !k.takes(tap.ChangeMAC) {
		return
	}
	k.keepOrSetBack(ctx, s.Value(tap.ChangeMAC), old, "could not set the MAC back", "mac", old.Value())
}

// flag handles a change of the promiscuous or all-multicast flag: asked of
// the app when it takes that request (kept, or set back); else left.
func (k *keeper) flag(ctx context.Context, now tap.Change) {
	old := k.dev.Known(now.Kind)
	if now.On == old.On {
		return
	}
	if !k.takes(now.Kind) {
		k.remember(now)
		return
	}
	k.keepOrSetBack(ctx, now, old, "could not set the flag back", "flag", now.Kind.String(), "on", old.On)
}

// keepOrSetBack asks the app about now: accepted, it is remembered;
// refused, the interface is set back to old, unless it no longer shows now
// (ask). A failure to set it back is logged as failed, with attrs.
func (k *keeper) keepOrSetBack(ctx context.Context, now, old tap.Change, failed string, attrs ...any) {
	keep, back := k.ask(ctx, now, old)
	switch {
	case keep:
		k.remember(now)
	case back:
		if err := k.dev.Set(old); err != nil {
			k.log.Error(failed, append(attrs, "err", err)...)
		}
	}
}

package tap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// What an administrator (or another tool) can do to the interface behind
// kbridge's back, and what the keeper (Device.Keep) does about it:
//
//   - deletes it (ip link del): the queues' fds stay open but dead (read and
//     write fail with EBADFD, epoll reports EPOLLERR). The keeper makes the
//     interface again with the same name, queues, offloads, MTU, MAC,
//     addresses and routes, and puts the new queues' fds in place of the
//     old ones with dup3, so that the workers, which keep their fd numbers,
//     go on without a restart. If that fails, Lost is told why.
//   - sets it down and up: the kernel drops its routes (and IPv6 addresses)
//     on the way down; on the way up the keeper adds the configured
//     addresses and routes again.
//   - changes its MTU, admin state, MAC, promiscuous or all-multicast
//     flag: when the app takes requests of that kind (KeepOptions.Asks;
//     ring mode, kbridge.h version 5), the keeper asks it (Ask) and keeps an
//     accepted change (a new MTU takes effect in the queues from their next
//     burst, up to Device.MaxMTU) or sets a refused or unanswered one back,
//     logging the app's answer. When it does not, an MTU change is set back
//     (the app's buffers and the queues' frame limits are sized for the
//     MTU) and the rest are left as the administrator made them. At
//     start, an app that takes MTU requests is asked for the interface's
//     MTU once, so that a port an earlier kbridge changed agrees again.

// KeepOptions configure Device.Keep.
type KeepOptions struct {
	Log *slog.Logger
	// Recreated is called after a deleted interface was made again and
	// its queues took the old fd numbers: wake the workers so that they
	// watch the new fds.
	Recreated func()
	// Lost is called once when the interface was deleted and could not be
	// made again; the keeper then stops.
	Lost func(error)
	// Asks reports whether Ask takes changes of kind k; nil: none.
	Asks func(k ChangeKind) bool
	// Ask hands a change made to the interface to the app and returns its
	// answer: nil keeps the change, an error sets it back to old. It may
	// block (the app answers from its control path) until ctx ends, which
	// it does when the keeper stops; the keeper handles the interface's
	// next event after it returns.
	Ask func(ctx context.Context, c, old Change) error
}

// ChangeKind is what changed on the interface.
type ChangeKind int

// The changes the keeper can hand to the app.
const (
	ChangeMTU      ChangeKind = iota + 1
	ChangeLink                // administratively up or down
	ChangeMAC                 // the hardware address
	ChangePromisc             // IFF_PROMISC, as ip link set promisc on|off sets it
	ChangeAllmulti            // IFF_ALLMULTI
)

func (k ChangeKind) String() string {
	switch k {
	case ChangeMTU:
		return "mtu"
	case ChangeLink:
		return "link"
	case ChangeMAC:
		return "mac"
	case ChangePromisc:
		return "promisc"
	case ChangeAllmulti:
		return "allmulticast"
	}
	return fmt.Sprintf("change %d", int(k))
}

// Change is one change an administrator made to the interface.
type Change struct {
	Kind ChangeKind
	MTU  int              // ChangeMTU
	On   bool             // ChangeLink: up; ChangePromisc, ChangeAllmulti: on
	MAC  net.HardwareAddr // ChangeMAC
}

// Value is the change's new value as a log shows it.
func (c Change) Value() string {
	switch c.Kind {
	case ChangeMTU:
		return fmt.Sprint(c.MTU)
	case ChangeMAC:
		return c.MAC.String()
	case ChangeLink:
		if c.On {
			return "up"
		}
		return "down"
	}
	if c.On {
		return "on"
	}
	return "off"
}

// remember records what Keep needs: the ifindex, and the MAC the kernel
// chose if the configuration names none, so that a re-made interface keeps
// it (neighbours' caches stay right).
func (d *Device) remember(cfg Config) error {
	link, err := netlink.LinkByName(cfg.Name)
	if err != nil {
		return fmt.Errorf("tap: find %q: %w", cfg.Name, err)
	}
	if hw, err := net.ParseMAC(cfg.MAC); err == nil {
		cfg.MAC = hw.String() // one spelling: the keeper compares it with the kernel's
	} else {
		cfg.MAC = link.Attrs().HardwareAddr.String()
	}
	markOwner(link) // kbridge cleanup tells this live TAP from an orphan (owner.go)
	d.mu.Lock()
	d.cfg = cfg
	d.mu.Unlock()
	d.index = link.Attrs().Index
	return nil
}

// config returns what the interface is made and kept with: the
// configuration, with the MTU and MAC the app accepted since.
func (d *Device) config() Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Index returns the interface's current ifindex.
func (d *Device) Index() int { return d.index }

// Keep watches the interface through a netlink link subscription in the
// current network namespace and repairs what others do to it (see the top
// of this file). It returns a function that ends the watch and waits for a
// repair in progress; call it before Close.
func (d *Device) Keep(o KeepOptions) (stop func(), err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Recreated == nil {
		o.Recreated = func() {}
	}
	if o.Lost == nil {
		o.Lost = func(error) {}
	}
	if o.Asks == nil || o.Ask == nil {
		o.Asks = func(ChangeKind) bool { return false }
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &keeper{d: d, o: o, log: o.Log.With("interface", d.name), done: make(chan struct{}), ctx: ctx}
	k.learnFlags()
	ch, subStop, err := k.subscribe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("tap: watch %s: %w", d.name, err)
	}
	k.wg.Add(1)
	go k.run(ch, subStop)
	var once sync.Once
	return func() {
		once.Do(func() {
			close(k.done)
			cancel() // ends a wait for the app's answer
			k.wg.Wait()
		})
	}, nil
}

type keeper struct {
	d    *Device
	o    KeepOptions
	log  *slog.Logger
	done chan struct{}
	wg   sync.WaitGroup
	ctx  context.Context // ends when the keeper stops
}

// learnFlags takes the promiscuous and all-multicast flags as the
// interface has them now (kbridge does not configure them) as known.
func (k *keeper) learnFlags() {
	if l, err := netlink.LinkByIndex(k.d.index); err == nil {
		k.d.setKnown(ChangePromisc, l.Attrs().RawFlags&unix.IFF_PROMISC != 0)
		k.d.setKnown(ChangeAllmulti, l.Attrs().RawFlags&unix.IFF_ALLMULTI != 0)
	}
}

// subscribe starts a link subscription. Its channel closes when the
// subscription fails (a socket overrun, say) or once stop is closed.
func (k *keeper) subscribe() (<-chan netlink.LinkUpdate, chan struct{}, error) {
	ch := make(chan netlink.LinkUpdate, 64)
	stop := make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(ch, stop, netlink.LinkSubscribeOptions{
		ErrorCallback:     func(err error) { k.log.Debug("link subscription", "err", err) },
		ReceiveBufferSize: 1 << 20,
	})
	if err != nil {
		close(stop)
		return nil, nil, err
	}
	return ch, stop, nil
}

func (k *keeper) run(ch <-chan netlink.LinkUpdate, stop chan struct{}) {
	defer k.wg.Done()
	end := func() {
		close(stop)
		for range ch { // until the subscription's goroutine closes it
		}
	}
	// Events between Create and the subscription were missed.
	if !k.sync() {
		end()
		return
	}
	k.agreeMTU()
	for {
		select {
		case <-k.done:
			end()
			return
		case u, ok := <-ch:
			if !ok {
				// Events may have been lost: subscribe again, then
				// look at the interface as it is.
				close(stop)
				for {
					var err error
					if ch, stop, err = k.subscribe(); err == nil {
						break
					}
					k.log.Warn("link subscription ended; retrying", "err", err)
					select {
					case <-k.done:
						return
					case <-time.After(time.Second):
					}
				}
				if !k.sync() {
					end()
					return
				}
				continue
			}
			if int(u.Index) != k.d.index {
				continue
			}
			goOn := true
			switch u.Header.Type {
			case unix.RTM_DELLINK:
				goOn = k.sync() // a bridge port's DELLINK is no deletion
			case unix.RTM_NEWLINK:
				goOn = k.sync() // the event may be stale: look at it as it is now
			}
			if !goOn {
				end()
				return
			}
		}
	}
}

// sync looks at the interface as it is now: made again if it is gone, else
// checked like a NEWLINK event. It returns false when the keeper must stop.
func (k *keeper) sync() bool {
	link, err := netlink.LinkByIndex(k.d.index)
	var nf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &nf) || errors.Is(err, unix.ENODEV):
		return k.recreate()
	case err != nil:
		k.log.Warn("cannot read the interface", "err", err)
		return true
	case link.Attrs().Name != k.d.name:
		k.log.Warn("the interface was renamed; kbridge keeps using it", "new_name", link.Attrs().Name)
	}
	k.check(link)
	return true
}

// recreate makes a deleted interface again and hands its queues to the
// workers. It returns false, having told Lost, if it cannot.
func (k *keeper) recreate() bool {
	start := time.Now()
	k.log.Warn("the interface was deleted: making it again")
	if err := k.d.recreate(); err != nil {
		k.o.Lost(fmt.Errorf("interface %s was deleted and could not be made again: %w", k.d.name, err))
		return false
	}
	k.learnFlags()
	k.o.Recreated()
	k.log.Warn("the interface was deleted and made again; the workers use its new queues",
		"ifindex", k.d.index, "took", time.Since(start).Round(time.Microsecond).String())
	return true
}

// check compares the interface as it is with what it is known to be (as
// configured, or as the app accepted since: Device keeps it, so that a
// re-made interface gets it) and handles each difference: asked of the
// app, kept or set back.
func (k *keeper) check(link netlink.Link) {
	a := link.Attrs()
	k.admin(link, a.RawFlags&unix.IFF_UP != 0)
	k.mtu(link, a.MTU)
	k.mac(link, a.HardwareAddr)
	k.flag(link, ChangePromisc, a.RawFlags&unix.IFF_PROMISC != 0, netlink.SetPromiscOn, netlink.SetPromiscOff)
	k.flag(link, ChangeAllmulti, a.RawFlags&unix.IFF_ALLMULTI != 0, netlink.LinkSetAllmulticastOn, netlink.LinkSetAllmulticastOff)
}

// changeOf is the interface's value of kind, as a Change.
func changeOf(l netlink.Link, kind ChangeKind) Change {
	a := l.Attrs()
	c := Change{Kind: kind}
	switch kind {
	case ChangeMTU:
		c.MTU = a.MTU
	case ChangeMAC:
		c.MAC = a.HardwareAddr
	case ChangeLink:
		c.On = a.RawFlags&unix.IFF_UP != 0
	case ChangePromisc:
		c.On = a.RawFlags&unix.IFF_PROMISC != 0
	case ChangeAllmulti:
		c.On = a.RawFlags&unix.IFF_ALLMULTI != 0
	}
	return c
}

// ask hands c to the app and logs its answer. keep: the app applied it.
// Otherwise setBack says whether the interface still shows c: an admin
// may have changed it again while the app was asked, and that is then
// not undone but handled as a change of its own at the next event (the
// interface gone meanwhile: nothing to set back either).
func (k *keeper) ask(c, old Change) (keep, setBack bool) {
	start := time.Now()
	err := k.o.Ask(k.ctx, c, old)
	took := time.Since(start).Round(time.Microsecond).String()
	if err == nil {
		k.log.Info("the app applied the interface's change", "change", c.Kind.String(), "value", c.Value(), "took", took)
		return true, false
	}
	k.log.Error("the app did not take the interface's change: setting it back",
		"change", c.Kind.String(), "value", c.Value(), "back_to", old.Value(), "answer", err.Error(), "took", took)
	l, lerr := netlink.LinkByIndex(k.d.index)
	return false, lerr == nil && changeOf(l, c.Kind).Value() == c.Value()
}

// agreeMTU tells the app, once at start, the MTU the interface starts
// with. The app's port may still have an MTU an earlier kbridge's
// interface had (a request it accepted), and a port whose MTU differs from
// the interface's drops or cuts the kernel's largest frames, or hands the
// kernel frames kb0 counts as oversize. Refused or unanswered: logged, and
// the interface keeps its MTU, the configured one.
func (k *keeper) agreeMTU() {
	if !k.o.Asks(ChangeMTU) {
		return
	}
	c := Change{Kind: ChangeMTU, MTU: k.d.MTU()}
	start := time.Now()
	err := k.o.Ask(k.ctx, c, c)
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
func (k *keeper) admin(link netlink.Link, up bool) {
	was := k.d.known(ChangeLink)
	if up == was {
		return
	}
	if k.o.Asks(ChangeLink) {
		keep, back := k.ask(Change{Kind: ChangeLink, On: up}, Change{Kind: ChangeLink, On: was})
		if !keep {
			if !back {
				return
			}
			set := netlink.LinkSetDown
			if was {
				set = netlink.LinkSetUp
			}
			if err := set(link); err != nil {
				k.log.Error("could not set the interface's admin state back", "up", was, "err", err)
				return
			}
			if !was {
				return
			}
			// Back up: the way down took the routes.
		} else {
			k.d.setKnown(ChangeLink, up)
		}
	} else {
		k.d.setKnown(ChangeLink, up)
	}
	if !k.d.known(ChangeLink) {
		return
	}
	cfg := k.d.config()
	if err := reapply(cfg); err != nil {
		k.log.Error("the interface is up again, but its addresses and routes could not all be re-applied", "err", err)
	} else {
		k.log.Info("the interface is up again: addresses and routes re-applied",
			"addresses", len(cfg.Addresses), "routes", len(cfg.Routes))
	}
}

// mtu handles an MTU change: taken live when the app accepts it and the
// queues can carry it, else the MTU in force set back.
func (k *keeper) mtu(link netlink.Link, mtu int) {
	cur := k.d.MTU()
	if mtu == cur {
		return
	}
	switch {
	case !k.o.Asks(ChangeMTU):
		k.log.Error("the interface's MTU was changed outside kbridge: setting interface.mtu back "+
			"(the app does not take MTU requests, and its buffers and kbridge's frame limits are sized for it; "+
			"to change the MTU, change interface.mtu and restart kbridge)",
			"mtu", mtu, "interface_mtu", cur)
	case mtu > k.d.MaxMTU():
		k.log.Error("the interface's MTU was changed beyond what kbridge can carry to the app: setting it back "+
			"(the app's mbufs times workers.max_segments, or the largest MTU the app declared)",
			"mtu", mtu, "max_mtu", k.d.MaxMTU(), "interface_mtu", cur)
	default:
		keep, back := k.ask(Change{Kind: ChangeMTU, MTU: mtu}, Change{Kind: ChangeMTU, MTU: cur})
		if keep {
			err := k.d.SetMTU(mtu)
			if err == nil {
				return
			}
			k.log.Error("the queues cannot take the MTU the app accepted: setting it back", "mtu", mtu, "err", err)
		} else if !back {
			return
		}
	}
	if err := netlink.LinkSetMTU(link, cur); err != nil {
		k.log.Error("could not set the MTU back", "mtu", cur, "err", err)
	}
}

// mac handles a new hardware address: asked of the app when it takes MAC
// requests (kept, and a re-made interface gets it, or set back); else left.
func (k *keeper) mac(link netlink.Link, hw net.HardwareAddr) {
	cur := k.d.MAC()
	if len(hw) == 0 || hw.String() == cur || !k.o.Asks(ChangeMAC) {
		return
	}
	old, _ := net.ParseMAC(cur)
	keep, back := k.ask(Change{Kind: ChangeMAC, MAC: hw}, Change{Kind: ChangeMAC, MAC: old})
	if keep {
		k.d.setMAC(hw.String())
		return
	}
	if !back {
		return
	}
	if err := netlink.LinkSetHardwareAddr(link, old); err != nil {
		k.log.Error("could not set the MAC back", "mac", cur, "err", err)
	}
}

// flag handles a change of the promiscuous or all-multicast flag: asked of
// the app when it takes that request (kept, or set back); else left.
func (k *keeper) flag(link netlink.Link, kind ChangeKind, on bool, setOn, setOff func(netlink.Link) error) {
	was := k.d.known(kind)
	if on == was {
		return
	}
	if !k.o.Asks(kind) {
		k.d.setKnown(kind, on)
		return
	}
	keep, back := k.ask(Change{Kind: kind, On: on}, Change{Kind: kind, On: was})
	if keep {
		k.d.setKnown(kind, on)
		return
	}
	if !back {
		return
	}
	set := setOff
	if was {
		set = setOn
	}
	if err := set(link); err != nil {
		k.log.Error("could not set the flag back", "flag", kind.String(), "on", was, "err", err)
	}
}

// recreate makes the interface again and moves the new queues' fds onto the
// old fd numbers. The workers keep reading and writing their fd numbers;
// dup3 swaps the file under them atomically, and a worker's waiter watches
// the new file from its next park: it follows each queue's FdGeneration
// (policy.Waiter.Follow), parked or busy when the swap came.
func (d *Device) recreate() (err error) {
	cfg := d.config()
	if l, err := netlink.LinkByName(cfg.Name); err == nil {
		return fmt.Errorf("an interface %q (a %s, ifindex %d) took its place", cfg.Name, l.Type(), l.Attrs().Index)
	}
	fds := make([]int, 0, len(d.queues))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for q := range d.queues {
		// The first exclusive: an interface that took the name meanwhile
		// is refused, not joined.
		fd, err := openQueue(cfg.Name, q == 0)
		if err != nil {
			return fmt.Errorf("queue %d: %w", q, err)
		}
		fds = append(fds, fd)
		if q == 0 {
			if err := setOffloads(fd, d.offload.Load()); err != nil {
				return err
			}
		}
	}
	if err := configure(cfg); err != nil {
		return err
	}
	if err := d.remember(cfg); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.carrier {
		if err := setCarrier(fds[0], false); err != nil {
			return err
		}
	}
	if d.speed != 0 {
		if err := setSpeed(cfg.Name, d.speed, d.full); err != nil {
			return err
		}
	}
	if err := setFlags(cfg.Name, d.promisc, d.allmulti); err != nil {
		return err
	}
	for q, fd := range fds {
		if err := unix.Dup3(fd, d.queues[q].fd, unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("queue %d: dup3: %w", q, err)
		}
		d.queues[q].swaps.Add(1) // before Recreated's poke: the woken park re-adds the fd
	}
	return nil
}

// reapply adds the configured addresses and routes again (both idempotent).
func reapply(cfg Config) error {
	link, err := netlink.LinkByName(cfg.Name)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range cfg.Addresses {
		addr, _ := netlink.ParseAddr(a)
		if err := netlink.AddrReplace(link, addr); err != nil {
			errs = append(errs, fmt.Errorf("address %s: %w", a, err))
		}
	}
	for _, r := range cfg.Routes {
		if err := netlink.RouteReplace(route(link, r)); err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", r.To, err))
		}
	}
	return errors.Join(errs...)
}

// route is r through link.
func route(link netlink.Link, r Route) *netlink.Route {
	_, dst, _ := net.ParseCIDR(r.To)
	rt := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Priority: r.Met}
	if r.Via != "" {
		rt.Gw = net.ParseIP(r.Via)
	}
	if r.Src != "" {
		rt.Src = net.ParseIP(r.Src)
	}
	return rt
}

// MAC returns the interface's MAC as kbridge keeps it: the configured one,
// the kernel's first choice, or the last one the app accepted. A re-made
// interface gets it.
func (d *Device) MAC() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg.MAC
}

func (d *Device) setMAC(mac string) {
	d.mu.Lock()
	d.cfg.MAC = mac
	d.mu.Unlock()
}

// known is what the interface is known to be for kind (ChangeLink,
// ChangePromisc, ChangeAllmulti): as configured, or as the app accepted.
func (d *Device) known(kind ChangeKind) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch kind {
	case ChangeLink:
		return d.cfg.Up
	case ChangePromisc:
		return d.promisc
	case ChangeAllmulti:
		return d.allmulti
	}
	return false
}

// setKnown records it; a re-made interface gets it.
func (d *Device) setKnown(kind ChangeKind, on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch kind {
	case ChangeLink:
		d.cfg.Up = on
	case ChangePromisc:
		d.promisc = on
	case ChangeAllmulti:
		d.allmulti = on
	}
}

// setFlags turns interface name's promiscuous and all-multicast flags on
// where asked (a new interface has both off).
func setFlags(name string, promisc, allmulti bool) error {
	if !promisc && !allmulti {
		return nil
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	if promisc {
		if err := netlink.SetPromiscOn(l); err != nil {
			return fmt.Errorf("promisc on: %w", err)
		}
	}
	if allmulti {
		if err := netlink.LinkSetAllmulticastOn(l); err != nil {
			return fmt.Errorf("allmulticast on: %w", err)
		}
	}
	return nil
}

// SetFlags turns the interface's promiscuous and all-multicast flags on
// where asked (a new interface has both off) and keeps them as known, before
// Keep: what the app's port accepted from an earlier kbridge's interface.
func (d *Device) SetFlags(promisc, allmulti bool) error {
	if err := setFlags(d.name, promisc, allmulti); err != nil {
		return fmt.Errorf("tap: %s: %w", d.name, err)
	}
	d.setKnown(ChangePromisc, promisc)
	d.setKnown(ChangeAllmulti, allmulti)
	return nil
}

package tap

import (
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
//   - changes its MTU: refused. The app's buffers and the queues' frame
//     limits are sized for interface.mtu, so the keeper logs an error and
//     sets the configured MTU back.

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
}

// remember records what Keep needs: the ifindex, and the MAC the kernel
// chose if the configuration names none, so that a re-made interface keeps
// it (neighbours' caches stay right).
func (d *Device) remember(cfg Config) error {
	link, err := netlink.LinkByName(cfg.Name)
	if err != nil {
		return fmt.Errorf("tap: find %q: %w", cfg.Name, err)
	}
	if cfg.MAC == "" {
		cfg.MAC = link.Attrs().HardwareAddr.String()
	}
	markOwner(link) // kbridge cleanup tells this live TAP from an orphan (owner.go)
	d.cfg = cfg
	d.index = link.Attrs().Index
	return nil
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
	k := &keeper{d: d, o: o, log: o.Log.With("interface", d.name), done: make(chan struct{}), up: d.cfg.Up}
	ch, subStop, err := k.subscribe()
	if err != nil {
		return nil, fmt.Errorf("tap: watch %s: %w", d.name, err)
	}
	k.wg.Add(1)
	go k.run(ch, subStop)
	var once sync.Once
	return func() {
		once.Do(func() {
			close(k.done)
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
	up   bool // administratively up at the last event
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
				goOn = k.newLink(u.Flags&unix.IFF_UP != 0, u.Attrs().MTU)
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
	return k.newLink(link.Attrs().RawFlags&unix.IFF_UP != 0, link.Attrs().MTU)
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
	k.up = k.d.cfg.Up
	k.o.Recreated()
	k.log.Warn("the interface was deleted and made again; the workers use its new queues",
		"ifindex", k.d.index, "took", time.Since(start).Round(time.Microsecond).String())
	return true
}

// newLink handles the interface's state: addresses and routes again after
// it came up, and the configured MTU back if it changed.
func (k *keeper) newLink(up bool, mtu int) bool {
	wasUp := k.up
	k.up = up
	if up && !wasUp {
		if err := reapply(k.d.cfg); err != nil {
			k.log.Error("the interface is up again, but its addresses and routes could not all be re-applied", "err", err)
		} else {
			k.log.Info("the interface is up again: addresses and routes re-applied",
				"addresses", len(k.d.cfg.Addresses), "routes", len(k.d.cfg.Routes))
		}
	}
	if mtu != k.d.cfg.MTU {
		// The event may be stale (our own setting may have come since):
		// look at the MTU as it is now.
		link, err := netlink.LinkByIndex(k.d.index)
		if err != nil || link.Attrs().MTU == k.d.cfg.MTU {
			return true
		}
		k.log.Error("the interface's MTU was changed outside kbridge: setting interface.mtu back "+
			"(kbridge's and the app's buffers are sized for it; to change the MTU, change interface.mtu and restart kbridge)",
			"mtu", link.Attrs().MTU, "interface_mtu", k.d.cfg.MTU)
		if err := netlink.LinkSetMTU(link, k.d.cfg.MTU); err != nil {
			k.log.Error("could not set the MTU back", "mtu", k.d.cfg.MTU, "err", err)
		}
	}
	return true
}

// recreate makes the interface again and moves the new queues' fds onto the
// old fd numbers. The workers keep reading and writing their fd numbers;
// dup3 swaps the file under them atomically, and a worker's waiter watches
// the new file from its next park: it follows each queue's FdGeneration
// (policy.Waiter.Follow), parked or busy when the swap came.
func (d *Device) recreate() (err error) {
	cfg := d.cfg
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
		fd, err := openQueue(cfg.Name)
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

package tap

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// What an administrator (or another tool) can do to the interface behind
// kbridge's back, and what package tap offers whoever keeps it (kbridge:
// the daemon's keeper, which decides): a Watch reports it as Events; State
// reads the interface as it is; Set sets one of its values (back);
// Remember and Known are what a re-made interface gets; Recreate makes a
// deleted interface again under the running queues; RestoreRoutes adds the
// addresses and routes a down/up took.

// ChangeKind is one of the interface's values an administrator can change
// and the app can take as a request.
type ChangeKind int

// The kinds of Change.
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

// Change is one value of the interface: one an administrator set, or one
// to set it (back) to.
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

// State is the interface as the kernel has it.
type State struct {
	Index    int
	Name     string
	MTU      int
	MAC      net.HardwareAddr
	Up       bool // IFF_UP: administratively up
	Promisc  bool // IFF_PROMISC
	Allmulti bool // IFF_ALLMULTI
	Carrier  bool // IFF_LOWER_UP
}

func stateOf(l netlink.Link) State {
	a := l.Attrs()
	return State{
		Index: a.Index, Name: a.Name, MTU: a.MTU, MAC: a.HardwareAddr,
		Up:       a.RawFlags&unix.IFF_UP != 0,
		Promisc:  a.RawFlags&unix.IFF_PROMISC != 0,
		Allmulti: a.RawFlags&unix.IFF_ALLMULTI != 0,
		Carrier:  a.RawFlags&unix.IFF_LOWER_UP != 0,
	}
}

// Value is the state's value of kind, as a Change.
func (s State) Value(kind ChangeKind) Change {
	c := Change{Kind: kind}
	switch kind {
	case ChangeMTU:
		c.MTU = s.MTU
	case ChangeMAC:
		c.MAC = s.MAC
	case ChangeLink:
		c.On = s.Up
	case ChangePromisc:
		c.On = s.Promisc
	case ChangeAllmulti:
		c.On = s.Allmulti
	}
	return c
}

// State reads the interface as it is now, by its ifindex. A deleted
// interface's error wraps ErrDeleted.
func (d *Device) State() (State, error) {
	l, err := d.link()
	if err != nil {
		return State{}, err
	}
	return stateOf(l), nil
}

// link is the interface by its ifindex; gone: an error wrapping ErrDeleted.
func (d *Device) link() (netlink.Link, error) {
	l, err := netlink.LinkByIndex(d.Index())
	if isGone(err) {
		return nil, fmt.Errorf("tap: %s: %w", d.name, ErrDeleted)
	}
	if err != nil {
		return nil, fmt.Errorf("tap: %s: %w", d.name, err)
	}
	return l, nil
}

// isGone reports whether err says the interface no longer exists.
func isGone(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, ErrDeleted)
}

// Set sets the kernel interface's value of c.Kind to c's (netlink). It
// changes neither the queues (SetMTU does) nor what a re-made interface
// gets (Remember does).
func (d *Device) Set(c Change) error {
	l, err := d.link()
	if err != nil {
		return err
	}
	switch c.Kind {
	case ChangeMTU:
		err = netlink.LinkSetMTU(l, c.MTU)
	case ChangeMAC:
		err = netlink.LinkSetHardwareAddr(l, c.MAC)
	case ChangeLink:
		err = onOff(c.On, netlink.LinkSetUp, netlink.LinkSetDown)(l)
	case ChangePromisc:
		err = onOff(c.On, netlink.SetPromiscOn, netlink.SetPromiscOff)(l)
	case ChangeAllmulti:
		err = onOff(c.On, netlink.LinkSetAllmulticastOn, netlink.LinkSetAllmulticastOff)(l)
	default:
		return fmt.Errorf("tap: %s: %w: %v", d.name, ErrUnknownChange, c.Kind)
	}
	if err != nil {
		return fmt.Errorf("tap: %s: set %s %s: %w", d.name, c.Kind, c.Value(), err)
	}
	return nil
}

func onOff(on bool, setOn, setOff func(netlink.Link) error) func(netlink.Link) error {
	if on {
		return setOn
	}
	return setOff
}

// Known is what the interface is known to be for kind: as configured (or
// as the kernel made it: its MAC, its flags), or as last remembered. A
// re-made interface gets it.
func (d *Device) Known(kind ChangeKind) Change {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := Change{Kind: kind}
	switch kind {
	case ChangeMTU:
		c.MTU = d.cfg.MTU
	case ChangeMAC:
		c.MAC, _ = net.ParseMAC(d.cfg.MAC)
	case ChangeLink:
		c.On = d.cfg.Up
	case ChangePromisc:
		c.On = d.promisc
	case ChangeAllmulti:
		c.On = d.allmulti
	}
	return c
}

// Remember records c as what the interface is known to be: a re-made
// interface gets it. An MTU is remembered by SetMTU, which changes the
// queues too; Remember refuses it.
func (d *Device) Remember(c Change) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch c.Kind {
	case ChangeMAC:
		d.cfg.MAC = c.MAC.String()
	case ChangeLink:
		d.cfg.Up = c.On
	case ChangePromisc:
		d.promisc = c.On
	case ChangeAllmulti:
		d.allmulti = c.On
	default:
		return fmt.Errorf("tap: %s: remember: %w: %v", d.name, ErrUnknownChange, c.Kind)
	}
	return nil
}

// MAC returns the interface's MAC as kbridge keeps it: the configured one,
// the kernel's first choice, or the last one remembered. A re-made
// interface gets it.
func (d *Device) MAC() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg.MAC
}

// Index returns the interface's current ifindex (Recreate changes it).
func (d *Device) Index() int { return int(d.index.Load()) }

// remember records what the keeping needs: the ifindex, and the MAC the
// kernel chose if the configuration names none, so that a re-made
// interface keeps it (neighbours' caches stay right). link is the
// interface as made or adopted: its MAC has not changed since unless cfg
// names one.
func (d *Device) remember(cfg Config, link netlink.Link) error {
	if hw, err := net.ParseMAC(cfg.MAC); err == nil {
		cfg.MAC = hw.String() // one spelling: the keeper compares it with the kernel's
	} else {
		cfg.MAC = link.Attrs().HardwareAddr.String()
	}
	markOwner(link) // kbridge cleanup tells this live TAP from an orphan (owner.go)
	d.mu.Lock()
	d.cfg = cfg
	d.mu.Unlock()
	d.index.Store(int64(link.Attrs().Index))
	return nil
}

// config returns what the interface is made and kept with: the
// configuration, with what was remembered since.
func (d *Device) config() Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Recreate makes a deleted interface again, as it is known (Known), and
// moves the new queues' fds onto the old fd numbers. The workers keep
// reading and writing their fd numbers; dup3 swaps the file under them
// atomically, and a worker's waiter watches the new file from its next
// park: it follows each queue's FdGeneration (policy.Waiter.Follow), parked
// or busy when the swap came. Poke the workers after it. An interface that
// took the name meanwhile is left alone: the error wraps ErrNameTaken.
func (d *Device) Recreate() (err error) {
	cfg := d.config()
	if l, err := netlink.LinkByName(cfg.Name); err == nil {
		return fmt.Errorf("an interface %q (a %s, ifindex %d) %w", cfg.Name, l.Type(), l.Attrs().Index, ErrNameTaken)
	}
	fds := make([]int, 0, len(d.queues))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var link netlink.Link
	for q := range d.queues {
		// The first exclusive: an interface that took the name meanwhile
		// is refused, not joined.
		fd, err := openQueue(cfg.Name, q == 0)
		if err != nil {
			return fmt.Errorf("queue %d: %w", q, err)
		}
		fds = append(fds, fd)
		if q == 0 {
			if link, err = ownFirst(fd, cfg.Name); err != nil {
				return err
			}
			if err := setOffloads(fd, d.offload.Load()); err != nil {
				return err
			}
		}
	}
	if err := configure(cfg, link); err != nil {
		return err
	}
	if err := d.remember(cfg, link); err != nil {
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
		d.queues[q].swaps.Add(1) // before the workers are poked: the woken park re-adds the fd
	}
	return nil
}

// RestoreRoutes adds the configured addresses and routes again (both
// idempotent): a down/up took the routes (and IPv6 addresses). It returns
// how many it has.
func (d *Device) RestoreRoutes() (addresses, routes int, err error) {
	cfg := d.config()
	link, err := netlink.LinkByName(cfg.Name)
	if err != nil {
		return 0, 0, err
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
	return len(cfg.Addresses), len(cfg.Routes), errors.Join(errs...)
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
// where asked (a new interface has both off) and remembers them: what the
// app's port accepted from an earlier kbridge's interface.
func (d *Device) SetFlags(promisc, allmulti bool) error {
	if err := setFlags(d.name, promisc, allmulti); err != nil {
		return fmt.Errorf("tap: %s: %w", d.name, err)
	}
	d.mu.Lock()
	d.promisc, d.allmulti = promisc, allmulti
	d.mu.Unlock()
	return nil
}

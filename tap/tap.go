// Package tap creates the kernel side of the exception path: a TAP interface
// (through songgao/water) configured from kbridge's YAML through netlink, with
// one non-blocking file descriptor per queue for the workers.
package tap

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/songgao/water"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/internal/limits"
)

// Config describes the kernel interface.
type Config struct {
	Name      string   `mapstructure:"name" json:"name"`
	MTU       int      `mapstructure:"mtu" json:"mtu"`
	MAC       string   `mapstructure:"mac" json:"mac,omitempty"` // empty: the kernel picks a random one
	Addresses []string `mapstructure:"addresses" json:"addresses"`
	Routes    []Route  `mapstructure:"routes" json:"routes,omitempty"`
	Up        bool     `mapstructure:"up" json:"up"`
	TxQueue   int      `mapstructure:"txqueuelen" json:"txqueuelen,omitempty"`
}

// Route is a route through the interface.
type Route struct {
	To  string `mapstructure:"to" json:"to"`                   // CIDR
	Via string `mapstructure:"via" json:"via,omitempty"`       // gateway, optional
	Src string `mapstructure:"src" json:"src,omitempty"`       // preferred source, optional
	Met int    `mapstructure:"metric" json:"metric,omitempty"` // optional
}

// DefaultConfig is the interface a configuration without an interface
// section gets.
func DefaultConfig() Config {
	return Config{Name: "kb0", MTU: 1500, Up: true}
}

// Validate checks the configuration and reports every problem at once. Each
// error is a *conferr.FieldError naming the key under prefix (for example
// "interface.mtu") and the value.
func (c Config) Validate(prefix string) error {
	errs := conferr.Collector{Prefix: prefix}
	if c.Name == "" || len(c.Name) > limits.IfNameMax {
		errs.Addf("name", c.Name, "must be 1 to %d characters", limits.IfNameMax)
	}
	if c.MTU < limits.MinMTU || c.MTU > limits.MaxMTU {
		// The maximum is what a worker's 64 KiB frame buffer holds, not
		// the kernel's: a larger MTU would be accepted here and every
		// full-size frame dropped at run time.
		errs.Addf("mtu", c.MTU, "must be between %d and %d", limits.MinMTU, limits.MaxMTU)
	}
	if c.MAC != "" {
		hw, err := net.ParseMAC(c.MAC)
		switch {
		case err != nil || len(hw) != 6:
			errs.Add("mac", c.MAC, "not an Ethernet address")
		case hw[0]&1 != 0:
			errs.Add("mac", c.MAC, "a multicast address cannot be an interface's")
		}
	}
	for i, a := range c.Addresses {
		if _, err := netlink.ParseAddr(a); err != nil {
			errs.Add(conferr.Index("addresses", i), a, "want an address with prefix length, like 198.18.0.2/24")
		}
	}
	for i, r := range c.Routes {
		route := conferr.Index("routes", i)
		if _, _, err := net.ParseCIDR(r.To); err != nil {
			errs.Add(conferr.Key(route, "to"), r.To, "want a CIDR prefix")
		}
		for _, f := range []struct{ key, v string }{{"via", r.Via}, {"src", r.Src}} {
			if f.v != "" && net.ParseIP(f.v) == nil {
				errs.Add(conferr.Key(route, f.key), f.v, "not an IP address")
			}
		}
	}
	if c.TxQueue < 0 {
		errs.Add("txqueuelen", c.TxQueue, "must not be negative")
	}
	return errs.Err()
}

// Device is a TAP interface with one non-blocking fd per queue.
type Device struct {
	name  string
	ifces []*water.Interface
	fds   []int
}

// Create makes the TAP interface with the given number of queues and
// configures it. On error nothing is left behind.
func Create(cfg Config, queues int) (d *Device, err error) {
	if queues < 1 {
		return nil, fmt.Errorf("tap: %d queues", queues)
	}
	if l, err := netlink.LinkByName(cfg.Name); err == nil && l.Type() != "tuntap" {
		return nil, fmt.Errorf("tap: interface %q exists and is a %s, not a TAP: pick another interface.name or remove it",
			cfg.Name, l.Type())
	}
	d = &Device{name: cfg.Name}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	for q := 0; q < queues; q++ {
		wc := water.Config{DeviceType: water.TAP}
		wc.Name = cfg.Name
		wc.MultiQueue = queues > 1
		ifce, err := water.New(wc)
		if err != nil {
			return nil, fmt.Errorf("tap: create %q queue %d: %w", cfg.Name, q, err)
		}
		d.ifces = append(d.ifces, ifce)
		fd, err := dupNonblock(ifce)
		if err != nil {
			return nil, err
		}
		d.fds = append(d.fds, fd)
	}
	if err := configure(cfg); err != nil {
		return nil, err
	}
	return d, nil
}

// dupNonblock returns a private non-blocking copy of water's descriptor: the
// workers poll it themselves, outside Go's netpoller.
func dupNonblock(ifce *water.Interface) (int, error) {
	f, ok := ifce.ReadWriteCloser.(*os.File)
	if !ok {
		return -1, errors.New("tap: water returned no file")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("tap: %w", err)
	}
	nfd := -1
	cerr := rc.Control(func(fd uintptr) {
		nfd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if cerr != nil || err != nil {
		return -1, fmt.Errorf("tap: dup TAP fd: %w", errors.Join(cerr, err))
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return -1, fmt.Errorf("tap: set non-blocking: %w", err)
	}
	return nfd, nil
}

func configure(cfg Config) error {
	link, err := netlink.LinkByName(cfg.Name)
	if err != nil {
		return fmt.Errorf("tap: find %q: %w", cfg.Name, err)
	}
	if err := netlink.LinkSetMTU(link, cfg.MTU); err != nil {
		return fmt.Errorf("tap: %s: set mtu %d: %w", cfg.Name, cfg.MTU, err)
	}
	if cfg.MAC != "" {
		hw, _ := net.ParseMAC(cfg.MAC)
		if err := netlink.LinkSetHardwareAddr(link, hw); err != nil {
			return fmt.Errorf("tap: %s: set mac %s: %w", cfg.Name, cfg.MAC, err)
		}
	}
	if cfg.TxQueue > 0 {
		if err := netlink.LinkSetTxQLen(link, cfg.TxQueue); err != nil {
			return fmt.Errorf("tap: %s: set txqueuelen %d: %w", cfg.Name, cfg.TxQueue, err)
		}
	}
	for _, a := range cfg.Addresses {
		addr, _ := netlink.ParseAddr(a)
		if err := netlink.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("tap: %s: add address %s: %w", cfg.Name, a, err)
		}
	}
	if cfg.Up {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("tap: %s: set up: %w", cfg.Name, err)
		}
	}
	for _, r := range cfg.Routes {
		_, dst, _ := net.ParseCIDR(r.To)
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Priority: r.Met}
		if r.Via != "" {
			route.Gw = net.ParseIP(r.Via)
		}
		if r.Src != "" {
			route.Src = net.ParseIP(r.Src)
		}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("tap: %s: route %s: %w", cfg.Name, r.To, err)
		}
	}
	return nil
}

// Name returns the interface name.
func (d *Device) Name() string { return d.name }

// Fd returns queue q's non-blocking descriptor.
func (d *Device) Fd(q int) int { return d.fds[q] }

// Close closes every descriptor; the kernel then removes the interface.
func (d *Device) Close() error {
	var errs []error
	for _, fd := range d.fds {
		errs = append(errs, unix.Close(fd))
	}
	for _, i := range d.ifces {
		errs = append(errs, i.Close())
	}
	d.fds, d.ifces = nil, nil
	return errors.Join(errs...)
}

// Remove deletes a leftover interface called name if it is a TAP (a
// persistent one left by another tool). A missing interface is not an error.
func Remove(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("tap: find %q: %w", name, err)
	}
	if l.Type() != "tuntap" {
		return fmt.Errorf("tap: %q is a %s, not a TAP: not removing it", name, l.Type())
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("tap: remove %q: %w", name, err)
	}
	return nil
}

package tap

// The interface's configuration (interface.*, plain data in package
// tapconfig): the netlink calls that apply it, and Remove for `kbridge
// cleanup`.
//
// songgao/water, which kbridge used before, cannot set IFF_VNET_HDR, so the
// device is opened with golang.org/x/sys/unix directly.

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	"github.com/kbridge/kbridge/tap/tapconfig"
)

type (
	// Config describes the kernel interface (tapconfig.Config: plain data,
	// so that package config, which embeds it, imports no netlink).
	Config = tapconfig.Config
	// Route is a route through the interface (tapconfig.Route).
	Route = tapconfig.Route
)

// configure sets what cfg says of the interface link, just made: the
// setters need only its index.
func configure(cfg Config, link netlink.Link) error {
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
	if !cfg.Up {
		// A route through a down interface is refused (ENETDOWN); the
		// keeper adds them when the interface comes up.
		return nil
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("tap: %s: set up: %w", cfg.Name, err)
	}
	for _, r := range cfg.Routes {
		if err := netlink.RouteReplace(route(link, r)); err != nil {
			return fmt.Errorf("tap: %s: route %s: %w", cfg.Name, r.To, err)
		}
	}
	return nil
}

// Remove deletes a leftover interface called name if it is a TAP (a
// persistent one left by another tool). A missing interface is not an error.
func Remove(name string) error {
	l, err := findTAP(name)
	if l == nil || err != nil {
		return err
	}
	return removeLink(l)
}

// findTAP returns the interface called name if it is a TAP, nil and no
// error if there is none, and an error if it is something else.
func findTAP(name string) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, nil
		}
		return nil, fmt.Errorf("tap: find %q: %w", name, err)
	}
	if l.Type() != "tuntap" {
		return nil, fmt.Errorf("tap: %q is a %s, %w: not removing it", name, l.Type(), ErrNotTAP)
	}
	return l, nil
}

// removeLink deletes interface l.
func removeLink(l netlink.Link) error {
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("tap: remove %q: %w", l.Attrs().Name, err)
	}
	return nil
}

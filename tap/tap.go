// Package tap is the kernel's side of the exception path: a TAP interface
// opened on /dev/net/tun with virtio-net headers (IFF_VNET_HDR), configured
// from kbridge's YAML through netlink.
//
// Create makes the Device; each of its Queues implements bridge.Kernel for
// one worker. A Queue writes a burst from the app with one writev per frame,
// or per super-frame when it can coalesce TCP segments (package vnet does the
// pure work), and reads up to 64 KiB super-frames that it splits into MTU
// frames for the app. Frame rules (MTU, one VLAN tag) live here too.
//
// songgao/water, which kbridge used before, cannot set IFF_VNET_HDR, so the
// device is opened with golang.org/x/sys/unix directly.
package tap

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
	// Offload turns on the kernel side's offloads: TSO/checksum offload
	// towards kbridge (super-frames it splits) and coalesced TCP writes
	// towards the kernel. Off, every frame crosses alone with finished
	// checksums, as a plain TAP.
	Offload bool `mapstructure:"offload" json:"offload"`
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
	return Config{Name: "kb0", MTU: 1500, Up: true, Offload: true}
}

// Validate checks the configuration; errors name the key under prefix.
func (c Config) Validate(prefix string) error {
	if c.Name == "" || len(c.Name) > unix.IFNAMSIZ-1 {
		return fmt.Errorf("%s.name: %q: must be 1 to %d characters", prefix, c.Name, unix.IFNAMSIZ-1)
	}
	if c.MTU < 68 || c.MTU > 65521 {
		return fmt.Errorf("%s.mtu: %d: must be between 68 and 65521", prefix, c.MTU)
	}
	if c.MAC != "" {
		hw, err := net.ParseMAC(c.MAC)
		if err != nil || len(hw) != 6 {
			return fmt.Errorf("%s.mac: %q: not an Ethernet address", prefix, c.MAC)
		}
		if hw[0]&1 != 0 {
			return fmt.Errorf("%s.mac: %q: a multicast address cannot be an interface's", prefix, c.MAC)
		}
	}
	for i, a := range c.Addresses {
		if _, err := netlink.ParseAddr(a); err != nil {
			return fmt.Errorf("%s.addresses[%d]: %q: want an address with prefix length, like 198.18.0.2/24", prefix, i, a)
		}
	}
	for i, r := range c.Routes {
		if _, _, err := net.ParseCIDR(r.To); err != nil {
			return fmt.Errorf("%s.routes[%d].to: %q: want a CIDR prefix", prefix, i, r.To)
		}
		for key, v := range map[string]string{"via": r.Via, "src": r.Src} {
			if v != "" && net.ParseIP(v) == nil {
				return fmt.Errorf("%s.routes[%d].%s: %q: not an IP address", prefix, i, key, v)
			}
		}
	}
	if c.TxQueue < 0 {
		return fmt.Errorf("%s.txqueuelen: %d: must not be negative", prefix, c.TxQueue)
	}
	return nil
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

// Package tapconfig is the kernel interface's configuration as plain data
// (the interface: section): Config, its defaults and its validation. It
// imports no netlink, so that package config, which embeds it, stays plain
// data; package tap applies it.
package tapconfig

import (
	"net"
	"strings"

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
	// Offload turns on the kernel side's offloads: TSO/checksum offload
	// towards kbridge (super-frames it splits) and coalesced TCP writes
	// towards the kernel. Off, every frame crosses alone with finished
	// checksums, as a plain TAP.
	Offload bool `mapstructure:"offload" json:"offload"`
	// OnStop is what a stop (SIGTERM, SIGINT) does to the interface:
	// OnStopRemove or OnStopKeep.
	OnStop string `mapstructure:"on_stop" json:"on_stop"`
}

// Keep reports whether the interface outlives kbridge (OnStopKeep); an
// empty OnStop is OnStopRemove.
func (c Config) Keep() bool { return c.OnStop == OnStopKeep }

// The values of Config.OnStop.
const (
	// OnStopRemove: kbridge closes its queues and the kernel removes the
	// interface, unless something else still holds a queue (systemd's fd
	// store across a restart).
	OnStopRemove = "remove"
	// OnStopKeep: the interface is persistent from its making and outlives
	// kbridge, carrier down, for the next kbridge to adopt; `kbridge
	// cleanup` removes it.
	OnStopKeep = "keep"
)

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
	return Config{Name: "kb0", MTU: 1500, Up: true, Offload: true, OnStop: OnStopRemove}
}

// Validate checks the configuration and reports every problem at once. Each
// error is a *conferr.FieldError naming the key under prefix (for example
// "interface.mtu") and the value.
func (c Config) Validate(prefix string) error {
	errs := conferr.Collector{Prefix: prefix}
	if err := limits.CheckIfName(c.Name); err != nil {
		errs.Addf("name", c.Name, "%v", err)
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
		if _, err := parseAddr(a); err != nil {
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
	if c.OnStop != "" && c.OnStop != OnStopRemove && c.OnStop != OnStopKeep {
		errs.Addf("on_stop", c.OnStop, "must be %s or %s", OnStopRemove, OnStopKeep)
	}
	if c.TxQueue < 0 {
		errs.Add("txqueuelen", c.TxQueue, "must not be negative")
	}
	return errs.Err()
}

// parseAddr parses an interface address as package tap hands it to netlink
// (netlink.ParseAddr): "address/prefix-length", then an optional label
// after a space.
func parseAddr(s string) (*net.IPNet, error) {
	s, _, _ = strings.Cut(s, " ")
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		return nil, err
	}
	n.IP = ip
	return n, nil
}

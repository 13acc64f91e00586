// Package copp describes control-plane protection on the to-kernel path:
// the classes a frame falls in, each class's policer rates, what makes a
// frame management traffic, and the counters of what the policers did. It
// is pure Go: the configuration's copp section (Config, with its defaults
// and Validate) and the shape of the counters (Snapshot). The classifier and
// the token buckets run in C inside the burst core (package ring,
// kbridge_classify.h and burst_policer.c), before a frame costs a syscall; the
// app's header classes frames with the same classifier once its ring's room
// is down to the control plane's reserve. See
// docs/ARCHITECTURE.md, "Control-plane protection".
package copp

import (
	"net/netip"
	"time"

	"github.com/kbridge/kbridge/internal/conferr"
)

// The classes (the order of include/kbridge/kbridge_classify.h). A
// routing protocol's frame earns its class only by what proves it came
// from the link (TTL or hop limit 255, a link-scoped address) or, for BGP,
// by being one of the host's own sessions; otherwise it is classed as if
// it used no control port, so that a forged flood never takes a real
// peer's bucket.
const (
	Control    = iota // the rest of the control plane: OSPF, IS-IS, VRRP, DHCPv4/v6
	Neighbor          // ARP, IPv6 neighbour and router discovery
	Management        // what Config.Management lists
	Default           // everything else
	// ManagementSYN is a TCP connection opening (SYN without ACK) that
	// Management.Ports would make management: policed apart, so that a
	// SYN flood to a served port cannot take its established sessions'
	// class.
	ManagementSYN
	BGP  // TCP port 179 with TTL 255 (GTSM) or of one of the host's sessions
	BFD  // UDP to BFD's ports with TTL 255 (RFC 5881)
	Link // LACP, LLDP, STP, 802.1X
	// Unwanted is a frame for one of the host's own addresses, TCP or
	// UDP, to a port no socket of the host holds: the kernel would
	// answer it with a RST or a port unreachable and nothing more.
	Unwanted
	NumClasses
)

// ClassNames are the classes' names in counters and metrics.
var ClassNames = [NumClasses]string{"control", "neighbor", "management", "default", "management_syn",
	"bgp", "bfd", "link", "unwanted"}

// ControlClasses are the control plane's classes: with Neighbor, those that
// may take the reserves.
var ControlClasses = []int{Control, BGP, BFD, Link}

// Why a frame is unwanted (Snapshot.Unwanted): a UDP datagram, a TCP
// connection opening (SYN without ACK), another TCP segment.
const (
	UnwantedUDP = iota
	UnwantedSYN
	UnwantedTCP
	NumUnwantedWhys
)

// UnwantedWhyNames name the reasons a frame is unwanted.
var UnwantedWhyNames = [NumUnwantedWhys]string{"udp", "tcp_syn", "tcp"}

// Why a frame's headers could not be read to their end: it is classed
// default and counted by reason.
const (
	Parsed    = iota
	Truncated // a header runs past the frame (or its first segment)
	Malformed // an IP version or header length that makes no sense
	Deep      // more IPv6 extension headers than the classifier walks
	NumWhys
)

// WhyNames name the reasons; WhyNames[Parsed] is not counted.
var WhyNames = [NumWhys]string{"parsed", "truncated", "malformed", "deep_ipv6_extensions"}

// Limits of the management match (include/kbridge/kbridge_classify.h)
// and of the rates.
const (
	MaxPorts      = 16
	MaxEthertypes = 8
	MaxProtocols  = 8
	MaxSources    = 16
	// MaxPPS and MaxBytes bound the rates and bursts, so that the token
	// buckets' arithmetic (1e-9 units in 64 bits) cannot overflow.
	MaxPPS   = 100_000_000
	MaxBytes = 1_000_000_000
	// MinBurstBytes is the least byte burst: a 64 KiB super-frame's
	// worth. A frame larger than the burst (that super-frame with its
	// headers: 65549 bytes as IPv4, 65589 as IPv6) passes when the
	// bucket is full and leaves it in debt by the excess
	// (ring/burst_policer.h, which says why no minimum could cover every
	// frame).
	MinBurstBytes = 65536
)

// Rate is one class's policer: packets per second with a burst in
// packets, bytes per second with a burst in bytes. A rate of 0 leaves that
// dimension unlimited.
type Rate struct {
	PPS        int `mapstructure:"pps" json:"pps"`
	Burst      int `mapstructure:"burst" json:"burst"`
	Bytes      int `mapstructure:"bytes" json:"bytes"`
	BurstBytes int `mapstructure:"burst_bytes" json:"burst_bytes"`
}

// ManagementClass is the management class's rates and what puts a frame in
// it: a TCP or UDP port on either side, an ethertype, an IP protocol, an IP
// source prefix. The control and neighbour classes' protocols come first
// and are fixed.
type ManagementClass struct {
	Rate       `mapstructure:",squash"`
	Ports      []int    `mapstructure:"ports" json:"ports"`
	Ethertypes []int    `mapstructure:"ethertypes" json:"ethertypes"`
	Protocols  []int    `mapstructure:"protocols" json:"protocols"`
	Sources    []string `mapstructure:"sources" json:"sources"`
}

// UnwantedClass is the unwanted class's rates and the socket view that
// finds its frames.
type UnwantedClass struct {
	Rate `mapstructure:",squash"`
	// Enabled classes frames no socket of the host wants as unwanted
	// (see the constant Unwanted); false: they keep their class.
	Enabled bool `mapstructure:"enabled" json:"enabled"`
	// Refresh is how often the view of the host's sockets is read anew.
	Refresh time.Duration `mapstructure:"refresh" json:"refresh"`
}

// Config is the copp section of kbridge's configuration.
type Config struct {
	// Enabled turns classification, policing, the control classes'
	// reserved room and the counters on. On by default: what polices by
	// default is only what a host's bulk traffic never is (see
	// DefaultConfig).
	Enabled    bool            `mapstructure:"enabled" json:"enabled"`
	Control    Rate            `mapstructure:"control" json:"control"`
	Neighbor   Rate            `mapstructure:"neighbor" json:"neighbor"`
	Management ManagementClass `mapstructure:"management" json:"management"`
	Default    Rate            `mapstructure:"default" json:"default"`
	// ManagementSYN polices the management ports' connection openings.
	ManagementSYN Rate          `mapstructure:"management_syn" json:"management_syn"`
	BGP           Rate          `mapstructure:"bgp" json:"bgp"`
	BFD           Rate          `mapstructure:"bfd" json:"bfd"`
	Link          Rate          `mapstructure:"link" json:"link"`
	Unwanted      UnwantedClass `mapstructure:"unwanted" json:"unwanted"`
}

// The bounds of copp.unwanted.refresh: often enough that a socket just
// opened is seen within a few milliseconds, seldom enough that reading
// the host's sockets stays a small cost (docs/CONFIG.md has the figures).
const (
	MinRefresh = time.Millisecond
	MaxRefresh = 10 * time.Second
)

// DefaultConfig returns the defaults: on; the control plane's classes (bgp,
// bfd, link, control) and the neighbour class policed as SONiC's CoPP
// polices them (6000 pps for BGP's and LACP's groups, 600 for ARP and
// ND's, each with a burst of one second's packets), each in a bucket of its
// own so that one protocol's flood cannot starve another; SSH as
// management; management and default unlimited, because they carry the
// host's bulk TCP (NFS, iperf3, scp), whose ACK streams are small frames at
// rates no flood bound below them would spare. Priority, not a rate, is
// what keeps control frames ahead of a flood there. The management ports'
// connection openings are policed at 100 per second, more than sshd serves
// (MaxStartups lets 10 wait for authentication at once), so that a SYN
// flood to port 22 is freed in the burst core, not written, while the
// sessions already open keep their unlimited class. Frames no socket wants
// are classed unwanted and policed at 100 per second: the kernel would
// only answer them (a RST, a port unreachable), so a flood of them is
// freed before a syscall while a traceroute's probes and a refused
// connection's SYN still get their answer; the view of the host's sockets
// is read every 100 ms.
func DefaultConfig() Config {
	control := Rate{PPS: 6000, Burst: 6000}
	return Config{
		Enabled:       true,
		Control:       control,
		Neighbor:      Rate{PPS: 600, Burst: 600},
		Management:    ManagementClass{Ports: []int{22}},
		ManagementSYN: Rate{PPS: 100, Burst: 100},
		BGP:           control,
		BFD:           control,
		Link:          control,
		Unwanted: UnwantedClass{Rate: Rate{PPS: 100, Burst: 100}, Enabled: true,
			Refresh: 100 * time.Millisecond},
	}
}

// Rates returns the classes' rates in class order.
func (c Config) Rates() [NumClasses]Rate {
	return [NumClasses]Rate{c.Control, c.Neighbor, c.Management.Rate, c.Default, c.ManagementSYN,
		c.BGP, c.BFD, c.Link, c.Unwanted.Rate}
}

// Prefixes parses Management.Sources; Validate has checked them.
func (c Config) Prefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.Management.Sources))
	for _, s := range c.Management.Sources {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Validate checks every value and reports every problem at once, each key
// under prefix.
func (c Config) Validate(prefix string) error {
	errs := conferr.Collector{Prefix: prefix}
	for i, r := range c.Rates() {
		r.validate(&errs, ClassNames[i])
	}
	m := c.Management
	lists := []struct {
		key  string
		v    []int
		max  int
		lo   int
		hi   int
		what string
	}{
		{"ports", m.Ports, MaxPorts, 1, 65535, "a TCP or UDP port, 1 to 65535"},
		{"ethertypes", m.Ethertypes, MaxEthertypes, 0x0600, 0xffff, "an ethertype, 0x0600 to 0xffff"},
		{"protocols", m.Protocols, MaxProtocols, 0, 255, "an IP protocol number, 0 to 255"},
	}
	for _, l := range lists {
		key := "management." + l.key
		if len(l.v) > l.max {
			errs.Addf(key, l.v, "at most %d entries", l.max)
		}
		for i, v := range l.v {
			if v < l.lo || v > l.hi {
				errs.Addf(conferr.Index(key, i), v, "must be %s", l.what)
			}
		}
	}
	if r := c.Unwanted.Refresh; r < MinRefresh || r > MaxRefresh {
		errs.Addf("unwanted.refresh", r, "must be between %v and %v", MinRefresh, MaxRefresh)
	}
	if len(m.Sources) > MaxSources {
		errs.Addf("management.sources", m.Sources, "at most %d entries", MaxSources)
	}
	for i, s := range m.Sources {
		if _, err := netip.ParsePrefix(s); err != nil {
			errs.Add(conferr.Index("management.sources", i), s, "must be an IPv4 or IPv6 prefix, e.g. 192.0.2.0/24")
		}
	}
	return errs.Err()
}

func (r Rate) validate(errs *conferr.Collector, class string) {
	if r.PPS < 0 || r.PPS > MaxPPS {
		errs.Addf(class+".pps", r.PPS, "must be between 0 (unlimited) and %d", MaxPPS)
	} else if r.PPS > 0 && (r.Burst < 1 || r.Burst > MaxPPS) {
		errs.Addf(class+".burst", r.Burst, "must be between 1 and %d packets when pps is set", MaxPPS)
	}
	if r.Bytes < 0 || r.Bytes > MaxBytes {
		errs.Addf(class+".bytes", r.Bytes, "must be between 0 (unlimited) and %d bytes per second", MaxBytes)
	} else if r.Bytes > 0 && (r.BurstBytes < MinBurstBytes || r.BurstBytes > MaxBytes) {
		errs.Addf(class+".burst_bytes", r.BurstBytes, "must be between %d (a 64 KiB super-frame) and %d when bytes is set", MinBurstBytes, MaxBytes)
	}
}

// Snapshot is what one queue's classifier, policers and reserves did.
type Snapshot struct {
	// Passed and Policed count frames per class, in class order.
	Passed  [NumClasses]uint64 `json:"passed"`
	Policed [NumClasses]uint64 `json:"policed"`
	// Policing names the classes whose policer refused a frame within
	// the last PolicingWindow.
	Policing []string `json:"policing"`
	// ToKernelRoom counts frames the app freed for want of room in its
	// to_kernel ring, per class: default ones above the reserve, control
	// and neighbour ones with the reserve full too (mode ring, an app of
	// kbridge.h version 6; it knows no management match, so management
	// frames count as default). FromKernelRoom is the same for kbridge's
	// enqueue to the app (from_kernel ring, or the app's RX vring).
	ToKernelRoom   [NumClasses]uint64 `json:"to_kernel_dropped_for_room"`
	FromKernelRoom [NumClasses]uint64 `json:"from_kernel_dropped_for_room"`
	// ToKernelReserved and FromKernelReserved count the control and
	// neighbour frames that went into the reserve.
	ToKernelReserved   uint64 `json:"to_kernel_reserved"`
	FromKernelReserved uint64 `json:"from_kernel_reserved"`
	// Unparsed counts frames whose headers could not be read to their
	// end, by reason (Unparsed[Parsed] stays 0).
	Unparsed [NumWhys]uint64 `json:"unparsed"`
	// Unwanted counts the frames classed unwanted by reason
	// (UnwantedWhyNames), passed or policed.
	Unwanted [NumUnwantedWhys]uint64 `json:"unwanted"`
}

// PolicingWindow is how recent a refusal makes a class "being policed".
const PolicingWindow = time.Second

// Package xdpconfig is mode xdp's configuration as plain data (the xdp:
// section): Config, its defaults and its validation, the fast-path rules
// parsed. It touches no system state and imports no BPF or netlink
// library, so that package config, which embeds it, stays plain data too;
// package xdp attaches what it describes.
package xdpconfig

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/internal/limits"
)

// ConfigKey is the key of this section in kbridge's YAML; field names in
// validation errors start with it.
const ConfigKey = "xdp"

// Mode selects how the programs are attached.
type Mode string

const (
	// ModeAuto tries native (driver) XDP and falls back to generic XDP
	// with a warning when the driver refuses.
	ModeAuto Mode = "auto"
	// ModeNative insists on driver XDP; Attach fails with ErrNotSupported
	// when the driver lacks it.
	ModeNative Mode = "native"
	// ModeGeneric uses generic (SKB) XDP: works on any device, costs an
	// skb per frame.
	ModeGeneric Mode = "generic"
)

// Loader says who attaches kbridge_steer to the NIC.
type Loader string

const (
	// LoaderKbridge: Attach attaches kbridge_steer to the NIC itself.
	LoaderKbridge Loader = "kbridge"
	// LoaderPMD: the DPDK app's net_af_xdp loads kbridge's object
	// (xdp_prog=FILE) and attaches it; kbridge prepares the pinned maps,
	// the exception veth and the return program, and leaves the NIC alone.
	LoaderPMD Loader = "pmd"
)

// Fallback is what kbridge_steer does with a fast-path frame when no AF_XDP
// socket is bound to the frame's rx queue.
type Fallback string

const (
	FallbackException Fallback = "exception" // hand it to the kernel via kb0
	FallbackDrop      Fallback = "drop"
	FallbackPass      Fallback = "pass" // XDP_PASS: the NIC's own stack sees it
)

// NAPI selects how kb0 gets the NAPI context that native redirects into
// its veth peer need.
type NAPI string

const (
	NAPIGRO NAPI = "gro" // enable GRO on kb0 (no program on kb0)
	NAPIXDP NAPI = "xdp" // attach an XDP_PASS program to kb0
)

// DefaultPinRoot is where bpffs is mounted and where libbpf (and so DPDK
// 22.11's net_af_xdp) looks for maps pinned by name.
const DefaultPinRoot = "/sys/fs/bpf"

// MaxRules is the number of fast-path rules the program holds.
const MaxRules = 64

// Config describes one XDP path. The zero value of every optional field
// selects the documented default.
type Config struct {
	// NIC is the interface the DPDK app's AF_XDP sockets use. Required.
	NIC string `yaml:"nic" mapstructure:"nic" json:"nic"`
	// Exception is the kernel-side interface, the inner veth end. Default "kb0".
	Exception string `yaml:"exception" mapstructure:"exception" json:"exception"`
	// ExceptionPeer is the outer veth end the NIC redirects into.
	// Default: Exception + "-x".
	ExceptionPeer string `yaml:"exception_peer" mapstructure:"exception_peer" json:"exception_peer"`
	// Mode is auto (default), native or generic.
	Mode Mode `yaml:"mode" mapstructure:"mode" json:"mode"`
	// Loader is kbridge (default) or pmd.
	Loader Loader `yaml:"loader" mapstructure:"loader" json:"loader"`
	// FastPath lists the flows that go to the AF_XDP sockets. A frame is
	// fast path when any rule matches; a rule matches when all its set
	// fields match.
	FastPath []Rule `yaml:"fast_path" mapstructure:"fast_path" json:"fast_path"`
	// XSKFallback: exception (default), drop or pass.
	XSKFallback Fallback `yaml:"xsk_fallback" mapstructure:"xsk_fallback" json:"xsk_fallback"`
	// PinPath is the bpffs directory for the maps. Default
	// /sys/fs/bpf/kbridge/<nic>; with loader pmd it must be /sys/fs/bpf.
	PinPath string `yaml:"pin_path" mapstructure:"pin_path" json:"pin_path"`
	// ObjectFile is where Attach writes the BPF object for the PMD's
	// xdp_prog= devarg. Default with loader pmd: /run/kbridge/xdp-<nic>.o;
	// otherwise not written unless set.
	ObjectFile string `yaml:"object_file" mapstructure:"object_file" json:"object_file"`
	// MAC of kb0. Default: the NIC's MAC, so that the NIC needs no
	// promiscuous mode to receive kb0's traffic.
	MAC string `yaml:"mac" mapstructure:"mac" json:"mac"`
	// MTU of kb0 and its peer. Default: the NIC's MTU.
	MTU int `yaml:"mtu" mapstructure:"mtu" json:"mtu"`
	// Addresses (CIDR) to put on kb0.
	Addresses []string `yaml:"addresses" mapstructure:"addresses" json:"addresses"`
	// Promisc forces the NIC into promiscuous mode. It is also turned on
	// when MAC differs from the NIC's. Close restores the previous state.
	Promisc bool `yaml:"promisc" mapstructure:"promisc" json:"promisc"`
	// NAPI is gro (default) or xdp; see the NAPI type.
	NAPI NAPI `yaml:"napi" mapstructure:"napi" json:"napi"`

	// KeepVeth leaves the exception veth in place at Close (kbridge's
	// interface.on_stop: keep), for the next Attach to take as it is.
	KeepVeth bool `yaml:"-" mapstructure:"-" json:"-"`

	// Logger receives warnings (e.g. the fallback to generic mode).
	// Default slog.Default().
	Logger *slog.Logger `yaml:"-" mapstructure:"-" json:"-"`
}

// Rule selects fast-path frames. At least one field must be set; a frame
// matches when every field that is set matches.
type Rule struct {
	// Proto is "tcp" or "udp".
	Proto string `yaml:"proto" mapstructure:"proto" json:"proto"`
	// Port is one destination port; needs Proto.
	Port int `yaml:"port" mapstructure:"port" json:"port"`
	// Ports is an inclusive destination port range "lo-hi" (or one port as
	// a string); needs Proto. A bare YAML number belongs in Port: kbridge
	// decodes YAML strictly, without turning numbers into strings.
	Ports string `yaml:"ports" mapstructure:"ports" json:"ports"`
	// Dst is a destination IPv4/IPv6 address or prefix.
	Dst string `yaml:"dst" mapstructure:"dst" json:"dst"`
	// DstMAC is a destination MAC address.
	DstMAC string `yaml:"dst_mac" mapstructure:"dst_mac" json:"dst_mac"`
}

// WithDefaults returns a copy of c with every empty optional field set to
// its default.
func (c Config) WithDefaults() Config {
	if c.Exception == "" {
		c.Exception = "kb0"
	}
	if c.ExceptionPeer == "" {
		c.ExceptionPeer = c.Exception + "-x"
	}
	if c.Mode == "" {
		c.Mode = ModeAuto
	}
	if c.Loader == "" {
		c.Loader = LoaderKbridge
	}
	if c.XSKFallback == "" {
		c.XSKFallback = FallbackException
	}
	if c.NAPI == "" {
		c.NAPI = NAPIGRO
	}
	if c.PinPath == "" {
		if c.Loader == LoaderPMD {
			c.PinPath = DefaultPinRoot
		} else {
			c.PinPath = path.Join(DefaultPinRoot, "kbridge", c.NIC)
		}
	}
	if c.ObjectFile == "" && c.Loader == LoaderPMD {
		c.ObjectFile = "/run/kbridge/xdp-" + c.NIC + ".o"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks c after applying defaults and returns every problem found,
// each a *conferr.FieldError naming the field and the value. The errors
// match conferr.ErrInvalid (xdp.ErrInvalidConfig). It touches no system
// state.
func (c Config) Validate() error {
	c = c.WithDefaults()
	v := validator{Collector: conferr.Collector{Prefix: ConfigKey}}
	v.ifname("nic", c.NIC)
	v.ifname("exception", c.Exception)
	v.ifname("exception_peer", c.ExceptionPeer)
	if c.NIC != "" && (c.NIC == c.Exception || c.NIC == c.ExceptionPeer) {
		v.Add("nic", c.NIC, "must differ from exception and exception_peer")
	}
	if c.Exception == c.ExceptionPeer {
		v.Add("exception_peer", c.ExceptionPeer, "must differ from exception")
	}
	oneOf(&v, "mode", c.Mode, ModeAuto, ModeNative, ModeGeneric)
	oneOf(&v, "loader", c.Loader, LoaderKbridge, LoaderPMD)
	oneOf(&v, "xsk_fallback", c.XSKFallback, FallbackException, FallbackDrop, FallbackPass)
	oneOf(&v, "napi", c.NAPI, NAPIGRO, NAPIXDP)

	if !filepath.IsAbs(c.PinPath) || filepath.Clean(c.PinPath) != c.PinPath {
		v.Add("pin_path", c.PinPath, "must be a clean absolute path on a bpf filesystem")
	} else if c.Loader == LoaderPMD && c.PinPath != DefaultPinRoot {
		v.Add("pin_path", c.PinPath, "with loader pmd it must be "+DefaultPinRoot+
			": DPDK 22.11's libbpf looks for maps pinned by name only there")
	}
	if c.ObjectFile != "" && !filepath.IsAbs(c.ObjectFile) {
		v.Add("object_file", c.ObjectFile, "must be an absolute path")
	}
	if c.MAC != "" {
		if _, err := ParseUnicastMAC(c.MAC); err != nil {
			v.Add("mac", c.MAC, err.Error())
		}
	}
	// No user-space buffer holds kb0's frames, so the kernel's bound
	// applies here, not limits.MaxMTU.
	if c.MTU != 0 && (c.MTU < limits.MinMTU || c.MTU > limits.MaxKernelMTU) {
		v.Addf("mtu", c.MTU, "out of range %d-%d (0 means the NIC's MTU)", limits.MinMTU, limits.MaxKernelMTU)
	}
	for i, a := range c.Addresses {
		if _, err := netip.ParsePrefix(a); err != nil {
			v.Add(conferr.Index("addresses", i), a, "not an address with prefix length, e.g. 198.18.0.2/24")
		}
	}
	if len(c.FastPath) > MaxRules {
		v.Add("fast_path", fmt.Sprintf("%d rules", len(c.FastPath)), fmt.Sprintf("at most %d rules", MaxRules))
	}
	for i, r := range c.FastPath {
		if _, err := ParseRule(r); err != nil {
			v.Include(conferr.Prefix(RuleKey(i), err))
		}
	}
	return v.Err()
}

type validator struct{ conferr.Collector }

func (v *validator) ifname(field, name string) {
	if name == "" {
		v.Add(field, nil, "required") // "xdp.nic: required" says it all
	} else if err := limits.CheckIfName(name); err != nil {
		v.Add(field, name, err.Error())
	}
}

func oneOf[T ~string](v *validator, field string, value T, allowed ...T) {
	if slices.Contains(allowed, value) {
		return
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	v.Add(field, value, "must be one of "+strings.Join(names, ", "))
}

// ParseUnicastMAC parses an interface's MAC address: 48 bits, not
// multicast.
func ParseUnicastMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("not a 48-bit MAC address")
	}
	if mac[0]&1 != 0 {
		return nil, fmt.Errorf("multicast MAC cannot be an interface address")
	}
	return mac, nil
}

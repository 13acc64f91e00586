package xdpconfig

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kbridge/kbridge/internal/conferr"
)

// The IP protocol numbers a rule's proto names.
const (
	ProtoTCP = 6
	ProtoUDP = 17
)

// Match is one Rule parsed: what kbridge_steer compares, in plain values.
// A zero field matches any frame.
type Match struct {
	Proto          uint8            // ProtoTCP or ProtoUDP; 0: any
	PortLo, PortHi uint16           // an inclusive destination port range, with Proto; 0: any
	Dst            netip.Prefix     // a destination address or prefix; invalid: any
	DstMAC         net.HardwareAddr // 48 bits; nil: any
}

// ParseRule parses one YAML rule. The returned error is a *FieldError whose
// Key is relative to the rule ("ports"), for conferr.Prefix to complete
// (RuleKey).
func ParseRule(r Rule) (Match, error) {
	var m Match
	bad := func(field string, value any, msg string) (Match, error) {
		return Match{}, conferr.New(field, value, msg)
	}
	if r == (Rule{}) {
		return bad("", nil, "empty rule would match every frame: set proto, port(s), dst or dst_mac")
	}

	switch strings.ToLower(r.Proto) {
	case "":
	case "tcp":
		m.Proto = ProtoTCP
	case "udp":
		m.Proto = ProtoUDP
	default:
		return bad("proto", r.Proto, "must be tcp or udp")
	}

	switch {
	case r.Port != 0 && r.Ports != "":
		return bad("port", r.Port, "set port or ports, not both")
	case r.Port != 0:
		if m.Proto == 0 {
			return bad("port", r.Port, "port needs proto: tcp or udp")
		}
		if r.Port < 1 || r.Port > 65535 {
			return bad("port", r.Port, "port out of range 1-65535")
		}
		m.PortLo, m.PortHi = uint16(r.Port), uint16(r.Port)
	case r.Ports != "":
		if m.Proto == 0 {
			return bad("ports", r.Ports, "ports need proto: tcp or udp")
		}
		lo, hi, err := parsePortRange(r.Ports)
		if err != nil {
			return bad("ports", r.Ports, err.Error())
		}
		m.PortLo, m.PortHi = lo, hi
	}

	if r.Dst != "" {
		p, err := parseDst(r.Dst)
		if err != nil {
			return bad("dst", r.Dst, err.Error())
		}
		m.Dst = p
	}

	if r.DstMAC != "" {
		mac, err := net.ParseMAC(r.DstMAC)
		if err != nil || len(mac) != 6 {
			return bad("dst_mac", r.DstMAC, "not a 48-bit MAC address")
		}
		m.DstMAC = mac
	}
	return m, nil
}

func parsePortRange(s string) (lo, hi uint16, err error) {
	loS, hiS, isRange := strings.Cut(s, "-")
	l, err := parsePort(loS)
	if err != nil {
		return 0, 0, err
	}
	h := l
	if isRange {
		if h, err = parsePort(hiS); err != nil {
			return 0, 0, err
		}
		if h < l {
			return 0, 0, fmt.Errorf("range is reversed: %d > %d", l, h)
		}
	}
	return l, h, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("not a port or port range like 5000-5010")
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port out of range 1-65535")
	}
	return uint16(n), nil
}

// parseDst accepts an address (a /32 or /128) or a prefix. A prefix with
// host bits set is refused rather than silently masked: it is usually a typo
// for a host address or for a different network.
func parseDst(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("not an IPv4 or IPv6 address or prefix")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not an IPv4 or IPv6 address or prefix")
	}
	if p.Addr().Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("IPv4-mapped prefix shorter than /96")
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("host bits set; did you mean %s?", m)
	}
	return p, nil
}

// RuleKey is the key of fast_path[i], the way the YAML spells it.
func RuleKey(i int) string {
	return conferr.Key(ConfigKey, conferr.Index("fast_path", i))
}

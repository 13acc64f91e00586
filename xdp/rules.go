package xdp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kbridge/kbridge/internal/conferr"
)

const (
	ipprotoTCP = 6
	ipprotoUDP = 17
)

// compileRule turns one YAML rule into the program's kb_rule. The returned
// error is a *FieldError whose Key is relative to the rule ("ports"), for
// conferr.Prefix to complete.
func compileRule(r Rule) (steerKbRule, error) {
	var k steerKbRule
	bad := func(field string, value any, msg string) (steerKbRule, error) {
		return steerKbRule{}, conferr.New(field, value, msg)
	}
	if r == (Rule{}) {
		return bad("", nil, "empty rule would match every frame: set proto, port(s), dst or dst_mac")
	}

	switch strings.ToLower(r.Proto) {
	case "":
	case "tcp":
		k.Proto = ipprotoTCP
		k.Match |= steerKbMatchKB_MATCH_PROTO
	case "udp":
		k.Proto = ipprotoUDP
		k.Match |= steerKbMatchKB_MATCH_PROTO
	default:
		return bad("proto", r.Proto, "must be tcp or udp")
	}

	switch {
	case r.Port != 0 && r.Ports != "":
		return bad("port", r.Port, "set port or ports, not both")
	case r.Port != 0:
		if k.Proto == 0 {
			return bad("port", r.Port, "port needs proto: tcp or udp")
		}
		if r.Port < 1 || r.Port > 65535 {
			return bad("port", r.Port, "port out of range 1-65535")
		}
		k.PortLo, k.PortHi = uint16(r.Port), uint16(r.Port)
		k.Match |= steerKbMatchKB_MATCH_PORTS
	case r.Ports != "":
		if k.Proto == 0 {
			return bad("ports", r.Ports, "ports need proto: tcp or udp")
		}
		lo, hi, err := parsePortRange(r.Ports)
		if err != nil {
			return bad("ports", r.Ports, err.Error())
		}
		k.PortLo, k.PortHi = lo, hi
		k.Match |= steerKbMatchKB_MATCH_PORTS
	}

	if r.Dst != "" {
		p, err := parseDst(r.Dst)
		if err != nil {
			return bad("dst", r.Dst, err.Error())
		}
		setPrefix(&k, p)
		k.Match |= steerKbMatchKB_MATCH_DST
	}

	if r.DstMAC != "" {
		mac, err := net.ParseMAC(r.DstMAC)
		if err != nil || len(mac) != 6 {
			return bad("dst_mac", r.DstMAC, "not a 48-bit MAC address")
		}
		k.Dmac = macToUint64(mac)
		k.Match |= steerKbMatchKB_MATCH_MAC
	}
	return k, nil
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

// setPrefix stores address and mask as the program reads them: raw network
// byte order words, compared with a plain AND.
func setPrefix(k *steerKbRule, p netip.Prefix) {
	addr := p.Addr().AsSlice()
	mask := net.CIDRMask(p.Bits(), len(addr)*8)
	k.Family = 6
	if p.Addr().Is4() {
		k.Family = 4
	}
	for i := 0; i < len(addr)/4; i++ {
		k.Addr[i] = binary.NativeEndian.Uint32(addr[i*4:])
		k.Mask[i] = binary.NativeEndian.Uint32(mask[i*4:])
	}
}

// macToUint64 matches the program's packing: first octet most significant.
func macToUint64(mac net.HardwareAddr) uint64 {
	var v uint64
	for _, b := range mac[:6] {
		v = v<<8 | uint64(b)
	}
	return v
}

// compileRules builds the whole kb_config value.
func compileRules(rules []Rule, fb Fallback) (*steerKbConfig, error) {
	if len(rules) > MaxRules {
		return nil, conferr.Errorf(conferr.Key(ConfigKey, "fast_path"), fmt.Sprintf("%d rules", len(rules)),
			"at most %d rules", MaxRules)
	}
	cfg := &steerKbConfig{Nrules: uint32(len(rules))}
	switch fb {
	case FallbackException, "":
		cfg.Fallback = steerKbFallbackKB_FALLBACK_EXCEPTION
	case FallbackDrop:
		cfg.Fallback = steerKbFallbackKB_FALLBACK_DROP
	case FallbackPass:
		cfg.Fallback = steerKbFallbackKB_FALLBACK_PASS
	default:
		return nil, conferr.New(conferr.Key(ConfigKey, "xsk_fallback"), fb, "must be one of exception, drop, pass")
	}
	for i, r := range rules {
		k, err := compileRule(r)
		if err != nil {
			return nil, conferr.Prefix(ruleKey(i), err)
		}
		cfg.Rules[i] = k
	}
	return cfg, nil
}

// ruleKey is the key of fast_path[i], the way the YAML spells it.
func ruleKey(i int) string {
	return conferr.Key(ConfigKey, conferr.Index("fast_path", i))
}

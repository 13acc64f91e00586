package xdp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/xdp/xdpconfig"
)

// compileRule turns one YAML rule into the program's kb_rule
// (xdpconfig.ParseRule's Match, packed). The returned error is a
// *FieldError whose Key is relative to the rule ("ports"), for
// conferr.Prefix to complete.
func compileRule(r Rule) (steerKbRule, error) {
	m, err := xdpconfig.ParseRule(r)
	if err != nil {
		return steerKbRule{}, err
	}
	var k steerKbRule
	if m.Proto != 0 {
		k.Proto = m.Proto
		k.Match |= steerKbMatchKB_MATCH_PROTO
	}
	if m.PortLo != 0 {
		k.PortLo, k.PortHi = m.PortLo, m.PortHi
		k.Match |= steerKbMatchKB_MATCH_PORTS
	}
	if m.Dst.IsValid() {
		setPrefix(&k, m.Dst)
		k.Match |= steerKbMatchKB_MATCH_DST
	}
	if m.DstMAC != nil {
		k.Dmac = macToUint64(m.DstMAC)
		k.Match |= steerKbMatchKB_MATCH_MAC
	}
	return k, nil
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
			return nil, conferr.Prefix(xdpconfig.RuleKey(i), err)
		}
		cfg.Rules[i] = k
	}
	return cfg, nil
}

package xdp

import "testing"

// compileRule packs addresses and MACs the way the program reads them.
func TestCompileRule(t *testing.T) {
	k, err := compileRule(Rule{Proto: "udp", Ports: "4789", Dst: "198.18.0.0/15", DstMAC: "02:00:00:00:00:42"})
	if err != nil {
		t.Fatal(err)
	}
	if k.Match != steerKbMatchKB_MATCH_PROTO|steerKbMatchKB_MATCH_PORTS|steerKbMatchKB_MATCH_DST|steerKbMatchKB_MATCH_MAC {
		t.Errorf("match bits %#x", k.Match)
	}
	if k.Proto != 17 || k.PortLo != 4789 || k.PortHi != 4789 || k.Family != 4 || k.Dmac != 0x020000000042 {
		t.Errorf("rule %+v", k)
	}
	// 198.18.0.0/15 in memory order: c6 12 00 00 / ff fe 00 00.
	var a, m [4]byte
	for i := range 4 {
		a[i] = byte(k.Addr[0] >> (8 * i))
		m[i] = byte(k.Mask[0] >> (8 * i))
	}
	if a != [4]byte{198, 18, 0, 0} || m != [4]byte{255, 254, 0, 0} {
		t.Errorf("addr % x mask % x", a, m)
	}
}

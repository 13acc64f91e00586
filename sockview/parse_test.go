package sockview

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
)

// attr is a netlink attribute of type t with value v.
func attr(t uint16, v []byte) []byte {
	b := make([]byte, 4, 4+len(v)+3)
	binary.NativeEndian.PutUint16(b, uint16(4+len(v)))
	binary.NativeEndian.PutUint16(b[2:], t)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

func TestAnInetDiagAnswerGivesPortsAndAddressesIPv4MappedAsIPv4(t *testing.T) {
	b := make([]byte, inetDiagMsgLen)
	b[0], b[1] = afInet6, 1 // established
	binary.BigEndian.PutUint16(b[4:], 179)
	binary.BigEndian.PutUint16(b[6:], 40000)
	copy(b[8:], netip.MustParseAddr("::ffff:198.18.0.2").AsSlice())
	copy(b[24:], netip.MustParseAddr("::ffff:198.18.0.1").AsSlice())
	s, err := parseInet(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Session{Local: netip.MustParseAddrPort("198.18.0.2:179"), Remote: netip.MustParseAddrPort("198.18.0.1:40000")}
	if s.session() != want {
		t.Errorf("session %v, want %v", s.session(), want)
	}
	if _, err := parseInet(b[:40]); err == nil {
		t.Error("a short answer was read")
	}
}

func TestALocalRouteIsTheHostsOwnAndOthersAreNot(t *testing.T) {
	route := func(family, bits, typ byte, dst string) []byte {
		b := make([]byte, 12)
		b[0], b[1], b[7] = family, bits, typ
		return append(b, attr(rtaDst, netip.MustParseAddr(dst).AsSlice())...)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"a local IPv4 address", route(afInet, 32, rtnLocal, "198.18.0.2"), "198.18.0.2/32"},
		{"an AnyIP prefix", route(afInet, 24, rtnLocal, "198.18.99.0"), "198.18.99.0/24"},
		{"a local IPv6 address", route(afInet6, 128, rtnLocal, "2001:2::2"), "2001:2::2/128"},
		{"a broadcast route", route(afInet, 32, 3, "198.18.0.255"), ""},
		{"a unicast route", route(afInet, 24, 1, "198.18.0.0"), ""},
	} {
		p, ok := parseLocalRoute(rtmNewRoute, c.b)
		if got := ""; ok {
			got = p.String()
			if got != c.want {
				t.Errorf("%s: %s, want %q", c.name, got, c.want)
			}
		} else if c.want != "" {
			t.Errorf("%s: not local, want %s", c.name, c.want)
		}
	}
}

// insns is a classic BPF program as PACKET_DIAG_FILTER carries it.
func insns(prog ...Insn) []byte {
	var b []byte
	for _, in := range prog {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

func TestAPacketSocketTakesFramesWhenItListensToTheInterfaceForIP(t *testing.T) {
	sock := func(typ byte, proto uint16, ifindex uint32, filter []byte) []byte {
		b := make([]byte, packetDiagMsgLen)
		b[0], b[1] = 17, typ
		binary.NativeEndian.PutUint16(b[2:], proto)
		binary.NativeEndian.PutUint32(b[4:], 4242)
		info := append(u32(ifindex), make([]byte, 20)...)
		b = append(append(b, attr(packetDiagInfo, info)...), attr(packetDiagUID, u32(0))...)
		if filter != nil {
			b = append(b, attr(packetDiagFilter, filter)...)
		}
		return b
	}
	acceptAll := insns(Insn{Code: 0x06, K: 262144})                                      // ret #262144
	ancillary := insns(Insn{Code: 0x20, K: 0xfffff000 + 4}, Insn{Code: 0x06, K: 262144}) // ld #proto (SKF_AD_OFF+4)
	for _, c := range []struct {
		name           string
		b              []byte
		gets, filtered bool
	}{
		{"tcpdump -i kb0", sock(3, ethPAll, 7, nil), true, false},
		{"tcpdump -i any", sock(3, ethPAll, 0, nil), true, false},
		{"IPv4 on kb0", sock(3, ethPIP, 7, nil), true, false},
		{"IPv6 on every interface", sock(3, ethPIPv6, 0, nil), true, false},
		{"every protocol on another interface", sock(3, ethPAll, 8, nil), false, false},
		{"LLDP on kb0", sock(3, 0x88cc, 7, nil), false, false},
		{"no protocol (bound to none)", sock(3, 0, 7, nil), false, false},
		{"a filter the burst core runs", sock(3, ethPAll, 7, acceptAll), true, true},
		{"a filter reading ancillary data", sock(3, ethPAll, 7, ancillary), true, false},
	} {
		k, f, ok := parsePacket(c.b, []int{7})
		switch {
		case ok != c.gets:
			t.Errorf("%s: gets the interface's IP frames: %v, want %v", c.name, ok, c.gets)
		case ok && c.filtered && (f == nil || len(f.Insns) != 1 || f.Proto != ethPAll || f.Dgram):
			t.Errorf("%s: filter %+v, want the one-instruction program of a SOCK_RAW socket", c.name, f)
		case ok && !c.filtered && (f != nil || !strings.Contains(k.what, "inode 4242")):
			t.Errorf("%s: filter %+v, taker %q; want it to take every frame", c.name, f, k.what)
		}
	}
	// A process bridging several interfaces (a port set) has one view:
	// tcpdump on any of them takes frames.
	if _, _, ok := parsePacket(sock(3, ethPAll, 8, nil), []int{7, 8}); !ok {
		t.Errorf("tcpdump on the second of the process's interfaces: not seen")
	}
	if _, f, _ := parsePacket(sock(sockDgram, ethPIP, 0, acceptAll), []int{7}); f == nil || !f.Dgram || f.Proto != ethPIP {
		t.Errorf("a SOCK_DGRAM socket's filter: %+v", f)
	}
}

func TestANATChainOnPreroutingTakesFrames(t *testing.T) {
	chain := func(fam byte, typ string, hook uint32) []byte {
		b := []byte{fam, 0, 0, 0}
		b = append(b, attr(nftaChainTable, []byte("t\x00"))...)
		b = append(b, attr(nftaChainName, []byte("c\x00"))...)
		b = append(b, attr(nftaChainHook|0x8000, attr(nftaHookHooknum, binary.BigEndian.AppendUint32(nil, hook)))...)
		return append(b, attr(nftaChainType, []byte(typ+"\x00"))...)
	}
	msg := uint16(nfnlSubsysNFTables<<8 | nftMsgNewChain)
	if k, ok := parseNATChain(msg, chain(nfprotoINet, "nat", nfInetPreRouting)); !ok || !strings.Contains(k.what, "inet t c") {
		t.Errorf("an inet nat chain on prerouting: %v %q", ok, k.what)
	}
	for name, b := range map[string][]byte{
		"a filter chain on prerouting": chain(nfprotoIPv4, "filter", nfInetPreRouting),
		"a nat chain on postrouting":   chain(nfprotoIPv4, "nat", 4),
		"a bridge nat chain":           chain(7, "nat", nfInetPreRouting),
	} {
		if _, ok := parseNATChain(msg, b); ok {
			t.Errorf("%s takes frames", name)
		}
	}
}

func TestARawSocketOfTCPOrUDPTakesItsProtocol(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
   1: 00000000:0001 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 100 2 0000000000000000 0
  17: 00000000:0011 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 101 2 0000000000000000 0
   6: 00000000000000000000000000000000:0006 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 102 2 0000000000000000 0
`
	got := parseRaw(table, "net/raw")
	if len(got) != 2 || got[0].proto != protoUDP || !strings.Contains(got[0].what, "inode 101") || got[1].proto != protoTCP {
		t.Errorf("got %+v, want UDP (inode 101) and TCP, not ICMP", got)
	}
	if off := got.off(protoUDP); !strings.Contains(off, "raw socket of UDP") || strings.Contains(off, "TCP") {
		t.Errorf("UDP off %q", off)
	}
}

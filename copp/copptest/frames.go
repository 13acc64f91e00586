// Package copptest builds the frames the control-plane classifier's tests
// send: Ethernet with VLAN tags, IPv4 and IPv6 with extension headers, the
// first bytes of TCP and UDP. Addresses are in 198.18.0.0/15 and
// 2001:db8::/32.
package copptest

import (
	"encoding/binary"
	"net/netip"
)

// Unicast is the destination MAC Ethernet uses when given none.
var Unicast = []byte{0x02, 0, 0, 0, 0, 1}

// Src4 and Src6 are the sources IPv4 and IPv6 packets come from in tests.
var (
	Src4 = [4]byte{198, 18, 0, 2}
	Src6 = [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 2}
)

// Ethernet is a frame to dst (nil: Unicast) with a VLAN tag for each TPID
// in tags, then the ethertype et and payload.
func Ethernet(dst []byte, tags []uint16, et uint16, payload []byte) []byte {
	if dst == nil {
		dst = Unicast
	}
	f := append(make([]byte, 0, 64+len(payload)), dst...)
	f = append(f, 0x02, 0, 0, 0, 0, 2)
	for i, tpid := range tags {
		f = binary.BigEndian.AppendUint16(f, tpid)
		f = binary.BigEndian.AppendUint16(f, uint16(100+i))
	}
	f = binary.BigEndian.AppendUint16(f, et)
	return append(f, payload...)
}

// IPv4 is an IPv4 header (protocol proto, from src, fragment offset
// fragOff in 8-byte units) followed by l4.
func IPv4(proto byte, src [4]byte, fragOff uint16, l4 []byte) []byte {
	h := make([]byte, 20, 20+len(l4))
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(h[6:], fragOff)
	h[8], h[9] = 64, proto
	copy(h[12:], src[:])
	copy(h[16:], []byte{198, 18, 0, 1})
	return append(h, l4...)
}

// IPv6 is an IPv6 header from src, the extension headers ext (each its
// protocol number, then its bytes, the first of which IPv6 overwrites with
// the next header) and an upper-layer header l4 of protocol proto.
func IPv6(proto byte, src [16]byte, ext [][]byte, l4 []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	h[7] = 64
	copy(h[8:], src[:])
	h[24], h[25] = 0x20, 0x01
	nh := proto
	var chain []byte
	for i := len(ext) - 1; i >= 0; i-- {
		e := append([]byte(nil), ext[i][1:]...)
		e[0] = nh
		nh = ext[i][0]
		chain = append(e, chain...)
	}
	h[6] = nh
	h = append(h, chain...)
	binary.BigEndian.PutUint16(h[4:], uint16(len(h)-40+len(l4)))
	return append(h, l4...)
}

// Hops sets an IPv4 packet's TTL or an IPv6 packet's hop limit to n: 255
// proves a packet came from the link it arrived on (GTSM, RFC 5082).
func Hops(ip []byte, n byte) []byte {
	if ip[0]>>4 == 6 {
		ip[7] = n
	} else {
		ip[8] = n
	}
	return ip
}

// To sets an IP packet's destination address.
func To(ip []byte, dst netip.Addr) []byte {
	if ip[0]>>4 == 6 {
		a := dst.As16()
		copy(ip[24:40], a[:])
	} else {
		a := dst.As4()
		copy(ip[16:20], a[:])
	}
	return ip
}

// From sets an IP packet's source address.
func From(ip []byte, src netip.Addr) []byte {
	if ip[0]>>4 == 6 {
		a := src.As16()
		copy(ip[8:24], a[:])
	} else {
		a := src.As4()
		copy(ip[12:16], a[:])
	}
	return ip
}

// Ports is a 20-byte TCP (or, its first 8 bytes, UDP) header's start.
func Ports(sport, dport uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	return b
}

// TCP is a 20-byte TCP header with flags (SYN 0x02, ACK 0x10, ...).
func TCP(sport, dport uint16, flags byte) []byte {
	b := Ports(sport, dport)
	b[13] = flags
	return b
}

// HopByHop is an 8-byte IPv6 hop-by-hop options header (padding only).
var HopByHop = []byte{0, 0, 0, 1, 4, 0, 0, 0, 0}

// Fragment is an IPv6 fragment header at offset off (8-byte units).
func Fragment(off uint16) []byte {
	b := []byte{44, 0, 0, 0, 0, 0, 0, 0, 1}
	binary.BigEndian.PutUint16(b[3:], off<<3)
	return b
}

// ARP is an ARP request, classed neighbor.
func ARP() []byte { return Ethernet(nil, nil, 0x0806, make([]byte, 28)) }

// BGP is a BGP segment to port 179 sent with TTL 255 (GTSM), classed bgp.
func BGP() []byte { return Ethernet(nil, nil, 0x0800, Hops(IPv4(6, Src4, 0, Ports(40000, 179)), 255)) }

// ForgedBGP is a SYN from port 179 to port 80 with TTL 64, as hping3 -s 179
// sends from anywhere: classed default, never bgp.
func ForgedBGP() []byte { return Ethernet(nil, nil, 0x0800, IPv4(6, Src4, 0, TCP(179, 80, 0x02))) }

// UDP is a UDP datagram to a port no class lists, classed default.
func UDP() []byte { return Ethernet(nil, nil, 0x0800, IPv4(17, Src4, 0, Ports(1234, 5678))) }

// SSH is a TCP segment to port 22 with flags: SYN alone (0x02) is classed
// management_syn, anything with ACK (0x10) management.
func SSH(flags byte) []byte {
	return Ethernet(nil, nil, 0x0800, IPv4(6, Src4, 0, TCP(50000, 22, flags)))
}

package vnet

import "encoding/binary"

const (
	ethLen     = 14
	vlanLen    = 4
	etherIPv4  = 0x0800
	etherIPv6  = 0x86dd
	etherVLAN  = 0x8100
	protoTCP   = 6
	ipv4MinLen = 20
	ipv6Len    = 40
	tcpMinLen  = 20
	// maxHdr bounds a header copy: Ethernet with one tag, IPv4 with options
	// or IPv6, TCP with options.
	maxHdr = ethLen + vlanLen + 60 + 60

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
	tcpURG = 0x20
	tcpECE = 0x40
	tcpCWR = 0x80
)

// l2Len returns the Ethernet header length (14, or 18 with one 802.1Q tag)
// and the ethertype behind it, or 0 if b is too short. Stacked tags (QinQ) are
// reported with their outer type, which nothing here handles.
func l2Len(b []byte) (int, uint16) {
	if len(b) < ethLen {
		return 0, 0
	}
	et := binary.BigEndian.Uint16(b[12:])
	if et != etherVLAN {
		return ethLen, et
	}
	if len(b) < ethLen+vlanLen {
		return 0, 0
	}
	return ethLen + vlanLen, binary.BigEndian.Uint16(b[16:])
}

// tcpHdr describes the headers of an Ethernet/IP/TCP frame whose headers all
// lie in one slice.
type tcpHdr struct {
	l2, l3, l4 int  // header lengths
	v6         bool // IPv6 rather than IPv4
	ipLen      int  // the IP packet length the IP header claims
}

func (t *tcpHdr) hlen() int { return t.l2 + t.l3 + t.l4 }

// parseTCP parses b (the first bytes of a frame, at least all its headers) as
// Ethernet + IPv4 without fragmentation or IPv6 with TCP as next header, then
// TCP. ok is false if b is not such a frame or a header does not fit in b.
// IPv4 options are accepted here (opts reports them); callers decide.
func parseTCP(b []byte) (t tcpHdr, opts, ok bool) {
	l2, et := l2Len(b)
	if l2 == 0 {
		return t, false, false
	}
	t.l2 = l2
	ip := b[l2:]
	switch et {
	case etherIPv4:
		if len(ip) < ipv4MinLen || ip[0]>>4 != 4 {
			return t, false, false
		}
		ihl := int(ip[0]&0xf) * 4
		if ihl < ipv4MinLen || len(ip) < ihl || ip[9] != protoTCP {
			return t, false, false
		}
		// MF set or a fragment offset: not a whole TCP segment.
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return t, false, false
		}
		t.l3 = ihl
		t.ipLen = int(binary.BigEndian.Uint16(ip[2:]))
		opts = ihl > ipv4MinLen
	case etherIPv6:
		// Extension headers are not walked: next header must be TCP.
		if len(ip) < ipv6Len || ip[0]>>4 != 6 || ip[6] != protoTCP {
			return t, false, false
		}
		t.v6 = true
		t.l3 = ipv6Len
		t.ipLen = ipv6Len + int(binary.BigEndian.Uint16(ip[4:]))
	default:
		return t, false, false
	}
	tcp := ip[t.l3:]
	if len(tcp) < tcpMinLen {
		return t, false, false
	}
	doff := int(tcp[12]>>4) * 4
	if doff < tcpMinLen || len(tcp) < doff {
		return t, false, false
	}
	t.l4 = doff
	if t.ipLen < t.l3+t.l4 {
		return t, false, false
	}
	return t, opts, true
}

// addrs returns the source and destination address of the IP header at ip.
func addrs(ip []byte, v6 bool) (src, dst []byte) {
	if v6 {
		return ip[8:24], ip[24:40]
	}
	return ip[12:16], ip[16:20]
}

// ipv4Csum recomputes the IPv4 header checksum of ip[:ihl].
func ipv4Csum(ip []byte, ihl int) {
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], Checksum(ip[:ihl], 0))
}

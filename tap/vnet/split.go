package vnet

import "encoding/binary"

type superMode uint8

const (
	modePlain superMode = iota // copied unchanged
	modeCsum                   // one frame, checksum completed
	modeGSO                    // TCP segmentation
)

// Super is a frame read from the TAP (after its vnet header), parsed by Parse
// and cut into N frames by Segment. It holds no reference to the frame, so
// it can live on the stack.
type Super struct {
	mode       superMode
	dataValid  bool // the kernel set DATA_VALID
	v6         bool
	n          int
	hlen       int // l2+l3+l4, computed from the frame
	l2, l3, l4 int
	mss        int
	payload    int
	length     int // frame length
	csumStart  int
	csumOffset int
}

// Parse checks h against pkt, the frame that followed h, and prepares its
// segmentation for links of the given mtu (L3 bytes). h.HdrLen is only a hint
// and is ignored: the header lengths come from the frame. A GSO frame must be
// TCPv4 (IPv4 without fragmentation) or TCPv6 (TCP as the IPv6 next header),
// carry NEEDS_CSUM with csum_start at the TCP header and csum_offset 16, and
// the IP length must match the frame. GSO_ECN and UDP GSO are rejected because
// kbridge does not offer TUN_F_TSO_ECN or USO, so the kernel should never send
// them. If gso_size would make frames longer than mtu, the segment size is cut
// to mtu - IP header - TCP header: the app's link cannot take more.
// A frame without GSO must fit mtu+18 bytes (the size of Segment's dst).
// Every error matches ErrBadHeader.
func Parse(h Hdr, pkt []byte, mtu int) (Super, error) {
	s := Super{length: len(pkt), n: 1}
	if len(pkt) < ethLen {
		return Super{}, errShort
	}
	if h.GSOType == GSONone {
		if len(pkt) > mtu+ethLen+vlanLen {
			return Super{}, errTooLong
		}
		if h.Flags&FlagNeedsCsum == 0 {
			s.dataValid = h.Flags&FlagDataValid != 0
			return s, nil
		}
		start, off := int(h.CsumStart), int(h.CsumOffset)
		if start >= len(pkt) || start+off+2 > len(pkt) {
			return Super{}, errCsumRange
		}
		if off&1 != 0 {
			// A ones-complement sum stored across a word boundary does
			// not check; Linux only ever uses even offsets (TCP 16,
			// UDP 6).
			return Super{}, errCsumOdd
		}
		s.mode = modeCsum
		s.csumStart, s.csumOffset = start, off
		return s, nil
	}
	switch {
	case h.GSOType&GSOECN != 0:
		return Super{}, errGSOECN
	case h.GSOType == GSOUDP || h.GSOType == GSOUDPL4:
		return Super{}, errGSOUDP
	case h.GSOType != GSOTCPv4 && h.GSOType != GSOTCPv6:
		return Super{}, errGSOType
	case h.Flags&FlagNeedsCsum == 0:
		return Super{}, errGSONoCsum
	case h.GSOSize == 0:
		return Super{}, errGSOSize
	}
	if l2, _ := l2Len(pkt); l2 == 0 {
		return Super{}, errL2
	}
	t, _, ok := parseTCP(pkt)
	if !ok {
		return Super{}, errL3
	}
	if t.v6 != (h.GSOType == GSOTCPv6) {
		return Super{}, errL3Version
	}
	if t.l2+t.ipLen != len(pkt) {
		return Super{}, errL3
	}
	if int(h.CsumStart)+int(h.CsumOffset)+2 > len(pkt) {
		return Super{}, errCsumRange
	}
	if int(h.CsumStart) != t.l2+t.l3 || h.CsumOffset != 16 {
		return Super{}, errCsumMismatch
	}
	mss := int(h.GSOSize)
	if lim := mtu - t.l3 - t.l4; mss > lim {
		if lim <= 0 {
			return Super{}, errMTU
		}
		mss = lim
	}
	s.mode = modeGSO
	s.v6 = t.v6
	s.l2, s.l3, s.l4 = t.l2, t.l3, t.l4
	s.hlen = t.hlen()
	s.mss = mss
	s.payload = len(pkt) - s.hlen
	s.n = (s.payload + mss - 1) / mss
	if s.n == 0 {
		// A GSO frame without payload still goes out, once, with its
		// checksum finished.
		s.n = 1
	}
	return s, nil
}

// CsumGood reports whether the L4 checksums of the frames Segment produces
// are known to be right: computed here (GSO, NEEDS_CSUM) or verified by the
// kernel (DATA_VALID). The caller can then mark the mbufs
// RTE_MBUF_F_RX_L4_CKSUM_GOOD and spare the app a software check.
func (s *Super) CsumGood() bool { return s.mode != modePlain || s.dataValid }

// PartialCsum reports a frame whose checksum the kernel left partial
// (NEEDS_CSUM, no GSO): where the sum starts and where, from there, it is
// stored. An app side that finishes it itself (in C, ring/burst_csum.h)
// takes the frame as it is; Segment finishes it otherwise.
func (s *Super) PartialCsum() (start, offset int, ok bool) {
	return s.csumStart, s.csumOffset, s.mode == modeCsum
}

// N is the number of frames Segment produces.
func (s *Super) N() int { return s.n }

// Segment writes output frame k (0 <= k < N) of pkt, the frame given to Parse,
// into dst and returns its length; it returns 0 for k out of range or a dst
// shorter than the frame (at most mtu+18 bytes, as Parse guarantees).
//
// The app sides cut TCP super-frames themselves, in C, straight into the
// app's buffers (ring/burst_cut.h): Segment's GSO cut is the fallback for
// what they refuse (a segment larger than one of the app's buffers) and for
// an app's LRO frame the kernel would not take whole (Queue's writeSplit),
// and the reference the C cut is tested against byte for byte.
//
// For GSO it does what the kernel's TCP segmentation does: headers copied,
// IPv4 ID = original + k with total length and header checksum recomputed,
// IPv6 payload length set, sequence number advanced by k*MSS, FIN and PSH
// kept only on the last frame and CWR only on the first, full TCP checksum.
// For a NEEDS_CSUM frame, which an app side finishes itself where it can
// (PartialCsum), it finishes the checksum whatever the L4 protocol:
// the field already holds the pseudo-header sum, so summing from csum_start
// to the end and storing the inverted result is enough.
func (s *Super) Segment(k int, pkt, dst []byte) int {
	if k < 0 || k >= s.n || len(pkt) != s.length {
		return 0
	}
	switch s.mode {
	case modePlain, modeCsum:
		if len(dst) < len(pkt) {
			return 0
		}
		n := copy(dst, pkt)
		if s.mode == modeCsum {
			f := dst[s.csumStart+s.csumOffset:]
			sum := ^Fold(Sum(dst[s.csumStart:n], 0))
			if sum == 0 {
				// As Linux's skb_checksum_help: 0 means "no checksum"
				// to UDP, and 0xffff is the same value for the others.
				sum = 0xffff
			}
			binary.BigEndian.PutUint16(f, sum)
		}
		return n
	}
	off := k * s.mss
	plen := min(s.mss, s.payload-off)
	n := s.hlen + plen
	if len(dst) < n {
		return 0
	}
	copy(dst, pkt[:s.hlen])
	copy(dst[s.hlen:n], pkt[s.hlen+off:])
	ip := dst[s.l2:]
	tcp := ip[s.l3 : n-s.l2]
	if s.v6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(s.l4+plen))
	} else {
		binary.BigEndian.PutUint16(ip[2:], uint16(s.l3+s.l4+plen))
		binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(k))
		ipv4Csum(ip, s.l3)
	}
	binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+uint32(off))
	if k != s.n-1 {
		tcp[13] &^= tcpFIN | tcpPSH
	}
	if k != 0 {
		tcp[13] &^= tcpCWR
	}
	tcp[16], tcp[17] = 0, 0
	src, dstAddr := addrs(ip, s.v6)
	acc := PseudoHeaderSum(protoTCP, src, dstAddr, len(tcp))
	binary.BigEndian.PutUint16(tcp[16:], Checksum(tcp, acc))
	return n
}

// TSO describes a GSO super-frame for a consumer that segments it itself (a
// DPDK port with TSO): header lengths and segment size. ok is false for
// anything but a TCP super-frame.
func (s *Super) TSO() (l2, l3, l4, mss int, v6, ok bool) {
	if s.mode != modeGSO {
		return 0, 0, 0, 0, false, false
	}
	return s.l2, s.l3, s.l4, s.mss, s.v6, true
}

// maxPadded is the longest frame that may carry Ethernet padding: the
// 60-byte minimum, one VLAN tag added after the padding.
const maxPadded = 60 + vlanLen

// StaleIPLen reports whether a frame of n bytes whose headers lie in seg0 is
// a TCP frame whose IP length falls short of n, the frame too long to be
// padded: an LRO packet whose IP length the NIC did not update. Written as
// it is, the kernel would cut it to that length; ParseLRO takes the frame's.
func StaleIPLen(seg0 []byte, n int) bool {
	if n <= maxPadded {
		return false
	}
	t, _, ok := parseTCP(seg0)
	return ok && t.l2+t.ipLen < n
}

// ParseLRO prepares the software segmentation of pkt, a TCP frame that the
// app's NIC merged (RTE_MBUF_F_RX_LRO) or that a vhost-user frontend sent as
// one TSO packet, from segments of mss bytes: it is Parse for the GSO header
// the frame would have been written with, for a kernel that refuses GSO
// writes. A NIC does not always update the IP length of what it merged (the
// GSO write rewrites it in its header copy); ParseLRO then sets it from the
// frame's length in pkt, which must be the caller's copy. Anything but a
// whole TCP frame (non-TCP, an IPv4 fragment, lengths that do not fit) is an
// error matching ErrBadHeader.
func ParseLRO(pkt []byte, mss uint16, mtu int) (Super, error) {
	t, _, ok := parseTCP(pkt)
	if !ok || len(pkt) < t.hlen() {
		return Super{}, errL3
	}
	if t.l2+t.ipLen != len(pkt) {
		ip := pkt[t.l2:]
		n := len(pkt) - t.l2
		switch {
		case t.v6 && n-ipv6Len <= 0xffff:
			binary.BigEndian.PutUint16(ip[4:], uint16(n-ipv6Len))
		case !t.v6 && n <= 0xffff:
			binary.BigEndian.PutUint16(ip[2:], uint16(n))
		default:
			return Super{}, errL3
		}
	}
	h := Hdr{
		Flags:      FlagNeedsCsum,
		GSOType:    GSOTCPv4,
		GSOSize:    mss,
		HdrLen:     uint16(t.hlen()),
		CsumStart:  uint16(t.l2 + t.l3),
		CsumOffset: 16,
	}
	if t.v6 {
		h.GSOType = GSOTCPv6
	}
	return Parse(h, pkt, mtu)
}

// Package vnettest builds the frames that tests of the offloaded kernel side
// need: Ethernet/IPv4/TCP segments of one flow with correct checksums, and
// the super-frame a TAP with TSO hands over for them.
package vnettest

import (
	"encoding/binary"

	"github.com/kbridge/kbridge/tap/vnet"
)

// TCP flags.
const (
	FIN = 0x01
	SYN = 0x02
	PSH = 0x08
	ACK = 0x10
)

// Flow is one direction of a TCP connection between two hosts.
type Flow struct {
	SrcMAC, DstMAC    [6]byte
	SrcIP, DstIP      [4]byte
	SrcPort, DstPort  uint16
	Ack               uint32
	Window            uint16
	DontFragment, Bad bool // Bad: a wrong TCP checksum
}

// DefaultFlow is a flow inside 198.18.0.0/15.
func DefaultFlow() Flow {
	return Flow{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: [4]byte{198, 18, 0, 1}, DstIP: [4]byte{198, 18, 0, 2},
		SrcPort: 5201, DstPort: 40000, Ack: 7, Window: 65535, DontFragment: true,
	}
}

// Segment returns a frame carrying payload bytes of the stream from seq
// (byte i of the stream is byte(i)), with IPv4 ID id and flags.
func (f Flow) Segment(seq uint32, id uint16, payload int, flags byte) []byte {
	b := make([]byte, 14+20+20+payload)
	copy(b[0:6], f.DstMAC[:])
	copy(b[6:12], f.SrcMAC[:])
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(40+payload))
	binary.BigEndian.PutUint16(ip[4:], id)
	if f.DontFragment {
		ip[6] = 0x40
	}
	ip[8] = 64
	ip[9] = 6 // TCP
	copy(ip[12:16], f.SrcIP[:])
	copy(ip[16:20], f.DstIP[:])
	binary.BigEndian.PutUint16(ip[10:], vnet.Checksum(ip[:20], 0))
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], f.SrcPort)
	binary.BigEndian.PutUint16(tcp[2:], f.DstPort)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], f.Ack)
	tcp[12] = 5 << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:], f.Window)
	for i := range payload {
		tcp[20+i] = byte(int(seq) + i)
	}
	sum := vnet.PseudoHeaderSum(6, ip[12:16], ip[16:20], 20+payload)
	csum := vnet.Checksum(tcp, sum)
	if f.Bad {
		csum ^= 0x5a5a
	}
	binary.BigEndian.PutUint16(tcp[16:], csum)
	return b
}

// Stream returns n segments of mss bytes from seq, IDs from id, ACK on each
// and flags added to the last.
func (f Flow) Stream(seq uint32, id uint16, n, mss int, last byte) [][]byte {
	var out [][]byte
	for k := range n {
		fl := byte(ACK)
		if k == n-1 {
			fl |= last
		}
		out = append(out, f.Segment(seq+uint32(k*mss), id+uint16(k), mss, fl))
	}
	return out
}

// Super returns what a TAP with TSO hands over for Stream(seq, id, n, mss,
// last): the virtio-net header and one frame of n*mss bytes of payload with
// the pseudo-header sum in its TCP checksum field (CHECKSUM_PARTIAL).
func (f Flow) Super(seq uint32, id uint16, n, mss int, last byte) []byte {
	frame := f.Segment(seq, id, n*mss, ACK|last)
	ip := frame[14:]
	sum := vnet.PseudoHeaderSum(6, ip[12:16], ip[16:20], 20+n*mss)
	binary.BigEndian.PutUint16(ip[20+16:], vnet.Fold(sum))
	b := make([]byte, vnet.HdrLen+len(frame))
	vnet.Hdr{
		Flags: vnet.FlagNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: uint16(mss),
		HdrLen: 54, CsumStart: 34, CsumOffset: 16,
	}.Encode(b)
	copy(b[vnet.HdrLen:], frame)
	return b
}

// Partial returns the segment Segment makes as a TAP with checksum offload
// hands it over, behind its virtio_net_hdr: NEEDS_CSUM, the TCP checksum
// field holding only the pseudo-header's sum. Finished, it is Segment's
// frame again.
func (f Flow) Partial(seq uint32, id uint16, payload int, flags byte) []byte {
	frame := f.Segment(seq, id, payload, flags)
	ip := frame[14:]
	sum := vnet.PseudoHeaderSum(6, ip[12:16], ip[16:20], 20+payload)
	binary.BigEndian.PutUint16(ip[20+16:], vnet.Fold(sum))
	b := make([]byte, vnet.HdrLen+len(frame))
	vnet.Hdr{Flags: vnet.FlagNeedsCsum, CsumStart: 34, CsumOffset: 16}.Encode(b)
	copy(b[vnet.HdrLen:], frame)
	return b
}

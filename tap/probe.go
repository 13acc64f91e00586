package tap

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tap/vnet"
)

// probeShortLastSegment writes one coalesced TCP frame whose last segment is
// shorter than gso_size, the shape some kernels refuse with EINVAL
// (e269d79c7d35, backported to 6.6.44 and 6.10.3; fixed by 89add40066f9).
// Tailscale probes the same way at start.
//
// The frame never reaches a socket: its destination MAC is not the
// interface's, so the kernel drops it as PACKET_OTHERHOST, and its addresses
// are in 198.18.0.0/15, the benchmarking range. Only EINVAL is taken as a
// refusal; any other error (the interface is down, say) proves nothing and
// leaves merging on, with the per-write fallback behind it.
func (q *Queue) probeShortLastSegment() error {
	const mss, payload = 100, 150
	frame := make([]byte, vnet.HdrLen+14+20+20+payload)
	vnet.Hdr{
		Flags:      vnet.FlagNeedsCsum,
		GSOType:    vnet.GSOTCPv4,
		HdrLen:     14 + 20 + 20,
		GSOSize:    mss,
		CsumStart:  14 + 20,
		CsumOffset: 16,
	}.Encode(frame)
	eth := frame[vnet.HdrLen:]
	copy(eth[0:6], []byte{0x02, 0x6b, 0x62, 0x00, 0x00, 0x01})  // locally administered, not ours
	copy(eth[6:12], []byte{0x02, 0x6b, 0x62, 0x00, 0x00, 0x02}) // nor anyone's
	binary.BigEndian.PutUint16(eth[12:], 0x0800)
	ip := eth[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+20+payload))
	ip[6] = 0x40 // DF
	ip[8] = 64
	ip[9] = unix.IPPROTO_TCP
	copy(ip[12:16], []byte{198, 19, 255, 254})
	copy(ip[16:20], []byte{198, 19, 255, 253})
	binary.BigEndian.PutUint16(ip[10:], ^ipv4HeaderSum(ip[:20]))
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], 9)
	binary.BigEndian.PutUint16(tcp[2:], 9)
	tcp[12] = 5 << 4
	tcp[13] = 0x10 // ACK
	_, err := unix.Write(q.fd, frame)
	if err == unix.EINVAL {
		return err
	}
	if err != nil {
		q.log.Debug("coalesced-write probe inconclusive", "err", err)
	}
	return nil
}

func ipv4HeaderSum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

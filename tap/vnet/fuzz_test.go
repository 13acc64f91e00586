package vnet

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// burstFromBytes turns fuzz input into a burst. The first byte picks the
// family; then each 4-byte record makes one packet: mostly well-formed TCP
// segments of three flows (so that merges happen and are checked), with the
// fuzzer choosing payload sizes, flags, sequence gaps, bad checksums, header
// changes, LRO and mbuf cuts; a record with the top bit set instead takes
// raw bytes from the input as a frame.
func burstFromBytes(data []byte) []Packet {
	if len(data) == 0 {
		return nil
	}
	mode := data[0]
	data = data[1:]
	var flows [3]spec
	for i := range flows {
		flows[i] = base()
		flows[i].sport = uint16(1000 + i)
		flows[i].v6 = mode&1 != 0
		if mode&2 != 0 {
			flows[i].vlan = 42
		}
		if mode&4 != 0 {
			flows[i].opts = nil
		}
		flows[i].seq = uint32(mode) << 24
	}
	var pkts []Packet
	for len(data) >= 4 && len(pkts) < 128 {
		op, size, fl, cut := data[0], data[1], data[2], data[3]
		data = data[4:]
		var f []byte
		lro := uint16(0)
		csumOK := false
		if op&0x80 != 0 {
			n := min(int(size)*4, len(data))
			f = append([]byte(nil), data[:n]...)
			data = data[n:]
		} else {
			s := &flows[int(op&3)%3]
			s.payload = payload(int(size)%176*8+int(op>>5&1), op)
			s.flags = tcpACK
			switch {
			case fl < 0xc0:
			case fl < 0xe0:
				s.flags |= tcpPSH
			default:
				s.flags = fl & 0x3f
			}
			if op&4 != 0 {
				s.seq += uint32(cut) // a gap, maybe
			}
			p := *s
			p.badCsum = op&8 != 0 && fl&1 != 0
			if op&16 != 0 {
				switch fl & 3 {
				case 0:
					p.ttl--
				case 1:
					p.tos ^= 1
				case 2:
					p.window++
				case 3:
					p.ack++
				}
			}
			if op&0x40 != 0 && fl&2 != 0 {
				p.payload = payload(int(size)*16, 1)
				lro = uint16(cut)*8 + 256 // few segments: keeps each run fast
			}
			// The app's NIC is trusted with CsumOK, so it is only set
			// where it tells the truth.
			csumOK = op&0x60 == 0x60 && fl&4 == 0 && !p.badCsum
			f = build(p)
			s.seq += uint32(len(p.payload))
			s.id++
			if lro != 0 && len(p.payload) > int(lro) {
				// The IDs of the frames the NIC merged, as a
				// sender numbering its segments would have.
				s.id += uint16((len(p.payload) - 1) / int(lro))
			}
		}
		var pkt Packet
		if cut&0x80 != 0 && len(f) > 0 {
			c1 := int(cut&0x7f) * 13 % len(f)
			c2 := c1 + (len(f)-c1)/2
			pkt = chain(f, c1, c2)
		} else {
			pkt = Packet{Segs: [][]byte{f}, Len: len(f)}
		}
		pkt.LROSize = lro
		pkt.CsumOK = csumOK
		pkts = append(pkts, pkt)
	}
	return pkts
}

func FuzzCoalesce(f *testing.F) {
	f.Add([]byte{0, 0, 125, 0, 0, 1, 125, 0, 0, 0, 125, 0, 0, 0, 100, 0xd0, 0})
	f.Add([]byte{1, 0, 125, 0, 0x80, 0, 125, 0, 0x80, 0, 125, 0, 0})
	f.Add([]byte{2, 0, 125, 0, 0, 0x08, 125, 1, 0, 0, 125, 0, 0, 2, 60, 0xc1, 0})
	f.Add([]byte{7, 0x40, 125, 2, 9, 0x40, 100, 3, 9, 0x01, 3, 0xff, 0x85})
	f.Add([]byte{0, 0x10, 125, 0, 0, 0x10, 125, 0, 0, 0x14, 125, 0x10, 7})
	f.Add([]byte{3, 0x85, 15, 0, 0, 0x45, 0, 0, 0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0x06})
	f.Add([]byte{0, 0x60, 32, 2, 0, 0x60, 32, 2, 0, 0, 32, 0, 0})             // LRO, LRO, a frame: one write
	f.Add([]byte{1, 0x60, 167, 2, 0x87, 0x60, 167, 2, 0x87, 0x60, 167, 2, 0}) // LRO chains, v6
	c := NewCoalescer(16, 0)
	f.Fuzz(func(t *testing.T, data []byte) {
		pkts := burstFromBytes(data)
		ws := c.Coalesce(pkts)
		checkWrites(t, pkts, ws, testMTU, true)
		// The merged payload is the packets' payloads in order.
		for _, w := range ws {
			if !w.Merged {
				continue
			}
			var want []byte
			for _, i := range w.Pkts {
				th, _, _ := parseTCP(pkts[i].Segs[0])
				var fr []byte
				for _, s := range pkts[i].Segs {
					fr = append(fr, s...)
				}
				want = append(want, fr[th.hlen():]...)
			}
			segs, _ := split(t, flatten(w), testMTU)
			var got []byte
			for _, s := range segs {
				th, _, _ := parseTCP(s)
				got = append(got, s[th.hlen():]...)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("merged payload differs")
			}
		}
	})
}

func FuzzSplit(f *testing.F) {
	wire4, _ := superFrame(f, base(), 1000, 1000, 7)
	wire6, _ := superFrame(f, func() spec { s := base(); s.v6 = true; s.vlan = 9; return s }(), 600, 600)
	f.Add(wire4[:HdrLen], wire4[HdrLen:], uint16(1500))
	f.Add(wire4[:HdrLen], wire4[HdrLen:], uint16(700))
	f.Add(wire6[:HdrLen], wire6[HdrLen:], uint16(1280))
	f.Add(encode(Hdr{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: 16}), wire4[HdrLen:HdrLen+200], uint16(1500))
	f.Add(encode(Hdr{}), wire4[HdrLen:HdrLen+100], uint16(1500))
	f.Fuzz(func(t *testing.T, hb, frame []byte, mtu uint16) {
		if len(hb) < HdrLen {
			return
		}
		m := int(mtu)%9000 + 1
		h := Decode(hb)
		s, err := Parse(h, frame, m)
		if err != nil {
			return
		}
		if s.N() < 1 || s.N() > 65536 {
			t.Fatalf("N = %d", s.N())
		}
		dst := make([]byte, m+ethLen+vlanLen)
		var field uint64
		if h.GSOType == GSONone && h.Flags&FlagNeedsCsum != 0 {
			field = uint64(binary.BigEndian.Uint16(frame[int(h.CsumStart)+int(h.CsumOffset):]))
		}
		for k := range s.N() {
			n := s.Segment(k, frame, dst)
			if n <= 0 || n > len(dst) {
				t.Fatalf("segment %d: length %d, dst %d", k, n, len(dst))
			}
			if h.GSOType != GSONone {
				checkFrame(t, dst[:n])
				th, _, _ := parseTCP(dst[:n])
				if th.ipLen > m {
					t.Fatalf("segment %d: IP length %d over mtu %d", k, th.ipLen, m)
				}
			} else if h.Flags&FlagNeedsCsum != 0 {
				// The field held the pseudo-header sum; with it, the
				// completed region must sum to zero (0xffff).
				if Fold(Sum(dst[int(h.CsumStart):n], field)) != 0xffff {
					t.Fatalf("NEEDS_CSUM not completed")
				}
			}
		}
		if s.Segment(s.N(), frame, dst) != 0 || s.Segment(-1, frame, dst) != 0 {
			t.Fatal("out-of-range k wrote something")
		}
	})
}

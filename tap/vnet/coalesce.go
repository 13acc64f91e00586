package vnet

import (
	"bytes"
	"encoding/binary"
)

// Packet is one Ethernet frame from the app, possibly in several segments
// (an mbuf chain). Headers (L2..L4) may or may not lie in Segs[0]: if they
// don't, the packet is never merged.
type Packet struct {
	Segs    [][]byte
	Len     int    // sum of segment lengths
	CsumOK  bool   // the app's NIC verified the L4 checksum (RTE_MBUF_F_RX_L4_CKSUM_GOOD): skip validation
	Checked bool   // the caller checked the IPv4 header and TCP checksums and both are right: not checked again, not counted as trusted
	LROSize uint16 // non-zero: the app's NIC merged this (RTE_MBUF_F_RX_LRO); written in a GSO frame with gso_size = LROSize
}

// Write is one writev the caller makes: Iov[0] is a buffer the Coalescer owns
// holding the 10-byte vnet header followed by (for merged writes) a patched
// copy of the L2-L4 headers; the rest point into the packets' segments
// (payload ranges). For a frame written alone, Iov[0] is just the vnet header
// and then the packet's segments whole.
type Write struct {
	Iov   [][]byte
	First int   // index of the first input packet in it
	Pkts  []int // indices of the input packets it carries, in order (len 1 = alone)
	// Merged is set when the write carries several packets behind a header
	// copy. An LRO packet written alone as a GSO frame carries one packet
	// and has Merged false although Iov[0] holds a header copy.
	Merged bool
	// LRO counts the LRO packets the write carries inside its GSO frame.
	// An LRO packet written without GSO (not TCP, or no more payload than
	// its segment size) counts 0 and is whatever size it is: the caller
	// holds it to the MTU.
	LRO int
}

// CoalesceStats are cumulative counters of a Coalescer.
type CoalesceStats struct {
	Packets       uint64 // packets passed to Coalesce
	Writes        uint64 // writes returned
	MergedWrites  uint64 // writes carrying more than one packet
	MergedPackets uint64 // packets carried by merged writes
	LROWrites     uint64 // LRO packets written in GSO frames, alone or merged
	LROMerged     uint64 // those of them merged with other packets (in MergedPackets too)
	BadCsum       uint64 // packets whose IPv4 or TCP checksum was wrong (written alone, zero header)
	CsumTrusted   uint64 // packets that came verified (CsumOK): none of them is checked again
}

// IOVMax is the writev limit (UIO_MAXIOV) a merged write stays within.
const IOVMax = 1024

// DefaultMaxSegs is the number of segments (frames, an LRO packet counting
// as the frames it holds) merged into one write when NewCoalescer is given
// 0: the kernel's limit for UDP GSO and a comfortable writev size.
const DefaultMaxSegs = 64

// maxPayload caps a merged write's TCP payload at 64 KiB; the IP length
// limits (65535) are checked separately and are the tighter ones.
const maxPayload = 64 << 10

type writeKind uint8

const (
	kindAlone writeKind = iota // zero header (or DATA_VALID if CsumOK or Checked)
	kindBad                    // bad checksum: zero header, whatever CsumOK says
	kindMerge                  // a merge item; written alone if it ends with one packet
	kindLRO                    // a merge item headed by a NIC-merged packet: always a GSO write
)

// pktState is the per-packet scratch of one Coalesce call.
type pktState struct {
	hdr     tcpHdr
	flow    bool // a TCP flow was identified (headers in Segs[0])
	payload int
	seq     uint32
	checked bool // checksums validated (or Checked; CsumOK skips them too)
	psh     bool // TCP PSH set
	next    int  // next packet in the same write, -1 at the end
}

// wstate is the per-write scratch: for merge items, the merge state.
type wstate struct {
	kind    writeKind
	head    int // first packet: its headers are the template of a merge
	tail    int
	n       int // packets
	segs    int // segments the kernel cuts it into (n unless LRO packets are in it)
	lro     int // LRO packets in it
	gsoSize int
	payload int // total TCP payload
	iovs    int // iovec entries after Iov[0]
	nextSeq uint32
}

// Coalescer merges TCP segments of a burst into GSO writes. It is not safe
// for concurrent use; use one per queue.
type Coalescer struct {
	maxSegs int
	noShort bool // SetShortLast(false)
	pkts    []pktState
	ws      []wstate
	open    []int // indices into ws of merge items that can still grow
	writes  []Write
	pktIdx  []int
	iov     [][]byte
	hdrBuf  []byte // HdrLen+maxHdr bytes per write
	stats   CoalesceStats
}

const hdrSlot = HdrLen + maxHdr

// NewCoalescer returns a Coalescer preallocated for bursts of up to maxPkts
// packets; maxSegs is the most segments merged into one write (0: 64): the
// frames, an LRO packet counting as the frames it holds. Larger
// bursts, or bursts with more mbuf segments than 4 per packet, grow the
// buffers once and are then allocation-free as well.
func NewCoalescer(maxPkts, maxSegs int) *Coalescer {
	if maxPkts < 1 {
		maxPkts = 1
	}
	if maxSegs < 1 {
		maxSegs = DefaultMaxSegs
	}
	c := &Coalescer{maxSegs: maxSegs}
	c.grow(maxPkts, 4*maxPkts+maxPkts)
	return c
}

func (c *Coalescer) grow(npkts, niov int) {
	if cap(c.pkts) < npkts {
		c.pkts = make([]pktState, npkts)
		c.ws = make([]wstate, npkts)
		c.open = make([]int, 0, npkts)
		c.writes = make([]Write, npkts)
		c.pktIdx = make([]int, npkts)
		c.hdrBuf = make([]byte, npkts*hdrSlot)
	}
	if cap(c.iov) < niov {
		c.iov = make([][]byte, niov)
	}
}

// SetShortLast says whether a merge may end with a packet shorter than the
// others (the default, true). Linux 6.6.44 and 6.10.3 (e269d79c7d35, fixed by
// 89add40066f9) refuse such GSO writes with EINVAL; a caller that probes such
// a kernel turns it off, and the short tail packet is then written alone.
func (c *Coalescer) SetShortLast(allow bool) { c.noShort = !allow }

// Stats returns the cumulative counters.
func (c *Coalescer) Stats() CoalesceStats { return c.stats }

// Coalesce groups pkts (one burst, in arrival order) into writes. Per-flow
// order is kept and writes are ordered by their first packet. The returned
// slice and its contents are valid until the next call. Packets the caller
// already rejected are simply not passed in. Zero allocations after warm-up.
//
// A flow is the exact L2 header (MACs, one optional 802.1Q tag, ethertype),
// the IP version, the addresses and the ports. A packet joins the open item
// of its flow when it is IPv4 without options or fragmentation (or IPv6 with
// TCP as next header), has flags ACK or ACK|PSH and some payload, its
// sequence number follows the item's, and everything the kernel's
// segmentation copies from the first packet to every segment is equal: ack
// number, data offset, options, window, TOS/traffic class with ECN, IPv6
// flow label, TTL/hop limit, DF. Its payload must not exceed the first's
// (gso_size); a shorter one, a PSH, maxSegs segments, 64 KiB of payload, the
// 65535-byte IP length or IOVMax iovecs end the item. The IPv4 IDs after the
// first are not compared: the kernel renumbers the segments first+k, which is
// what a sender with per-packet IDs produced anyway.
//
// An LRO packet (more payload than LROSize) is written as a GSO frame with
// gso_size LROSize, and it merges as the frames it holds would: with
// CsumOK (its checksums are the first frame's, stale, and cannot be
// checked) and a payload of whole LROSize segments, it starts an item, or
// joins one whose gso_size is its LROSize and whose payload so far is whole
// segments, so that the kernel cuts the write at every original segment
// boundary. The header copy takes its lengths from the summed payload, never
// from the LRO packet's IP length, which the NIC may have left stale.
//
// Checksums (IPv4 header and TCP, over the whole mbuf chain) are checked
// before a packet is merged unless CsumOK or Checked, because the kernel
// treats a NEEDS_CSUM write as verified. A packet that fails is written alone with an
// all-zero header, so that the kernel counts it in InCsumErrors, and closes
// its flow's item.
//
// A packet that cannot be merged closes its flow's item so that a later
// packet of the flow never overtakes it; an IP packet whose TCP flow cannot
// be read from Segs[0] (IPv4 options, IPv6 extension headers, headers split
// across segments) closes every open item for the same reason.
func (c *Coalescer) Coalesce(pkts []Packet) []Write {
	c.grow(len(pkts), 0)
	c.open = c.open[:0]
	nw := 0
	niov := 0
	for i := range pkts {
		p := &pkts[i]
		ps := &c.pkts[i]
		*ps = pktState{next: -1, checked: p.Checked}
		c.classify(p, ps)
		if p.CsumOK {
			c.stats.CsumTrusted++
		}

		if !ps.flow {
			// Not a TCP frame we can key. If it might be TCP (an IP
			// packet), it could belong to any open flow: close them all
			// so that nothing overtakes it.
			if mightBeTCP(p) {
				c.open = c.open[:0]
			}
			nw = c.newWrite(nw, i, kindAlone, p)
			continue
		}
		fi := c.findOpen(pkts, i)
		kind := kindMerge
		if p.LROSize != 0 {
			if ps.payload <= int(p.LROSize) || !fitsIPLen(&ps.hdr, ps.payload) {
				// Not a super-frame the kernel segments.
				c.closeOpen(fi)
				nw = c.newWrite(nw, i, kindAlone, p)
				continue
			}
			kind = kindLRO
		}
		if !mergeable(p, ps) {
			c.closeOpen(fi)
			if kind == kindMerge {
				kind = kindAlone
			}
			nw = c.newWrite(nw, i, kind, p)
			continue
		}
		if fi >= 0 {
			w := &c.ws[c.open[fi]]
			if c.canAppend(pkts, w, i) {
				if !c.valid(&pkts[w.head], &c.pkts[w.head]) {
					// The head was alone so far: it becomes a bad
					// write, and p starts over below.
					w.kind = kindBad
					c.closeOpen(fi)
				} else if !c.valid(p, ps) {
					c.closeOpen(fi)
					nw = c.newWrite(nw, i, kindBad, p)
					continue
				} else {
					c.appendTo(pkts, fi, i)
					continue
				}
			} else {
				c.closeOpen(fi)
			}
		}
		if ps.psh {
			// A PSH packet closes an item, so it cannot start one.
			if kind == kindMerge {
				kind = kindAlone
			}
			nw = c.newWrite(nw, i, kind, p)
			continue
		}
		nw = c.newWrite(nw, i, kind, p)
		if w := &c.ws[nw-1]; kind == kindLRO && (!p.CsumOK || ps.payload%w.gsoSize != 0 || w.segs >= c.maxSegs) {
			continue // an LRO packet nothing may follow: written alone
		}
		c.open = append(c.open, nw-1)
	}
	for w := range nw {
		niov += 1 + c.ws[w].iovs
	}
	c.grow(0, niov)
	return c.finish(pkts, nw)
}

// mightBeTCP reports whether p is an IPv4/IPv6 frame (or one we cannot even
// read the ethertype of) that was not keyed: it may be a TCP segment.
func mightBeTCP(p *Packet) bool {
	if len(p.Segs) == 0 {
		return false
	}
	_, et := l2Len(p.Segs[0])
	return et == etherIPv4 || et == etherIPv6 || et == 0
}

// classify fills ps from p's headers: flow is set when Segs[0] holds
// Ethernet/IPv4 (ihl 5, not fragmented) or IPv6 (TCP next header) and TCP
// headers, and the IP length is consistent with Len.
func (c *Coalescer) classify(p *Packet, ps *pktState) {
	if len(p.Segs) == 0 {
		return
	}
	total := 0
	for _, s := range p.Segs {
		total += len(s)
	}
	if total != p.Len {
		return
	}
	t, opts, ok := parseTCP(p.Segs[0])
	if !ok || opts {
		return
	}
	if t.l2+t.ipLen > p.Len {
		return // truncated: the kernel drops it, no flow to protect
	}
	ps.hdr = t
	ps.flow = true
	ps.payload = t.ipLen - t.l3 - t.l4
	if t.l2+t.ipLen != p.Len {
		// Ethernet padding (or trailing junk): keyed, never merged. An
		// LRO frame is never padded: if its IP length is short, the NIC
		// did not update it, and the frame length is the truth (the GSO
		// header copy gets the length rewritten).
		ps.payload = -1
		if p.LROSize != 0 {
			ps.payload = p.Len - t.hlen()
		}
	}
	ps.seq = binary.BigEndian.Uint32(p.Segs[0][t.l2+t.l3+4:])
	ps.psh = p.Segs[0][t.l2+t.l3+13]&tcpPSH != 0
}

// mergeable reports whether p on its own may be part of a merge: exact
// length, some payload, flags ACK or ACK|PSH, no reserved/AE bits.
func mergeable(p *Packet, ps *pktState) bool {
	if ps.payload <= 0 {
		return false
	}
	tcp := p.Segs[0][ps.hdr.l2+ps.hdr.l3:]
	if tcp[12]&0x0f != 0 {
		return false
	}
	f := tcp[13]
	return f == tcpACK || f == tcpACK|tcpPSH
}

// findOpen returns the index in c.open of the item of packet i's flow, or -1.
func (c *Coalescer) findOpen(pkts []Packet, i int) int {
	ps := &c.pkts[i]
	b := pkts[i].Segs[0]
	t := &ps.hdr
	for oi, w := range c.open {
		hs := &c.pkts[c.ws[w].head]
		if hs.hdr.v6 != t.v6 || hs.hdr.l2 != t.l2 {
			continue
		}
		hb := pkts[c.ws[w].head].Segs[0]
		if !bytes.Equal(hb[:t.l2], b[:t.l2]) {
			continue
		}
		hip, ip := hb[t.l2:], b[t.l2:]
		if t.v6 {
			if !bytes.Equal(hip[8:40], ip[8:40]) {
				continue
			}
		} else if !bytes.Equal(hip[12:20], ip[12:20]) {
			continue
		}
		if !bytes.Equal(hip[hs.hdr.l3:hs.hdr.l3+4], ip[t.l3:t.l3+4]) {
			continue
		}
		return oi
	}
	return -1
}

// canAppend reports whether packet i can be appended to item w of its flow.
func (c *Coalescer) canAppend(pkts []Packet, w *wstate, i int) bool {
	ps := &c.pkts[i]
	hs := &c.pkts[w.head]
	t := &ps.hdr
	if hs.hdr.l3 != t.l3 || hs.hdr.l4 != t.l4 {
		return false
	}
	segs := 1
	if p := &pkts[i]; p.LROSize != 0 {
		// Whole segments of the item's size after whole segments, or
		// the kernel would cut the write elsewhere than the NIC merged.
		if !p.CsumOK || int(p.LROSize) != w.gsoSize || ps.payload%w.gsoSize != 0 || w.payload%w.gsoSize != 0 {
			return false
		}
		segs = ps.payload / w.gsoSize
	} else if ps.payload > w.gsoSize || c.noShort && ps.payload < w.gsoSize {
		return false
	}
	if ps.seq != w.nextSeq || w.segs+segs > c.maxSegs {
		return false
	}
	payload := w.payload + ps.payload
	if payload > maxPayload || !fitsIPLen(t, payload) {
		return false
	}
	if w.iovs+len(pkts[i].Segs) > IOVMax-1 {
		return false
	}
	hip, ip := pkts[w.head].Segs[0][t.l2:], pkts[i].Segs[0][t.l2:]
	if t.v6 {
		// Version, traffic class (with ECN) and flow label; hop limit.
		if !bytes.Equal(hip[:4], ip[:4]) || hip[7] != ip[7] {
			return false
		}
	} else {
		// TOS (with ECN), DF, TTL.
		if hip[1] != ip[1] || hip[6]&0x40 != ip[6]&0x40 || hip[8] != ip[8] {
			return false
		}
	}
	htcp, tcp := hip[t.l3:], ip[t.l3:]
	// Ack number, data offset, window, and options: the kernel's segments
	// all carry the first packet's.
	return bytes.Equal(htcp[8:12], tcp[8:12]) &&
		htcp[12] == tcp[12] &&
		bytes.Equal(htcp[14:16], tcp[14:16]) &&
		bytes.Equal(htcp[tcpMinLen:t.l4], tcp[tcpMinLen:t.l4])
}

// valid checks (once) the IPv4 header and TCP checksums of a keyed packet.
func (c *Coalescer) valid(p *Packet, ps *pktState) bool {
	if ps.checked || p.CsumOK {
		return true
	}
	b := p.Segs[0]
	t := &ps.hdr
	ip := b[t.l2:]
	if !t.v6 && Fold(Sum(ip[:t.l3], 0)) != 0xffff {
		c.stats.BadCsum++
		return false
	}
	src, dst := addrs(ip, t.v6)
	acc := PseudoHeaderSum(protoTCP, src, dst, p.Len-t.l2-t.l3)
	acc = sumChain(b[t.l2+t.l3:], p.Segs[1:], acc)
	if Fold(acc) != 0xffff {
		c.stats.BadCsum++
		return false
	}
	ps.checked = true
	return true
}

// closeOpen removes c.open[oi] (if oi >= 0): the item can take no more.
func (c *Coalescer) closeOpen(oi int) {
	if oi < 0 {
		return
	}
	last := len(c.open) - 1
	c.open[oi] = c.open[last]
	c.open = c.open[:last]
}

// newWrite starts write nw with packet i and returns nw+1.
func (c *Coalescer) newWrite(nw, i int, kind writeKind, p *Packet) int {
	ps := &c.pkts[i]
	w := wstate{kind: kind, head: i, tail: i, n: 1, segs: 1, iovs: len(p.Segs),
		gsoSize: ps.payload, payload: ps.payload, nextSeq: ps.seq + uint32(ps.payload)}
	if kind == kindLRO {
		w.gsoSize = int(p.LROSize)
		w.segs = (ps.payload + w.gsoSize - 1) / w.gsoSize
		w.lro = 1
	}
	c.ws[nw] = w
	return nw + 1
}

// appendTo adds packet i to the open item c.open[oi] and closes the item
// when it cannot grow any further: after a PSH, after a packet shorter than
// gso_size (only the last segment of a GSO frame may be short), or at
// maxSegs segments.
func (c *Coalescer) appendTo(pkts []Packet, oi, i int) {
	w := &c.ws[c.open[oi]]
	ps := &c.pkts[i]
	c.pkts[w.tail].next = i
	w.tail = i
	w.n++
	w.segs++
	if pkts[i].LROSize != 0 {
		w.segs += ps.payload/w.gsoSize - 1
		w.lro++
	}
	w.payload += ps.payload
	w.nextSeq += uint32(ps.payload)
	w.iovs += len(pkts[i].Segs)
	if ps.psh || ps.payload < w.gsoSize || w.segs >= c.maxSegs {
		c.closeOpen(oi)
	}
}

// finish lays out the writes: packet lists, vnet headers, header copies and
// iovecs.
func (c *Coalescer) finish(pkts []Packet, nw int) []Write {
	iv, pi := 0, 0
	for w := range nw {
		ws := &c.ws[w]
		hb := c.hdrBuf[w*hdrSlot : (w+1)*hdrSlot]
		iovStart, pStart := iv, pi
		for j := ws.head; j >= 0; j = c.pkts[j].next {
			c.pktIdx[pi] = j
			pi++
		}
		kind := ws.kind
		if kind == kindMerge && ws.n == 1 {
			kind = kindAlone
		}
		head := &pkts[ws.head]
		switch kind {
		case kindAlone, kindBad:
			var h Hdr
			if kind == kindAlone && (head.CsumOK || head.Checked) {
				h.Flags = FlagDataValid
			}
			h.Encode(hb)
			c.iov[iv] = hb[:HdrLen]
			iv++
			iv += copy(c.iov[iv:], head.Segs)
		case kindMerge, kindLRO:
			hl := c.header(hb, head, &c.pkts[ws.head], &pkts[ws.tail], ws.gsoSize, ws.payload)
			c.iov[iv] = hb[:HdrLen+hl]
			iv++
			for j := ws.head; j >= 0; j = c.pkts[j].next {
				segs := pkts[j].Segs
				if len(segs[0]) > hl {
					c.iov[iv] = segs[0][hl:]
					iv++
				}
				for _, s := range segs[1:] {
					if len(s) > 0 {
						c.iov[iv] = s
						iv++
					}
				}
			}
		}
		merged := ws.n > 1 // only merge items grow
		lro := 0
		if kind == kindMerge || kind == kindLRO {
			lro = ws.lro
		}
		c.writes[w] = Write{
			Iov:    c.iov[iovStart:iv:iv],
			First:  ws.head,
			Pkts:   c.pktIdx[pStart:pi:pi],
			Merged: merged,
			LRO:    lro,
		}
		c.stats.Writes++
		c.stats.LROWrites += uint64(lro)
		if merged {
			c.stats.MergedWrites++
			c.stats.MergedPackets += uint64(ws.n)
			c.stats.LROMerged += uint64(lro)
		}
	}
	c.stats.Packets += uint64(len(pkts))
	return c.writes[:nw]
}

// header writes the vnet header and the patched header copy of a GSO write
// into hb and returns the L2-L4 header length. The copy is the head packet's
// headers with the lengths of the merged packet, a fresh IPv4 header
// checksum, the last packet's PSH, and in the TCP checksum field the folded,
// not inverted, pseudo-header sum that Linux expects of CHECKSUM_PARTIAL.
// The IPv4 ID stays the head's: the kernel's segmentation counts up from it.
func (c *Coalescer) header(hb []byte, head *Packet, hs *pktState, tail *Packet, gsoSize, payload int) int {
	t := &hs.hdr
	hl := t.hlen()
	h := Hdr{
		Flags:      FlagNeedsCsum,
		GSOType:    GSOTCPv4,
		HdrLen:     uint16(hl),
		GSOSize:    uint16(gsoSize),
		CsumStart:  uint16(t.l2 + t.l3),
		CsumOffset: 16,
	}
	if t.v6 {
		h.GSOType = GSOTCPv6
	}
	h.Encode(hb)
	cp := hb[HdrLen : HdrLen+hl]
	copy(cp, head.Segs[0][:hl])
	ip := cp[t.l2:]
	l4len := t.l4 + payload
	if t.v6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(l4len))
	} else {
		binary.BigEndian.PutUint16(ip[2:], uint16(t.l3+l4len))
		ipv4Csum(ip, t.l3)
	}
	tcp := ip[t.l3:]
	tcp[13] = tcp[13]&^tcpPSH | tail.Segs[0][t.l2+t.l3+13]&tcpPSH
	src, dst := addrs(ip, t.v6)
	binary.BigEndian.PutUint16(tcp[16:], Fold(PseudoHeaderSum(protoTCP, src, dst, l4len)))
	return hl
}

// fitsIPLen reports whether a TCP payload fits the 16-bit IP length field:
// IPv4's total length counts its header, IPv6's payload length does not.
func fitsIPLen(t *tcpHdr, payload int) bool {
	n := t.l4 + payload
	if !t.v6 {
		n += t.l3
	}
	return n <= 0xffff
}

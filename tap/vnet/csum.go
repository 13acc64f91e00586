package vnet

import (
	"encoding/binary"
	"math/bits"
)

// The checksums' home is C (ring/burst_csum.h): the burst core checks each
// TCP frame from the app as it describes a burst, the C cut sums each
// segment it writes, and the in buffer finishes the kernel's partial
// checksums as it copies the frames. These Go sums are the fallback: for
// the frames C did not vouch for (the coalescer checks them before it
// merges), and for Super.Segment, the fallback cut and completion.
//
// The checksum helpers keep a 64-bit ones-complement accumulator: adding
// 8 bytes as one big-endian uint64 with end-around carry is the same, modulo
// 0xffff, as adding their four 16-bit words, because 2^16 ≡ 1 (mod 0xffff).
// Fold reduces the accumulator to the 16-bit sum at the end.

func add(acc, x uint64) uint64 {
	s, c := bits.Add64(acc, x, 0)
	return s + c // cannot overflow: with a carry, s <= 2^64-2
}

// Sum adds b, as big-endian 16-bit words starting at an even offset of the
// checksummed data, to the accumulator acc. An odd trailing byte counts as the
// high byte of a word (the RFC 1071 padding).
//
// The bulk is summed as native (little-endian) 64-bit words in one
// add-with-carry chain, which the compiler turns into ADC instructions with
// no byte swaps, and swapped to big-endian once at the end: a ones-complement
// sum is independent of byte order up to that final swap (RFC 1071 2(B)).
// It is the hottest loop of the app-to-kernel path, where every segment's
// TCP checksum is checked before it is merged.
func Sum(b []byte, acc uint64) uint64 {
	if len(b) >= 64 {
		var s, c uint64
		for len(b) >= 64 {
			_ = b[63] // one bounds check for the eight loads
			s, c = bits.Add64(s, binary.LittleEndian.Uint64(b), c)
			s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[8:]), c)
			s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[16:]), c)
			s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[24:]), c)
			s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[32:]), c)
			s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[40:]), c)
			s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[48:]), c)
			s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[56:]), c)
			b = b[64:]
		}
		s += c // cannot overflow: with a carry, s <= 2^64-2
		f := Fold(s)
		acc = add(acc, uint64(f>>8|f<<8))
	}
	for len(b) >= 8 {
		acc = add(acc, binary.BigEndian.Uint64(b))
		b = b[8:]
	}
	if len(b) >= 4 {
		acc = add(acc, uint64(binary.BigEndian.Uint32(b)))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc = add(acc, uint64(binary.BigEndian.Uint16(b)))
		b = b[2:]
	}
	if len(b) == 1 {
		acc = add(acc, uint64(b[0])<<8)
	}
	return acc
}

// SumSegs is Sum over the concatenation of segs (an mbuf chain): a segment
// that ends at an odd offset leaves its last byte as a high byte, and the
// next segment's first byte is then added as the matching low byte.
func SumSegs(segs [][]byte, acc uint64) uint64 { return sumChain(nil, segs, acc) }

// sumChain is SumSegs over first followed by rest, so that a packet can be
// summed from an offset in its first segment without building a new slice
// of slices.
func sumChain(first []byte, rest [][]byte, acc uint64) uint64 {
	acc = Sum(first, acc)
	odd := len(first)&1 == 1
	for _, s := range rest {
		if len(s) == 0 {
			continue
		}
		if odd {
			acc = add(acc, uint64(s[0]))
			s = s[1:]
		}
		acc = Sum(s, acc)
		odd = len(s)&1 == 1
	}
	return acc
}

// Fold reduces an accumulator to the 16-bit ones-complement sum (not
// inverted). A non-empty sum that is zero modulo 0xffff folds to 0xffff, so a
// correct checksum over data including its checksum field folds to 0xffff.
func Fold(acc uint64) uint16 {
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 16) + (acc & 0xffff)
	acc = (acc >> 16) + (acc & 0xffff)
	acc = (acc >> 16) + (acc & 0xffff)
	return uint16(acc)
}

// Checksum is the Internet checksum of b on top of acc: the inverted folded
// sum, ready to store in a zeroed checksum field.
func Checksum(b []byte, acc uint64) uint16 { return ^Fold(Sum(b, acc)) }

// PseudoHeaderSum is the accumulator of the TCP/UDP pseudo-header: src and dst
// are both 4 bytes (IPv4) or both 16 bytes (IPv6); l4len is the length of the
// L4 header plus payload. Folded and not inverted, it is what Linux expects in
// the checksum field of a CHECKSUM_PARTIAL (NEEDS_CSUM) packet.
func PseudoHeaderSum(proto uint8, src, dst []byte, l4len int) uint64 {
	acc := Sum(src, 0)
	acc = Sum(dst, acc)
	acc = add(acc, uint64(proto))
	return add(acc, uint64(l4len))
}

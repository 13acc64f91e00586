package vnet

import (
	"math/rand/v2"
	"testing"
)

// refSum is RFC 1071 the slow way: 16-bit words, 32-bit accumulator folded
// as it goes.
func refSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
		s = s&0xffff + s>>16
	}
	if len(b)&1 == 1 {
		s += uint32(b[len(b)-1]) << 8
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// same reports whether two ones-complement sums are equal (0 and 0xffff are
// both zero, except that only an all-zero input sums to 0).
func same(a, b uint16) bool {
	return a == b || (a == 0 || a == 0xffff) && (b == 0 || b == 0xffff)
}

func TestSumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if n%50 == 7 {
			for i := range b {
				b[i] = 0xff // carries everywhere
			}
		}
		if got, want := Fold(Sum(b, 0)), refSum(b); !same(got, want) {
			t.Fatalf("len %d: Sum %#x, reference %#x", n, got, want)
		}
		// Random cuts into an mbuf chain, odd ones included.
		var segs [][]byte
		rest := b
		for len(rest) > 0 {
			k := r.IntN(len(rest) + 1)
			segs = append(segs, rest[:k])
			rest = rest[k:]
		}
		if got, want := Fold(SumSegs(segs, 0)), refSum(b); !same(got, want) {
			t.Fatalf("len %d cut %d ways: SumSegs %#x, reference %#x", n, len(segs), got, want)
		}
		if len(b) > 3 {
			off := r.IntN(len(b))
			if got, want := Fold(sumChain(b[off:], nil, 0)), refSum(b[off:]); !same(got, want) {
				t.Fatalf("sumChain at %d: %#x, want %#x", off, got, want)
			}
		}
	}
}

func TestSumAccumulatorCarries(t *testing.T) {
	b := make([]byte, 1<<16)
	for i := range b {
		b[i] = 0xff
	}
	if got := Fold(Sum(b, ^uint64(0))); got != 0xffff {
		t.Fatalf("%#x", got)
	}
}

func TestPseudoHeaderSum(t *testing.T) {
	src := []byte{10, 0, 0, 1}
	dst := []byte{10, 0, 0, 2}
	ph := []byte{10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0x05, 0xdc}
	if got, want := Fold(PseudoHeaderSum(6, src, dst, 1500)), refSum(ph); got != want {
		t.Fatalf("v4 %#x want %#x", got, want)
	}
	s6 := make([]byte, 16)
	d6 := make([]byte, 16)
	s6[0], s6[15], d6[0], d6[15] = 0xfd, 1, 0xfd, 2
	ph6 := append(append(append([]byte{}, s6...), d6...), 0, 0, 0x05, 0xdc, 0, 0, 0, 6)
	if got, want := Fold(PseudoHeaderSum(6, s6, d6, 1500)), refSum(ph6); got != want {
		t.Fatalf("v6 %#x want %#x", got, want)
	}
}

func TestHdrEncodeDecode(t *testing.T) {
	h := Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv6, HdrLen: 86, GSOSize: 1428, CsumStart: 54, CsumOffset: 16}
	var b [HdrLen]byte
	h.Encode(b[:])
	want := [HdrLen]byte{1, 4, 86, 0, 0x94, 0x05, 54, 0, 16, 0} // little-endian
	if b != want {
		t.Fatalf("% x", b)
	}
	if Decode(b[:]) != h {
		t.Fatal("round trip")
	}
}

func BenchmarkSum1500(b *testing.B) {
	buf := make([]byte, 1500)
	b.SetBytes(1500)
	for b.Loop() {
		Sum(buf, 0)
	}
}

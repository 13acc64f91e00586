package vnet

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// BenchmarkSumWrittenElsewhere measures what a frame's first touch costs
// kbridge: Sum over 1500-byte frames just written by another CPU (as the
// app's lcore on CPU 1 copies each received frame into an mbuf, which kbridge
// on CPU 0 then checks), beside the same frames written by the summing CPU
// itself, in the same run; over a ring of frames that fits the L2 cache (256
// frames, 384 KiB) and over one as large as the test bed's mbuf pool (8192
// frames, 12 MiB). The metric is ns per frame of the summing alone (the
// writing is outside it); docs/runs/2026-12-02-per-frame-costs.md reads it
// against the fixed-rate profile. Needs CPUs 0 and 1. The reader waits on a channel while CPU 1
// writes, not while it writes itself.
func BenchmarkSumWrittenElsewhere(b *testing.B) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil || !allowed.IsSet(0) || !allowed.IsSet(1) {
		b.Skip("needs CPUs 0 and 1")
	}
	const frameLen, stride = 1500, 1536
	src := make([]byte, frameLen)
	for _, frames := range []int{256, 8192} {
		bufs := make([]byte, frames*stride)
		// The frames in the order a pool hands them out: scattered, so
		// that no prefetcher streams from one frame into the next.
		order := rand.New(rand.NewPCG(1, 2)).Perm(frames)
		fill := func(round int) {
			for i := range src {
				src[i] = byte(round + i)
			}
			for _, f := range order {
				copy(bufs[f*stride:f*stride+frameLen], src)
			}
		}
		for _, writer := range []int{0, 1} { // the CPU that writes; the reader is on CPU 0
			name := fmt.Sprintf("frames=%d/written=here", frames)
			if writer != 0 {
				name = fmt.Sprintf("frames=%d/written=cpu%d", frames, writer)
			}
			b.Run(name, func(b *testing.B) {
				start, done := make(chan int), make(chan struct{})
				if writer != 0 {
					go func() {
						runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
						pin(b, writer)
						for round := range start {
							fill(round)
							done <- struct{}{}
						}
					}()
				}
				res := make(chan time.Duration)
				go func() {
					runtime.LockOSThread()
					pin(b, 0)
					var spent time.Duration
					var acc uint64
					for n, round := 0, 0; n < b.N; round++ {
						if writer != 0 {
							start <- round
							<-done
						} else {
							fill(round)
						}
						t0 := time.Now()
						for i := 0; i < frames && n < b.N; i, n = i+1, n+1 {
							f := order[i]
							acc = Sum(bufs[f*stride:f*stride+frameLen], acc)
						}
						spent += time.Since(t0)
					}
					sink = acc
					res <- spent
				}()
				// No SetBytes: ns/op and MB/s would count the writing
				// and the hand-over between threads too.
				b.ResetTimer()
				spent := <-res
				close(start)
				b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "ns/frame-summed")
			})
		}
	}
}

var sink uint64

// pin moves the calling (locked) thread to cpu.
func pin(b *testing.B, cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		b.Errorf("pin to CPU %d: %v", cpu, err)
	}
}

package vnet_test

import (
	"testing"

	"github.com/kbridge/kbridge/tap/vnet"
	"github.com/kbridge/kbridge/tap/vnet/vnettest"
)

// The steps of the app-to-kernel path that this package owns, each on a
// burst of 32 full-sized segments of one flow that CPU 1 copied into
// scattered slots of a pool-sized arena just before CPU 0 runs the step
// (vnettest.Elsewhere): what kbridge's worker meets at a fixed rate. The
// metric is ns/frame; docs/BENCHMARKS.md says how the steps add up.

const burstLen, mss = 32, 1448

func burst() [][]byte { return vnettest.DefaultFlow().Stream(1, 1, burstLen, mss, 0) }

// elsewhere runs step as vnettest.Elsewhere does, with the frames written
// by CPU 1 and, for comparison, by CPU 0 itself (in its caches).
func elsewhere(b *testing.B, step func(fs [][]byte)) {
	for _, writer := range []int{1, 0} {
		b.Run(map[int]string{0: "written=here", 1: "written=cpu1"}[writer], func(b *testing.B) {
			vnettest.Elsewhere(b, burst(), 0, writer, step)
		})
	}
}

// BenchmarkStepChecksum is the check of a segment's IPv4 header and TCP
// checksums that Coalesce makes before it merges it: the frame's first
// touch.
func BenchmarkStepChecksum(b *testing.B) {
	elsewhere(b, func(fs [][]byte) {
		for _, f := range fs {
			ip := f[14:]
			if vnet.Fold(vnet.Sum(ip[:20], 0)) != 0xffff {
				b.Error("IPv4 header checksum")
			}
			acc := vnet.PseudoHeaderSum(6, ip[12:16], ip[16:20], len(ip)-20)
			if vnet.Fold(vnet.Sum(ip[20:], acc)) != 0xffff {
				b.Error("TCP checksum")
			}
		}
	})
}

// BenchmarkStepCoalesce is Coalesce on the burst: with the checksums
// checked (a port that does not verify them, the plain bed) and trusted
// (RTE_MBUF_F_RX_L4_CKSUM_GOOD): the second is the header compares, the
// merge decisions and the iovecs alone.
func BenchmarkStepCoalesce(b *testing.B) {
	for _, trusted := range []bool{false, true} {
		name := "checked"
		if trusted {
			name = "trusted"
		}
		b.Run(name, func(b *testing.B) {
			c := vnet.NewCoalescer(burstLen, 0)
			pkts := make([]vnet.Packet, burstLen)
			segs := make([][]byte, burstLen)
			elsewhere(b, func(fs [][]byte) {
				for i, f := range fs {
					segs[i] = f
					pkts[i] = vnet.Packet{Segs: segs[i : i+1], Len: len(f), CsumOK: trusted}
				}
				if ws := c.Coalesce(pkts); len(ws) != 1 {
					b.Errorf("%d writes, want 1", len(ws))
				}
			})
		})
	}
}

// BenchmarkStepSplit cuts a 64 KiB TCP super-frame the kernel handed over
// into MTU frames (headers rewritten, each frame's TCP checksum computed)
// in slots: the kernel-to-app path's work per frame before the copy into
// mbufs. The super-frame is in the cache, as read(2) left it.
func BenchmarkStepSplit(b *testing.B) {
	const n = 45
	raw := vnettest.DefaultFlow().Super(1, 1, n, mss, 0)
	h := vnet.Decode(raw)
	frame := raw[vnet.HdrLen:]
	work := make([]byte, len(frame))
	slots := make([][]byte, n)
	for i := range slots {
		slots[i] = make([]byte, 1600)
	}
	b.ResetTimer()
	for b.Loop() {
		copy(work, frame)
		s, err := vnet.Parse(h, work, 1500)
		if err != nil || s.N() != n {
			b.Fatalf("%d frames, %v", s.N(), err)
		}
		for k := range s.N() {
			s.Segment(k, work, slots[k])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/frame")
}

package tap

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/tap/vnet/vnettest"
)

// BenchmarkStepQueueWrite is Queue.Write's Go work on a burst of 32
// full-sized segments of one flow that CPU 1 wrote into a pool-sized arena
// (vnettest.Elsewhere), the writev(2) left out: the frame checks, the
// packets handed to the coalescer, Coalesce (checksums checked, or trusted
// as RTE_MBUF_F_RX_L4_CKSUM_GOOD) and the iovecs of the one write. Beside
// vnet's BenchmarkStepCoalesce it gives what Write adds. The metric is
// ns/frame; docs/BENCHMARKS.md says how the steps add up.
func BenchmarkStepQueueWrite(b *testing.B) {
	saved := sysWritev
	writes := 0
	sysWritev = func(int, []unix.Iovec) unix.Errno { writes++; return 0 }
	b.Cleanup(func() { sysWritev = saved })
	frames := vnettest.DefaultFlow().Stream(1, 1, 32, 1448, 0)
	for _, trusted := range []bool{false, true} {
		name := map[bool]string{false: "checked", true: "trusted"}[trusted]
		b.Run(name, func(b *testing.B) {
			q := NewQueue(-1, QueueConfig{MTU: 1500, Batch: 32, MaxSegs: 1, Merge: true})
			pkts := make([]bridge.Packet, len(frames))
			iovs := make([]unix.Iovec, len(frames))
			written := make([]bool, len(frames))
			var r bridge.Result
			vnettest.Elsewhere(b, frames, 0, 1, func(fs [][]byte) {
				for i, f := range fs {
					iovs[i] = unix.Iovec{Base: unsafe.SliceData(f)}
					iovs[i].SetLen(len(f))
					pkts[i] = bridge.Packet{Len: len(f), Segs: iovs[i : i+1], L4CsumGood: trusted}
				}
				writes = 0
				q.Write(pkts, written, &r)
				if writes != 1 || !written[len(fs)-1] {
					b.Errorf("%d writes", writes)
				}
			})
		})
	}
}

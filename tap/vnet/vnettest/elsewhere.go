package vnettest

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// PoolSlots is the test bed's mbuf pool: 8192 mbufs, 2 KiB apart. A step
// benchmarked over frames in so many slots finds its data where the
// forwarder finds it, outside the caches.
const PoolSlots, slotStride = 8192, 2048

// Elsewhere benchmarks step on bursts of frames as a forwarder meets them:
// before each burst a thread pinned to CPU writer copies the frames into
// slots picked at random among PoolSlots (as the app's lcore copies each
// received frame into an mbuf of its pool), then step runs on CPU reader
// over the copies. Only step is timed; the metric is ns/frame. One b.N
// iteration is one burst. Needs both CPUs. step runs on a goroutine of its
// own: it reports with b.Error, not b.Fatal.
func Elsewhere(b *testing.B, frames [][]byte, reader, writer int, step func(burst [][]byte)) {
	b.Helper()
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil || !allowed.IsSet(reader) || !allowed.IsSet(writer) {
		b.Skipf("needs CPUs %d and %d", reader, writer)
	}
	arena := make([]byte, PoolSlots*slotStride)
	burst := make([][]byte, len(frames))
	// The slots in the order a pool hands them out, scattered, so that
	// no prefetcher streams from one frame into the next; a burst's
	// slots are distinct.
	order, next := rand.New(rand.NewPCG(1, 2)).Perm(PoolSlots), 0
	place := func() {
		for i, f := range frames {
			s := order[next%PoolSlots]
			next++
			burst[i] = arena[s*slotStride : s*slotStride+len(f)]
			copy(burst[i], f)
		}
	}
	start, done := make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		pin(b, writer)
		for range start {
			place()
			done <- struct{}{}
		}
	}()
	res := make(chan time.Duration)
	go func() {
		runtime.LockOSThread()
		pin(b, reader)
		var spent time.Duration
		for range b.N {
			start <- struct{}{}
			<-done
			t0 := time.Now()
			step(burst)
			spent += time.Since(t0)
		}
		res <- spent
	}()
	b.ResetTimer()
	spent := <-res
	close(start)
	b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*len(frames)), "ns/frame")
}

// pin moves the calling (locked) thread to cpu.
func pin(b *testing.B, cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		b.Errorf("pin to CPU %d: %v", cpu, err)
	}
}

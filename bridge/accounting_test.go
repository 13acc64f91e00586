package bridge_test

import (
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/bridge/bridgetest"
	"github.com/kbridge/kbridge/policy"
)

// The worker's own Go work per burst, with app and kernel sides that do
// nothing (stepOut, stepIn, stepKernel): what ToKernel and FromKernel cost
// beyond the burst core's cgo call and the kernel side's Write and Read.
// The metric is ns/frame; docs/BENCHMARKS.md says how the steps add up.

const stepBurst = 32

// stepOut hands out the same burst of 32 one-segment packets every time.
type stepOut struct{ pkts [stepBurst]bridge.Packet }

func (o *stepOut) Next() int                           { return stepBurst }
func (o *stepOut) Packet(i int) (bridge.Packet, error) { return o.pkts[i], nil }
func (o *stepOut) Written(int)                         {}
func (o *stepOut) Close()                              {}

// stepIn queues whatever it is given.
type stepIn struct{ slots [stepBurst][]byte }

func (in *stepIn) Cap() int                        { return stepBurst }
func (in *stepIn) Slot(i int) []byte               { return in.slots[i] }
func (in *stepIn) Put(lens []int) bridge.PutResult { return bridge.PutResult{Queued: len(lens)} }
func (in *stepIn) Close()                          {}

// stepKernel takes every packet, and reads one frame a call (an ACK).
type stepKernel struct{ fd int }

func (k *stepKernel) Fd() int              { return k.fd }
func (k *stepKernel) FdGeneration() uint64 { return 0 }
func (k *stepKernel) Write(pkts []bridge.Packet, written []bool, _ *bridge.Result) {
	for i := range pkts {
		written[i] = true
	}
}
func (k *stepKernel) Read(_ [][]byte, frames []bridge.Frame, _ bridge.ReadFlags, _ *bridge.Result) int {
	frames[0] = bridge.Frame{Len: 66}
	return 1
}
func (k *stepKernel) Close() {}

func stepWorker(b *testing.B) *bridge.Worker {
	fd, peer, err := bridgetest.SeqPacket()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close(fd); unix.Close(peer) })
	frame := make([]byte, 1514)
	iov := unix.Iovec{Base: unsafe.SliceData(frame)}
	iov.SetLen(len(frame))
	out := &stepOut{}
	for i := range out.pkts {
		out.pkts[i] = bridge.Packet{Len: len(frame), Segs: []unix.Iovec{iov}}
	}
	in := &stepIn{}
	for i := range in.slots {
		in.slots[i] = make([]byte, 1518)
	}
	w, err := bridge.NewWorker(bridge.WorkerConfig{CPU: -1, Policy: policy.Default()},
		bridge.App{Out: out, In: in, Waker: &bridgetest.Waker{}}, &stepKernel{fd: fd})
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// BenchmarkStepWorkerToKernel is ToKernel's own work on a burst of 32:
// the Packet calls, the hand-over slices, the written loop and the
// counters.
func BenchmarkStepWorkerToKernel(b *testing.B) {
	w := stepWorker(b)
	for b.Loop() {
		w.ToKernel()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*stepBurst), "ns/frame")
}

// BenchmarkStepWorkerFromKernel is FromKernel's own work on one frame
// read (to the peer, the kernel's ACKs come one a read).
func BenchmarkStepWorkerFromKernel(b *testing.B) {
	w := stepWorker(b)
	for b.Loop() {
		w.FromKernel()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/frame")
}

// BenchmarkStepLoopBookkeeping is what Run does around the two calls each
// time round its loop, as far as it can be had from outside: the heartbeat,
// two clock reads, the policy pointer and the ladder's step.
func BenchmarkStepLoopBookkeeping(b *testing.B) {
	p := policy.Default()
	p.Mode = policy.Interrupt
	start := time.Now()
	l := policy.NewLadder(p, time.Since(start))
	var beats, spin uint64
	for i := 0; b.Loop(); i++ {
		beats++
		now := time.Since(start)
		step := l.Next(1-i&1, 0, now)
		if step.Kind == policy.Park {
			spin += uint64(time.Since(start) - now)
		}
	}
	sinkU64 = beats + spin
}

var sinkU64 uint64

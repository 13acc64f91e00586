package ring

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/kbridge/kbridge/internal/limits"
)

// Making and freeing buffers needs no EAL; the refusals come before any C.
func TestAnOutBufferRefusesSizesPastTheLimits(t *testing.T) {
	for _, c := range []outConfig{{Batch: 0, MaxSegs: 1}, {Batch: limits.MaxBatch + 1, MaxSegs: 1}, {Batch: 1, MaxSegs: limits.MaxSegments + 1}} {
		var o outBuf
		if err := o.open(c); err == nil {
			t.Errorf("open(%d x %d) accepted", c.Batch, c.MaxSegs)
		}
	}
	var n uint32
	var m [4]unsafe.Pointer
	held := heldRec{N: unsafe.Pointer(&n), M: unsafe.Pointer(&m[0]), Max: len(m)}
	var o outBuf
	if err := o.open(outConfig{Batch: 5, MaxSegs: 1, Held: held}); !errors.Is(err, ErrHeldTooSmall) {
		t.Errorf("a burst of 5 over a record of 4: %v, want ErrHeldTooSmall", err)
	}
	if err := o.open(outConfig{Batch: 32, MaxSegs: 16, TSCOffset: -5}); err != nil {
		t.Fatal(err)
	}
	if len(o.pkts) != 32 || len(o.iov) != 32*16 || o.b.tsc_offset != -1 {
		t.Errorf("buffer of %d packets, %d iovecs, tsc_offset %d", len(o.pkts), len(o.iov), o.b.tsc_offset)
	}
	o.Close()
	o.Close()
	if got := o.csumCompleted(); got != 0 {
		t.Errorf("csumCompleted after Close = %d", got)
	}
}

func TestAnInBufferRefusesSizesPastTheLimitsAndNoPool(t *testing.T) {
	var in inBuf
	if err := in.open(inConfig{Batch: 32, Stride: 1518}); !errors.Is(err, ErrNoPool) {
		t.Errorf("open without a pool: %v, want ErrNoPool", err)
	}
	for _, c := range []inConfig{{Batch: 0, Stride: 1518}, {Batch: limits.MaxBatch + 1, Stride: 1518}, {Batch: 1, Stride: 63}, {Batch: 1, Stride: 1<<16 + 1}} {
		if err := in.open(c); err == nil || errors.Is(err, ErrNoPool) {
			t.Errorf("open(%d x %d): %v, want a range error", c.Batch, c.Stride, err)
		}
	}
}

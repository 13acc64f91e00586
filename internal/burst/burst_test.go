package burst

import (
	"errors"
	"testing"
	"unsafe"
)

// Making and freeing buffers needs no EAL; the refusals come before any C.
func TestNewOutLimits(t *testing.T) {
	for _, c := range []OutConfig{{Batch: 0, MaxSegs: 1}, {Batch: MaxBatch + 1, MaxSegs: 1}, {Batch: 1, MaxSegs: MaxSegs + 1}} {
		if _, err := NewOut(c); err == nil {
			t.Errorf("NewOut(%d x %d) accepted", c.Batch, c.MaxSegs)
		}
	}
	var n uint32
	var m [4]unsafe.Pointer
	held := Held{N: unsafe.Pointer(&n), M: unsafe.Pointer(&m[0]), Max: len(m)}
	if _, err := NewOut(OutConfig{Batch: 5, MaxSegs: 1, Held: held}); !errors.Is(err, ErrHeldTooSmall) {
		t.Errorf("a burst of 5 over a record of 4: %v, want ErrHeldTooSmall", err)
	}
	o, err := NewOut(OutConfig{Batch: 32, MaxSegs: 16, TSCOffset: -5})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.pkts) != 32 || len(o.iov) != 32*16 || o.b.tsc_offset != -1 {
		t.Errorf("buffer of %d packets, %d iovecs, tsc_offset %d", len(o.pkts), len(o.iov), o.b.tsc_offset)
	}
	o.Close()
	o.Close()
	if got := o.CsumCompleted(); got != 0 {
		t.Errorf("CsumCompleted after Close = %d", got)
	}
}

func TestNewInLimits(t *testing.T) {
	if _, err := NewIn(InConfig{Batch: 32, Stride: 1518}); !errors.Is(err, ErrNoPool) {
		t.Errorf("NewIn without a pool: %v, want ErrNoPool", err)
	}
	for _, c := range []InConfig{{Batch: 0, Stride: 1518}, {Batch: 1, Stride: 63}, {Batch: 1, Stride: 1<<16 + 1}} {
		if _, err := NewIn(c); err == nil || errors.Is(err, ErrNoPool) {
			t.Errorf("NewIn(%d x %d): %v, want a range error", c.Batch, c.Stride, err)
		}
	}
}

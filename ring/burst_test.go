package ring

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/internal/limits"
)

// fakePool is a pool pointer C never follows (buffers here take and give
// back nothing), outside Go's heap, as cgo wants a pointer it keeps.
func fakePool(t *testing.T) srcConfig {
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return srcConfig{Pool: unsafe.Pointer(&b[0])}
}

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
	if err := o.open(outConfig{Batch: 5, MaxSegs: 1, Held: held, Src: fakePool(t)}); !errors.Is(err, ErrHeldTooSmall) {
		t.Errorf("a burst of 5 over a record of 4: %v, want ErrHeldTooSmall", err)
	}
	if err := o.open(outConfig{Batch: 4, MaxSegs: 1, Held: held}); !errors.Is(err, ErrNoPool) {
		t.Errorf("open without a source: %v, want ErrNoPool", err)
	}
	if err := o.open(outConfig{Batch: 32, MaxSegs: 16, TSCOffset: -5, Src: fakePool(t)}); err != nil {
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
	if err := in.open(inConfig{Batch: 32, Stride: 1518, Src: fakePool(t)}); !errors.Is(err, ErrNoPool) {
		t.Errorf("open with mbufs of no room: %v, want ErrNoPool", err)
	}
	for _, c := range []inConfig{{Batch: 0, Stride: 1518}, {Batch: limits.MaxBatch + 1, Stride: 1518}, {Batch: 1, Stride: 63}, {Batch: 1, Stride: 1<<16 + 1}} {
		if err := in.open(c); err == nil || errors.Is(err, ErrNoPool) {
			t.Errorf("open(%d x %d): %v, want a range error", c.Batch, c.Stride, err)
		}
	}
}

// The app's fresh and spent rings need a held record: what the spent ring
// has no room for stays on it.
func TestBuffersOverTheAppsRingsNeedARecord(t *testing.T) {
	var r [2]uint64
	rings := srcConfig{Fresh: unsafe.Pointer(&r[0]), Spent: unsafe.Pointer(&r[1])}
	var o outBuf
	if err := o.open(outConfig{Batch: 4, MaxSegs: 1, Src: rings}); !errors.Is(err, ErrSourceUnrecorded) {
		t.Errorf("an out buffer over the rings without a record: %v, want ErrSourceUnrecorded", err)
	}
	var in inBuf
	if err := in.open(inConfig{Batch: 4, Stride: 1518, Room: 2048, Src: rings}); !errors.Is(err, ErrSourceUnrecorded) {
		t.Errorf("an in buffer over the rings without a record: %v, want ErrSourceUnrecorded", err)
	}
	if err := in.open(inConfig{Batch: 4, Stride: 1518, Room: 2048, Src: srcConfig{Fresh: rings.Fresh}}); !errors.Is(err, ErrNoPool) {
		t.Errorf("an in buffer over a fresh ring alone: %v, want ErrNoPool", err)
	}
}

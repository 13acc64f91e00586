package ring

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/internal/limits"
)

// fakeMem is memory C never follows (buffers here take and give back
// nothing), outside Go's heap, as cgo wants a pointer it keeps.
func fakeMem(t *testing.T) unsafe.Pointer {
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return unsafe.Pointer(&b[0])
}

// fakePool is a pool pointer C never follows.
func fakePool(t *testing.T) srcConfig { return srcConfig{Pool: fakeMem(t)} }

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

// A source is a pool, or the app's fresh and spent rings, both of them.
func TestABufferOverHalfTheAppsRingsIsRefused(t *testing.T) {
	var in inBuf
	if err := in.open(inConfig{Batch: 4, Stride: 1518, Room: 2048, Src: srcConfig{Fresh: fakeMem(t)}}); !errors.Is(err, ErrNoPool) {
		t.Errorf("an in buffer over a fresh ring alone: %v, want ErrNoPool", err)
	}
	var o outBuf
	if err := o.open(outConfig{Batch: 4, MaxSegs: 1, Src: srcConfig{Spent: fakeMem(t)}}); !errors.Is(err, ErrNoPool) {
		t.Errorf("an out buffer over a spent ring alone: %v, want ErrNoPool", err)
	}
}

// A buffer over the app's rings given no held record (no claim: tests of
// the burst core) keeps one of its own, so that what the spent ring has no
// room for stays on a record; opening and closing it touches no ring.
func TestABufferOverTheAppsRingsWithoutARecordKeepsItsOwn(t *testing.T) {
	rings := srcConfig{Fresh: fakeMem(t), Spent: fakeMem(t)}
	var o outBuf
	if err := o.open(outConfig{Batch: limits.MaxBatch, MaxSegs: 1, Src: rings}); err != nil {
		t.Fatalf("an out buffer over the rings without a record: %v", err)
	}
	if o.b.own == nil || o.b.held.n != &o.b.own.n {
		t.Error("the out buffer keeps no record of its own")
	}
	o.Close()
	var in inBuf
	if err := in.open(inConfig{Batch: limits.MaxBatch, Stride: 1518, Room: 2048, Src: rings}); err != nil {
		t.Fatalf("an in buffer over the rings without a record: %v", err)
	}
	if in.b.own == nil || in.b.held.n != &in.b.own.n {
		t.Error("the in buffer keeps no record of its own")
	}
	in.Close()
}

// A TCP super-frame is copied into one chain however long a buffer's slots
// are: the chain's scratch holds as many mbufs as a 64 KiB frame takes.
func TestAnInBufferChainsASuperFrameLongerThanItsSlots(t *testing.T) {
	var in inBuf
	if err := in.open(inConfig{Batch: 4, Stride: 1518, Room: 2048, Src: fakePool(t)}); err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if got := int(in.b.max_chain) * 2048; got < limits.FrameBuffer {
		t.Errorf("a chain of at most %d mbufs of 2048 bytes: %d bytes, want a super-frame's %d", in.b.max_chain, got, limits.FrameBuffer)
	}
}

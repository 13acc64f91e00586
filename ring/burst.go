package ring

// The burst core's Go half (burst.c's C half): the burst buffers through
// which both app sides move packets, the rte_rings of ring mode
// (port_burst.go) and the vrings of mode vhost (vhost_queue.go), each burst
// in exactly one cgo call and without a Go allocation.
//
// An outBuf describes a dequeued burst of mbuf chains as iovecs into mbuf
// memory with per-packet metadata (a verdict, the NIC's offload hints, the
// enqueue time of residence timing); the iovecs stay valid until the next
// Next, which gives the burst back. An inBuf copies frames the kernel side
// read into fresh mbufs (chained when the data room is small) and hands
// them over; PutTSO builds one TSO chain from a TCP super-frame, PutSplit
// cuts one into MTU frames straight into mbufs (both modes).
// Every mbuf a buffer takes is given back or handed over exactly once.
//
// Where mbufs come from and go back to is the buffer's source (srcConfig,
// burst.h's struct kb_src): a mempool (mode vhost's own; ring mode with an
// app of kbridge.h version 6 or older), or the app's fresh and spent rings
// (ring mode, version 7), through which kbridge never calls the app's pool.
//
// What a burst is dequeued from and enqueued to is the mode's: it passes a
// struct kb_burst_ops of its own C functions (burst.h) when it makes a
// buffer, with the mode's flags, its held record (ring mode's crash
// recovery: the mbufs a buffer holds, in memory the app shares) and its
// residence timing. Each mode's app side embeds the buffers, so their
// methods are its bridge.AppOut and bridge.AppIn.

/*
#include <errno.h>
#include "burst.h"
#include "burst_split.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/internal/limits"
)

// HistBuckets is the number of residence-time buckets; bucket i counts
// packets that waited less than HistBound(i).
const HistBuckets = C.KB_HIST_BUCKETS

// HistBound returns the upper bound of bucket i in nanoseconds (the last
// bucket is open-ended).
func HistBound(i int) uint64 { return 1 << (i + C.KB_HIST_SHIFT) }

var (
	// ErrNoMemory means C memory for a burst buffer could not be had.
	ErrNoMemory = errors.New("out of memory for a burst buffer")
	// ErrNoPool means a buffer was asked for before its mbuf source (a
	// pool, or the app's fresh and spent rings) existed.
	ErrNoPool = errors.New("no mbuf source for a burst buffer")
	// ErrHeldTooSmall means a burst could hold more mbufs than the held
	// record names.
	ErrHeldTooSmall = errors.New("burst is larger than the held-mbuf record")
)

// heldRec names a record of held mbufs in memory the app shares (kbridge.h's
// struct kbridge_held_q): N points at its count, M at its first of Max
// mbuf pointers, Pend (optional) at its word for a ring operation under
// way, which the mode's dequeue_held and enqueue_held keep. In says it is
// the kernel -> app direction's (the test hook's KBRIDGE_TEST_HOLD). The
// zero heldRec is no record.
type heldRec struct {
	N, M, Pend unsafe.Pointer
	Max        int
	In         bool
}

// check refuses a record with less room than a burst of batch.
func (h heldRec) check(batch int) error {
	if h.N != nil && batch > h.Max {
		return fmt.Errorf("%w (%d, record of %d)", ErrHeldTooSmall, batch, h.Max)
	}
	return nil
}

func (h heldRec) c() C.struct_kb_held {
	dir := C.int(C.KB_TEST_HOLD_OUT)
	if h.In {
		dir = C.KB_TEST_HOLD_IN
	}
	return C.struct_kb_held{n: (*C.uint32_t)(h.N), m: (**C.struct_rte_mbuf)(h.M), pend: (*C.uint32_t)(h.Pend), dir: dir}
}

// srcConfig is a buffer's mbuf source: Pool (a struct rte_mempool), or,
// Pool nil, the app's Fresh and Spent rings (struct rte_ring) with
// SpentWaits, the control block's counter of the times Spent had no room.
type srcConfig struct {
	Pool, Fresh, Spent, SpentWaits unsafe.Pointer
}

func (s srcConfig) c() C.struct_kb_src {
	return C.struct_kb_src{pool: (*C.struct_rte_mempool)(s.Pool), fresh: (*C.struct_rte_ring)(s.Fresh),
		spent: (*C.struct_rte_ring)(s.Spent), spent_waits: (*C.uint64_t)(s.SpentWaits)}
}

// check refuses a source that cannot be one.
func (s srcConfig) check() error {
	if s.Pool == nil && (s.Fresh == nil || s.Spent == nil) {
		return ErrNoPool
	}
	return nil
}

// outConfig says how to make an outBuf.
type outConfig struct {
	// Ops points at the mode's struct kb_burst_ops (its dequeue); Ctx is
	// what the mode's functions get (a ring, a queue).
	Ops, Ctx unsafe.Pointer
	// Batch packets per burst of up to MaxSegs segments each (at most
	// limits.MaxBatch and limits.MaxSegments).
	Batch, MaxSegs int
	// ExtBuf accepts mbufs with external buffers (the dequeuer's own);
	// without it they are malformed.
	ExtBuf bool
	// CompleteCsum completes partial checksums (RX_L4_CKSUM_NONE) in
	// software and counts them (CsumCompleted).
	CompleteCsum bool
	// TSCOffset is the mbuf dynamic field holding the app's enqueue TSC,
	// and TSCHz the TSC's rate: the residence-time histogram. A negative
	// offset or a zero rate keeps none.
	TSCOffset int32
	TSCHz     uint64
	// Held, if set, records the burst held between dequeue and free.
	Held heldRec
	// Src takes the burst back once it is written.
	Src srcConfig
}

// outBuf is a burst buffer in the app -> kernel direction. Next, Packet and
// Written belong to one worker; residence and csumCompleted may be called
// from any goroutine.
type outBuf struct {
	mu   sync.Mutex // orders residence and csumCompleted against Close
	b    *C.struct_kb_out
	pkts []C.struct_kb_pkt
	iov  []unix.Iovec
}

// open makes o a burst buffer from cfg.
func (o *outBuf) open(cfg outConfig) error {
	if cfg.Batch <= 0 || cfg.Batch > limits.MaxBatch || cfg.MaxSegs <= 0 || cfg.MaxSegs > limits.MaxSegments {
		return fmt.Errorf("burst of %d packets x %d segments out of range", cfg.Batch, cfg.MaxSegs)
	}
	var flags C.uint16_t
	if cfg.ExtBuf {
		flags |= C.KB_BURST_EXTBUF
	}
	if cfg.CompleteCsum {
		flags |= C.KB_BURST_COMPLETE_CSUM
	}
	tscOffset := cfg.TSCOffset
	if tscOffset < 0 {
		tscOffset = -1
	}
	if err := cfg.Held.check(cfg.Batch); err != nil {
		return err
	}
	if err := cfg.Src.check(); err != nil {
		return err
	}
	b := C.kb_out_new(&C.struct_kb_out{
		ops:        (*C.struct_kb_burst_ops)(cfg.Ops),
		ctx:        cfg.Ctx,
		cap:        C.uint16_t(cfg.Batch),
		max_segs:   C.uint16_t(cfg.MaxSegs),
		flags:      flags,
		tsc_offset: C.int32_t(tscOffset),
		tsc_hz:     C.uint64_t(cfg.TSCHz),
		held:       cfg.Held.c(),
		src:        cfg.Src.c(),
	})
	if b == nil {
		return ErrNoMemory
	}
	// unix.Iovec and struct iovec share their layout: the C side fills
	// what the kernel side hands to writev(2).
	o.b = b
	o.pkts = unsafe.Slice(b.pkts, cfg.Batch)
	o.iov = unsafe.Slice((*unix.Iovec)(unsafe.Pointer(b.iov)), cfg.Batch*cfg.MaxSegs)
	return nil
}

// Next frees the previous burst and dequeues and describes the next one:
// one cgo call. It returns the number of packets.
func (o *outBuf) Next() int { return int(C.kb_out_next(o.b)) }

// Packet returns packet i of the current burst, or why it cannot be
// written whole (bridge.ErrTooManySegments, bridge.ErrMalformed).
func (o *outBuf) Packet(i int) (bridge.Packet, error) {
	p := &o.pkts[i]
	first := int(p.first_seg)
	pkt := bridge.Packet{
		Len:         int(p.pkt_len),
		Segs:        o.iov[first : first+int(p.nb_iov)],
		L4CsumGood:  p.offload&C.KB_PKT_L4_CSUM_GOOD != 0,
		CsumChecked: p.offload&C.KB_PKT_CSUM_CHECKED != 0,
	}
	if p.offload&C.KB_PKT_LRO != 0 {
		pkt.LROSegSize = uint16(p.tso_segsz)
	}
	switch p.verdict {
	case C.KB_PKT_TOO_MANY_SEGS:
		return pkt, bridge.ErrTooManySegments
	case C.KB_PKT_MALFORMED:
		return pkt, bridge.ErrMalformed
	}
	return pkt, nil
}

// Written marks packet i as delivered: it counts toward residence time.
func (o *outBuf) Written(i int) { o.pkts[i].written = 1 }

// residence copies the residence-time histogram into dst. After Close it
// leaves dst as it is.
func (o *outBuf) residence(dst []uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.b == nil {
		return
	}
	for i := range dst {
		if i < HistBuckets {
			dst[i] = uint64(o.b.hist[i])
		}
	}
}

// csumCompleted counts the partial checksums completed in software
// (outConfig.CompleteCsum); 0 after Close.
func (o *outBuf) csumCompleted() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.b == nil {
		return 0
	}
	return uint64(o.b.csum_sw)
}

// Close frees the current burst and the buffer. It may be called more
// than once.
func (o *outBuf) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	C.kb_out_free(o.b)
	o.b = nil
}

// inConfig says how to make an inBuf.
type inConfig struct {
	// Ops points at the mode's struct kb_burst_ops (its enqueue and,
	// optionally, takes_tso); Ctx is what they get.
	Ops, Ctx unsafe.Pointer
	// Src is where mbufs are taken from (and given back to when the app's
	// side does not take them), with Room bytes each after the headroom.
	Src  srcConfig
	Room int
	// Batch slots of Stride bytes each (the largest frame).
	Batch, Stride int
	// TSOMaxSegs is the most segments a TSO chain may have; 0: no limit.
	TSOMaxSegs int
	// Held, if set, records the mbufs taken and not yet handed over.
	Held heldRec
}

// inBuf is a burst buffer in the kernel -> app direction. It belongs to
// one worker.
type inBuf struct {
	mu     sync.Mutex // orders SetReserve and Reserve against Close
	b      *C.struct_kb_in
	buf    []byte
	lens   []uint32
	csum   []uint32
	stride int
}

// open makes in a burst buffer from cfg.
func (in *inBuf) open(cfg inConfig) error {
	if cfg.Batch <= 0 || cfg.Batch > limits.MaxBatch || cfg.Stride < 64 || cfg.Stride > limits.FrameBuffer {
		return fmt.Errorf("burst of %d frames x %d bytes out of range", cfg.Batch, cfg.Stride)
	}
	if err := cfg.Src.check(); err != nil {
		return err
	}
	if err := cfg.Held.check(cfg.Batch); err != nil {
		return err
	}
	if cfg.Room <= 0 {
		return fmt.Errorf("mbufs of %d bytes after the headroom: %w", cfg.Room, ErrNoPool)
	}
	b := C.kb_in_new(&C.struct_kb_in{
		ops:      (*C.struct_kb_burst_ops)(cfg.Ops),
		ctx:      cfg.Ctx,
		src:      cfg.Src.c(),
		room:     C.uint32_t(cfg.Room),
		cap:      C.uint16_t(cfg.Batch),
		stride:   C.uint32_t(cfg.Stride),
		max_segs: C.uint16_t(min(cfg.TSOMaxSegs, 0xffff)),
		held:     cfg.Held.c(),
	})
	if b == nil {
		return ErrNoMemory
	}
	in.b = b
	in.buf = unsafe.Slice((*byte)(unsafe.Pointer(b.buf)), cfg.Batch*cfg.Stride)
	in.lens = unsafe.Slice((*uint32)(unsafe.Pointer(b.lens)), cfg.Batch)
	in.csum = unsafe.Slice((*uint32)(unsafe.Pointer(b.csum)), cfg.Batch)
	in.stride = cfg.Stride
	return nil
}

// Cap returns the number of slots.
func (in *inBuf) Cap() int { return len(in.lens) }

// Slot returns slot i, a buffer of stride bytes.
func (in *inBuf) Slot(i int) []byte {
	return in.buf[i*in.stride : (i+1)*in.stride : (i+1)*in.stride]
}

// Put copies slots 0..len(lens)-1, holding frames of those lengths, into
// mbufs and hands them over: one cgo call. When the app's reserve (SetReserve)
// refuses some, the lengths of those kept are moved to the front of lens.
func (in *inBuf) Put(lens []int) bridge.PutResult {
	for i, n := range lens {
		in.lens[i] = uint32(n)
	}
	in.b.n = C.uint16_t(len(lens))
	C.kb_in_put(in.b)
	// The reserve kept fewer, moved to the front: their lengths come first
	// now, so that what was queued is counted by its own bytes.
	if k := int(in.b.kept); k < len(lens) {
		for i := range k {
			lens[i] = int(in.lens[i])
		}
	}
	return in.result()
}

// PartialCsum marks slot i of the next Put as holding a frame whose
// checksum the kernel left partial (NEEDS_CSUM): Put finishes it in C
// (burst_csum.h's sum), summing from start to the frame's end and storing
// the result at start+offset. It implements bridge.AppCsum for both modes.
func (in *inBuf) PartialCsum(i int, start, offset uint16) {
	in.csum[i] = uint32(start)<<16 | uint32(offset)
}

// The C side's chain scratch covers a super-frame as long as the buffers
// Go reads frames into (a compile error otherwise).
const _ uint = C.KB_IN_FRAME_MAX - limits.FrameBuffer

// PutTSO hands one TCP super-frame over as one mbuf chain marked for TSO:
// one cgo call. bridge.ErrTooManySegments when the app does not take it
// (too many segments, or not this IP version): the caller splits it.
func (in *inBuf) PutTSO(frame []byte, t bridge.TSOFrame) (bridge.PutResult, error) {
	in.setTSO(t)
	if rc := C.kb_in_put_tso(in.b, (*C.uint8_t)(unsafe.Pointer(&frame[0])), C.uint32_t(len(frame))); rc == -C.E2BIG {
		return bridge.PutResult{}, bridge.ErrTooManySegments
	}
	return in.result(), nil
}

// PutSplit cuts one TCP super-frame into MTU frames straight into mbufs
// and hands them over (burst_split.c, with the one cut of burst_cut.h):
// one cgo call, the payload copied once, in both modes.
// bridge.ErrSegmentTooLarge when a segment would not fit one mbuf: the
// caller then has the kernel side split it (tap/vnet's fallback).
func (in *inBuf) PutSplit(frame []byte, t bridge.TSOFrame) (bridge.PutResult, error) {
	in.setTSO(t)
	if rc := C.kb_in_put_split(in.b, (*C.uint8_t)(unsafe.Pointer(&frame[0])), C.uint32_t(len(frame))); rc == -C.E2BIG {
		return bridge.PutResult{}, bridge.ErrSegmentTooLarge
	}
	return in.result(), nil
}

// setTSO describes the super-frame the next kb_in_put_tso or
// kb_in_put_split takes.
func (in *inBuf) setTSO(t bridge.TSOFrame) {
	tso := &in.b.tso
	tso.l2, tso.l3, tso.l4 = C.uint16_t(t.L2), C.uint16_t(t.L3), C.uint16_t(t.L4)
	tso.mss = C.uint16_t(t.MSS)
	tso.ipv6 = 0
	if t.IPv6 {
		tso.ipv6 = 1
	}
}

func (in *inBuf) result() bridge.PutResult {
	return bridge.PutResult{
		Queued:   int(in.b.queued),
		NoMbuf:   int(in.b.no_mbuf),
		RingFull: int(in.b.ring_full),
	}
}

// Close frees the buffer. It may be called more than once.
func (in *inBuf) Close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	C.kb_in_free(in.b)
	in.b = nil
}

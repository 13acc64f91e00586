package ring

/*
#include "burst.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
)

// HistBuckets is the number of residence-time buckets; bucket i counts
// packets that waited less than HistBound(i).
const HistBuckets = C.KB_HIST_BUCKETS

// HistBound returns the upper bound of bucket i in nanoseconds (the last
// bucket is open-ended).
func HistBound(i int) uint64 { return 1 << (i + C.KB_HIST_SHIFT) }

// Out moves bursts from a to_kernel ring into Go's view. It implements
// bridge.AppOut.
type Out struct {
	mu   sync.Mutex // orders Residence (any goroutine) against Close
	b    *C.struct_kb_out_burst
	pkts []C.struct_kb_pkt
	iov  []unix.Iovec
}

var _ bridge.AppOut = (*Out)(nil)

// Out returns a burst reader for this queue's to_kernel ring holding up to
// batch packets of up to maxSegs segments each.
func (q *Queue) Out(batch, maxSegs int) (*Out, error) {
	if batch <= 0 || batch > 1024 || maxSegs <= 0 || maxSegs > 64 {
		return nil, fmt.Errorf("ring: burst of %d packets x %d segments out of range", batch, maxSegs)
	}
	info := &q.port.info
	b := C.kb_out_new(info.to_kernel[q.id], info.tsc_offset, info.tsc_hz,
		C.uint16_t(batch), C.uint16_t(maxSegs))
	if b == nil {
		return nil, errors.New("ring: out of memory for a burst buffer")
	}
	if h := q.port.held; h != nil {
		if C.kb_out_set_held(b, &h.out[q.id]) != 0 {
			C.kb_out_free(b)
			return nil, fmt.Errorf("ring: burst of %d packets is larger than the held-mbuf record (%d)", batch, C.KBRIDGE_HELD_MAX)
		}
	}
	testHoldOnce.Do(setTestHold)
	// unix.Iovec and struct iovec share their layout: the C side fills what
	// Go hands to writev(2) unchanged.
	return &Out{
		b:    b,
		pkts: unsafe.Slice(b.pkts, batch),
		iov:  unsafe.Slice((*unix.Iovec)(unsafe.Pointer(b.iov)), batch*maxSegs),
	}, nil
}

// Next frees the previous burst and dequeues the next one.
func (o *Out) Next() int { return int(C.kb_out_next(o.b)) }

// Packet returns packet i of the current burst.
func (o *Out) Packet(i int) (bridge.Packet, error) {
	p := &o.pkts[i]
	first := int(p.first_seg)
	pkt := bridge.Packet{
		Len:        int(p.pkt_len),
		Segs:       o.iov[first : first+int(p.nb_iov)],
		L4CsumGood: p.offload&C.KB_PKT_L4_CSUM_GOOD != 0,
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
func (o *Out) Written(i int) { o.pkts[i].written = 1 }

// Residence copies the residence-time histogram into dst. After Close it
// leaves dst as it is.
func (o *Out) Residence(dst []uint64) {
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

// Close frees the current burst and the buffer.
func (o *Out) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	C.kb_out_free(o.b)
	o.b = nil
}

// In moves frames read from the kernel into mbufs on a from_kernel ring. It
// implements bridge.AppIn.
type In struct {
	b      *C.struct_kb_in_burst
	tso    C.struct_kb_tso // max_segs set once: the app's; the rest per frame
	takes  bool            // the app declared TSO
	buf    []byte
	lens   []uint32
	stride int
}

var (
	_ bridge.AppIn  = (*In)(nil)
	_ bridge.AppTSO = (*In)(nil)
)

// In returns a burst writer for this queue's from_kernel ring with batch
// slots of stride bytes (the largest frame it can carry).
func (q *Queue) In(batch, stride int) (*In, error) {
	if batch <= 0 || batch > 1024 || stride < 64 || stride > 1<<16 {
		return nil, fmt.Errorf("ring: burst of %d frames x %d bytes out of range", batch, stride)
	}
	b := C.kb_in_new(q.port.info.from_kernel[q.id], q.port.info.pool, C.uint16_t(batch), C.uint32_t(stride))
	if b == nil {
		return nil, errors.New("ring: out of memory for a burst buffer")
	}
	if h := q.port.held; h != nil {
		if C.kb_in_set_held(b, &h.in[q.id]) != 0 {
			C.kb_in_free(b)
			return nil, fmt.Errorf("ring: burst of %d frames is larger than the held-mbuf record (%d)", batch, C.KBRIDGE_HELD_MAX)
		}
	}
	testHoldOnce.Do(setTestHold)
	in := &In{
		b:      b,
		buf:    unsafe.Slice((*byte)(unsafe.Pointer(b.buf)), batch*stride),
		lens:   unsafe.Slice((*uint32)(unsafe.Pointer(b.lens)), batch),
		stride: stride,
	}
	if ok, maxSegs := q.port.AppTSO(); ok {
		in.takes = true
		in.tso.max_segs = C.uint16_t(min(maxSegs, 0xffff))
	}
	return in, nil
}

// TakesTSO reports whether the app declared KBRIDGE_APP_TSO.
func (in *In) TakesTSO() bool { return in.takes }

// PutTSO queues one TCP super-frame as one TSO mbuf chain.
func (in *In) PutTSO(frame []byte, t bridge.TSOFrame) (bridge.PutResult, error) {
	in.tso.l2, in.tso.l3, in.tso.l4 = C.uint16_t(t.L2), C.uint16_t(t.L3), C.uint16_t(t.L4)
	in.tso.mss = C.uint16_t(t.MSS)
	in.tso.ipv6 = 0
	if t.IPv6 {
		in.tso.ipv6 = 1
	}
	if rc := C.kb_in_put_tso(in.b, (*C.uint8_t)(unsafe.Pointer(&frame[0])), C.uint32_t(len(frame)), &in.tso); rc == -C.E2BIG {
		return bridge.PutResult{}, bridge.ErrTooManySegments
	}
	return bridge.PutResult{
		Queued:   int(in.b.queued),
		NoMbuf:   int(in.b.no_mbuf),
		RingFull: int(in.b.ring_full),
	}, nil
}

// Cap returns the number of slots.
func (in *In) Cap() int { return len(in.lens) }

// Slot returns slot i, a buffer of stride bytes.
func (in *In) Slot(i int) []byte {
	return in.buf[i*in.stride : (i+1)*in.stride : (i+1)*in.stride]
}

// Put queues slots 0..len(lens)-1 with those frame lengths.
func (in *In) Put(lens []int) bridge.PutResult {
	for i, n := range lens {
		in.lens[i] = uint32(n)
	}
	in.b.n = C.uint16_t(len(lens))
	C.kb_in_put(in.b)
	return bridge.PutResult{
		Queued:   int(in.b.queued),
		NoMbuf:   int(in.b.no_mbuf),
		RingFull: int(in.b.ring_full),
	}
}

// Close frees the buffer.
func (in *In) Close() {
	C.kb_in_free(in.b)
	in.b = nil
}

package vhost

/*
#include "vhost.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
)

// Queue is the app side of one queue pair: it implements bridge.AppOut (the
// app's TX vring) and bridge.FdWaker (kick suppression on it). Its In
// implements bridge.AppIn and bridge.AppTSO (the app's RX vring).
type Queue struct {
	id   int
	mu   sync.Mutex // orders Close against the readers of b
	b    *C.struct_kb_vh_out
	pkts []C.struct_kb_vh_pkt
	iov  []unix.Iovec

	// Worker thread only.
	gen     C.uint64_t
	kickfd  int // our dup of the TX vring's kick eventfd, watched; -1
	watcher bridge.FdWatcher
	broken  bool // watching the kick fd failed: never park unbounded

	watchErrs atomic.Uint64
}

var (
	_ bridge.AppOut  = (*Queue)(nil)
	_ bridge.FdWaker = (*Queue)(nil)
)

// NewQueue returns queue pair q's app side, with bursts of batch packets of
// up to maxSegs segments each.
func NewQueue(q, batch, maxSegs int) (*Queue, error) {
	if q < 0 || q >= MaxQueues {
		return nil, fmt.Errorf("vhost: queue %d out of range", q)
	}
	if batch <= 0 || batch > 1024 || maxSegs <= 0 || maxSegs > 64 {
		return nil, fmt.Errorf("vhost: burst of %d packets x %d segments out of range", batch, maxSegs)
	}
	b := C.kb_vh_out_new(C.int(q), C.uint16_t(batch), C.uint16_t(maxSegs))
	if b == nil {
		return nil, errors.New("vhost: out of memory for a burst buffer")
	}
	return &Queue{
		id:     q,
		b:      b,
		pkts:   unsafe.Slice(b.pkts, batch),
		iov:    unsafe.Slice((*unix.Iovec)(unsafe.Pointer(b.iov)), batch*maxSegs),
		kickfd: -1,
	}, nil
}

// Next frees the previous burst and dequeues the next one from the app's
// TX vring; 0 while no frontend is connected.
func (q *Queue) Next() int { return int(C.kb_vh_out_next(q.b)) }

// Packet returns packet i of the current burst.
func (q *Queue) Packet(i int) (bridge.Packet, error) {
	p := &q.pkts[i]
	first := int(p.first_seg)
	pkt := bridge.Packet{
		Len:        int(p.pkt_len),
		Segs:       q.iov[first : first+int(p.nb_iov)],
		L4CsumGood: p.offload&C.KB_VH_L4_CSUM_GOOD != 0,
	}
	if p.offload&C.KB_VH_LRO != 0 {
		pkt.LROSegSize = uint16(p.tso_segsz)
	}
	switch p.verdict {
	case C.KB_VH_TOO_MANY_SEGS:
		return pkt, bridge.ErrTooManySegments
	case C.KB_VH_MALFORMED:
		return pkt, bridge.ErrMalformed
	}
	return pkt, nil
}

// Written is a no-op: vhost mode keeps no residence histogram (the app's
// enqueue time is not in the guest's buffers).
func (q *Queue) Written(int) {}

// CsumCompleted counts packets whose partial checksum (NEEDS_CSUM) kbridge
// completed in software.
func (q *Queue) CsumCompleted() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.b == nil {
		return 0
	}
	return uint64(q.b.csum_sw)
}

// Close frees the current burst, stops the callbacks kicking the worker's
// eventfd and closes the kick fd.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	C.kb_vh_set_evfd(C.int(q.id), -1)
	C.kb_vh_out_free(q.b)
	q.b = nil
	if q.kickfd >= 0 {
		if q.watcher != nil {
			_ = q.watcher.Unwatch(q.kickfd)
		}
		unix.Close(q.kickfd)
		q.kickfd = -1
	}
}

// RegisterEventfd takes the worker's eventfd: the device callbacks write it
// whenever the frontend connects, leaves or changes a vring, so that the
// worker re-reads the kick fd. With it, and the kick fd, parks need no bound.
func (q *Queue) RegisterEventfd(fd int) error {
	C.kb_vh_set_evfd(C.int(q.id), C.int(fd))
	return nil
}

// BindWatcher is called by bridge.NewWorker with the worker's waiter.
func (q *Queue) BindWatcher(w bridge.FdWatcher) { q.watcher = w }

// sync follows the device: when it changed, the old kick fd leaves the
// worker's epoll set (before it is closed, or epoll would keep reporting a
// file still open elsewhere) and the new one joins it.
func (q *Queue) sync() {
	fd := int(C.kb_vh_sync(C.int(q.id), &q.gen))
	if fd == -2 {
		return
	}
	if q.kickfd >= 0 {
		if q.watcher != nil {
			_ = q.watcher.Unwatch(q.kickfd)
		}
		unix.Close(q.kickfd)
		q.kickfd = -1
	}
	q.broken = false
	if fd < 0 {
		return
	}
	if q.watcher == nil {
		unix.Close(fd)
		q.broken = true
		return
	}
	if err := q.watcher.Watch(fd); err != nil {
		unix.Close(fd)
		q.broken = true
		q.watchErrs.Add(1)
		return
	}
	q.kickfd = fd
}

// PrepareToPark arms the app's kicks (clears VRING_USED_F_NO_NOTIFY on its
// TX vring), fences and returns how many descriptors already wait. A queue
// whose kick fd could not be watched reports one pending: its worker polls
// instead of parking where no kick could wake it.
func (q *Queue) PrepareToPark() int {
	q.sync()
	if q.broken {
		return 1
	}
	return int(C.kb_vh_prepare_park(C.int(q.id)))
}

// Unpark suppresses the app's kicks again and drains the kick fd.
func (q *Queue) Unpark() { C.kb_vh_unpark(C.int(q.id), C.int(q.kickfd)) }

// In moves frames from the kernel into the app's RX vring. It implements
// bridge.AppIn and bridge.AppTSO.
type In struct {
	b      *C.struct_kb_vh_in
	tso    C.struct_kb_vh_tso
	buf    []byte
	lens   []uint32
	stride int
}

var (
	_ bridge.AppIn  = (*In)(nil)
	_ bridge.AppTSO = (*In)(nil)
)

// NewIn returns queue pair q's writer with batch slots of stride bytes.
func NewIn(q, batch, stride int) (*In, error) {
	if q < 0 || q >= MaxQueues {
		return nil, fmt.Errorf("vhost: queue %d out of range", q)
	}
	if batch <= 0 || batch > 1024 || stride < 64 || stride > 1<<16 {
		return nil, fmt.Errorf("vhost: burst of %d frames x %d bytes out of range", batch, stride)
	}
	b := C.kb_vh_in_new(C.int(q), C.uint16_t(batch), C.uint32_t(stride))
	if b == nil {
		return nil, errors.New("vhost: out of memory for a burst buffer")
	}
	return &In{
		b:      b,
		buf:    unsafe.Slice((*byte)(unsafe.Pointer(b.buf)), batch*stride),
		lens:   unsafe.Slice((*uint32)(unsafe.Pointer(b.lens)), batch),
		stride: stride,
	}, nil
}

// Cap returns the number of slots.
func (in *In) Cap() int { return len(in.lens) }

// Slot returns slot i, a buffer of stride bytes.
func (in *In) Slot(i int) []byte {
	return in.buf[i*in.stride : (i+1)*in.stride : (i+1)*in.stride]
}

// Put enqueues slots 0..len(lens)-1 into the app's RX vring. Frames the
// vring has no room for (or that find no frontend) count as RingFull.
func (in *In) Put(lens []int) bridge.PutResult {
	for i, n := range lens {
		in.lens[i] = uint32(n)
	}
	in.b.n = C.uint16_t(len(lens))
	C.kb_vh_in_put(in.b)
	return bridge.PutResult{
		Queued:   int(in.b.queued),
		NoMbuf:   int(in.b.no_mbuf),
		RingFull: int(in.b.ring_full),
	}
}

// TakesTSO reports whether the connected frontend negotiated GUEST_TSO4 or
// GUEST_TSO6 (a virtio-user port whose app enabled TCP LRO). The worker asks
// at every poll: it reads the features the callbacks store, with an atomic
// load and no cgo call.
func (in *In) TakesTSO() bool {
	_, f := connected()
	return f&(1<<FeatGuestTSO4|1<<FeatGuestTSO6) != 0
}

// PutTSO enqueues one TCP super-frame as one TSO mbuf, which librte_vhost
// turns into a GSO virtio-net header. ErrTooManySegments when the frontend
// did not negotiate TSO for this IP version: the caller splits it.
func (in *In) PutTSO(frame []byte, t bridge.TSOFrame) (bridge.PutResult, error) {
	in.tso.l2, in.tso.l3, in.tso.l4 = C.uint16_t(t.L2), C.uint16_t(t.L3), C.uint16_t(t.L4)
	in.tso.mss = C.uint16_t(t.MSS)
	in.tso.ipv6 = 0
	if t.IPv6 {
		in.tso.ipv6 = 1
	}
	if rc := C.kb_vh_in_put_tso(in.b, (*C.uint8_t)(unsafe.Pointer(&frame[0])), C.uint32_t(len(frame)), &in.tso); rc == -C.E2BIG {
		return bridge.PutResult{}, bridge.ErrTooManySegments
	}
	return bridge.PutResult{
		Queued:   int(in.b.queued),
		NoMbuf:   int(in.b.no_mbuf),
		RingFull: int(in.b.ring_full),
	}, nil
}

// Close frees the buffer.
func (in *In) Close() {
	C.kb_vh_in_free(in.b)
	in.b = nil
}

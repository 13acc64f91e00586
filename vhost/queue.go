package vhost

/*
#include "vhost.h"
*/
import "C"

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/internal/burst"
)

// Queue is the app side of one queue pair: it implements bridge.AppOut (the
// app's TX vring) and bridge.FdWaker (kick suppression on it). Its In
// implements bridge.AppIn and bridge.AppTSO (the app's RX vring).
type Queue struct {
	id int
	b  *burst.Out

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
	// librte_vhost may hand over external buffers: they are its own, and
	// valid for as long as the mbuf. No residence timing: the app's
	// enqueue time is not in the guest's buffers.
	b, err := burst.NewOut(burst.OutConfig{
		Ops:          unsafe.Pointer(&C.kb_vh_burst_ops),
		Ctx:          unsafe.Pointer(&C.kb_vh.q[q]),
		Batch:        batch,
		MaxSegs:      maxSegs,
		ExtBuf:       true,
		CompleteCsum: true,
		TSCOffset:    -1,
	})
	if err != nil {
		return nil, fmt.Errorf("vhost: %w", err)
	}
	return &Queue{id: q, b: b, kickfd: -1}, nil
}

// Next frees the previous burst and dequeues the next one from the app's
// TX vring; 0 while no frontend is connected.
func (q *Queue) Next() int { return q.b.Next() }

// Packet returns packet i of the current burst.
func (q *Queue) Packet(i int) (bridge.Packet, error) { return q.b.Packet(i) }

// Written is a no-op: vhost mode keeps no residence histogram (the app's
// enqueue time is not in the guest's buffers).
func (q *Queue) Written(int) {}

// CsumCompleted counts packets whose partial checksum (NEEDS_CSUM) kbridge
// completed in software.
func (q *Queue) CsumCompleted() uint64 { return q.b.CsumCompleted() }

// Close frees the current burst, stops the callbacks kicking the worker's
// eventfd and closes the kick fd.
func (q *Queue) Close() {
	C.kb_vh_set_evfd(C.int(q.id), -1)
	q.b.Close()
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
type In struct{ b *burst.In }

var (
	_ bridge.AppIn  = (*In)(nil)
	_ bridge.AppTSO = (*In)(nil)
)

// NewIn returns queue pair q's writer with batch slots of stride bytes. The
// pool must exist (CreatePool).
func NewIn(q, batch, stride int) (*In, error) {
	if q < 0 || q >= MaxQueues {
		return nil, fmt.Errorf("vhost: queue %d out of range", q)
	}
	b, err := burst.NewIn(burst.InConfig{
		Ops:    unsafe.Pointer(&C.kb_vh_burst_ops),
		Ctx:    unsafe.Pointer(&C.kb_vh.q[q]),
		Pool:   unsafe.Pointer(C.kb_vh.pool),
		Batch:  batch,
		Stride: stride,
	})
	if err != nil {
		return nil, fmt.Errorf("vhost: %w", err)
	}
	return &In{b: b}, nil
}

// Cap returns the number of slots.
func (in *In) Cap() int { return in.b.Cap() }

// Slot returns slot i, a buffer of stride bytes.
func (in *In) Slot(i int) []byte { return in.b.Slot(i) }

// Put enqueues slots 0..len(lens)-1 into the app's RX vring. Frames the
// vring has no room for (or that find no frontend) count as RingFull.
func (in *In) Put(lens []int) bridge.PutResult { return in.b.Put(lens) }

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
	return in.b.PutTSO(frame, t)
}

// Close frees the buffer.
func (in *In) Close() { in.b.Close() }

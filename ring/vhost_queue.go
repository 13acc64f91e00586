package ring

// Mode vhost's app side of one queue pair over the burst core.

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
	"github.com/kbridge/kbridge/vhost"
)

// VhostQueue is the app side of one queue pair: the burst core's out
// buffer over kb_vh_burst_ops, it implements bridge.AppOut (the app's TX
// vring) and bridge.Waker, with kick suppression on the vring and its kick
// fd watched by the worker (BindWatcher). Its VhostIn implements
// bridge.AppIn and bridge.AppTSO (the app's RX vring). VhostApp makes the
// two a worker's bridge.App.
type VhostQueue struct {
	outBuf
	id int

	// Worker thread only.
	gen     C.uint64_t
	kickfd  int // our dup of the TX vring's kick eventfd, watched; -1
	watcher bridge.FdWatcher
	broken  bool // watching the kick fd failed: never park unbounded

	watchErrs atomic.Uint64
}

var (
	_ bridge.AppOut     = (*VhostQueue)(nil)
	_ bridge.Waker      = (*VhostQueue)(nil)
	_ bridge.AppPolicer = (*VhostQueue)(nil)
)

// VhostApp is queue pair q and in as a worker's app side: q the waker,
// whose kick fd the worker watches, in taking TCP super-frames whole while
// the frontend negotiated TSO and cutting them into MTU frames otherwise,
// CoPP's policers and reserve.
func VhostApp(q *VhostQueue, in *VhostIn) bridge.App {
	return bridge.App{Out: q, In: in, Waker: q, TSO: in, Split: in, Csum: in, Policer: q, Reserver: in, WatchKicks: q.BindWatcher}
}

// NewVhostQueue returns queue pair q's app side, with bursts of batch
// packets of up to maxSegs segments each. kbridge's pool must exist
// (CreateVhostPool): what the frontend sent goes back to it.
func NewVhostQueue(q, batch, maxSegs int) (*VhostQueue, error) {
	if q < 0 || q >= VhostMaxQueues {
		return nil, fmt.Errorf("vhost: queue %d out of range", q)
	}
	// librte_vhost may hand over external buffers: they are its own, and
	// valid for as long as the mbuf. No residence timing: the app's
	// enqueue time is not in the guest's buffers.
	vq := &VhostQueue{id: q, kickfd: -1}
	err := vq.open(outConfig{
		Ops:          unsafe.Pointer(&C.kb_vh_burst_ops),
		Ctx:          unsafe.Pointer(&C.kb_vh.q[q]),
		Batch:        batch,
		MaxSegs:      maxSegs,
		ExtBuf:       true,
		CompleteCsum: true,
		TSCOffset:    -1,
		Src:          srcConfig{Pool: unsafe.Pointer(C.kb_vh.pool)},
	})
	if err != nil {
		return nil, fmt.Errorf("vhost: %w", err)
	}
	return vq, nil
}

// Written is a no-op: vhost mode keeps no residence histogram (the app's
// enqueue time is not in the guest's buffers).
func (q *VhostQueue) Written(int) {}

// CsumCompleted counts packets whose partial checksum (NEEDS_CSUM) kbridge
// completed in software.
func (q *VhostQueue) CsumCompleted() uint64 { return q.csumCompleted() }

// Close frees the current burst, stops the callbacks kicking the worker's
// eventfd and closes the kick fd.
func (q *VhostQueue) Close() {
	C.kb_vh_set_evfd(C.int(q.id), -1)
	q.outBuf.Close()
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
func (q *VhostQueue) RegisterEventfd(fd int) error {
	C.kb_vh_set_evfd(C.int(q.id), C.int(fd))
	return nil
}

// BindWatcher is called by bridge.NewWorker with the worker's waiter
// (bridge.App.WatchKicks).
func (q *VhostQueue) BindWatcher(w bridge.FdWatcher) { q.watcher = w }

// sync follows the device: when it changed, the old kick fd leaves the
// worker's epoll set (before it is closed, or epoll would keep reporting a
// file still open elsewhere) and the new one joins it.
func (q *VhostQueue) sync() {
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
func (q *VhostQueue) PrepareToPark() int {
	q.sync()
	if q.broken {
		return 1
	}
	return int(C.kb_vh_prepare_park(C.int(q.id)))
}

// Unpark suppresses the app's kicks again and drains the kick fd.
func (q *VhostQueue) Unpark() { C.kb_vh_unpark(C.int(q.id), C.int(q.kickfd)) }

// VhostIn moves frames from the kernel into the app's RX vring: the burst
// core's in buffer over kb_vh_burst_ops. It implements bridge.AppIn,
// bridge.AppTSO and bridge.AppSplit.
type VhostIn struct{ inBuf }

var (
	_ bridge.AppIn       = (*VhostIn)(nil)
	_ bridge.AppTSO      = (*VhostIn)(nil)
	_ bridge.AppSplit    = (*VhostIn)(nil)
	_ bridge.AppCsum     = (*VhostIn)(nil)
	_ bridge.AppReserver = (*VhostIn)(nil)
)

// NewVhostIn returns queue pair q's writer with batch slots of stride
// bytes. The pool must exist (CreateVhostPool).
func NewVhostIn(q, batch, stride int) (*VhostIn, error) {
	if q < 0 || q >= VhostMaxQueues {
		return nil, fmt.Errorf("vhost: queue %d out of range", q)
	}
	in := &VhostIn{}
	err := in.open(inConfig{
		Ops:    unsafe.Pointer(&C.kb_vh_burst_ops),
		Ctx:    unsafe.Pointer(&C.kb_vh.q[q]),
		Src:    srcConfig{Pool: unsafe.Pointer(C.kb_vh.pool)},
		Room:   int(C.kb_pool_data_room(C.kb_vh.pool)),
		Batch:  batch,
		Stride: stride,
	})
	if err != nil {
		return nil, fmt.Errorf("vhost: %w", err)
	}
	return in, nil
}

// TakesTSO reports whether the connected frontend negotiated GUEST_TSO4 or
// GUEST_TSO6 (a virtio-user port whose app enabled TCP LRO). The worker asks
// at every poll: it reads the features the callbacks store, with an atomic
// load and no cgo call.
//
// Put enqueues into the app's RX vring: frames the vring has no room for
// (or that find no frontend) count as RingFull. PutTSO enqueues a TCP
// super-frame as one TSO mbuf, which librte_vhost turns into a GSO
// virtio-net header; ErrTooManySegments when the frontend did not
// negotiate TSO for this IP version: the caller splits it.
func (in *VhostIn) TakesTSO() bool {
	_, f := vhostConnected()
	return f&(1<<vhost.FeatGuestTSO4|1<<vhost.FeatGuestTSO6) != 0
}

package ring

/*
#include <stdlib.h>
#include "port.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/copp"
)

// ErrNoPort means the app has not created the named exception port.
var ErrNoPort = errors.New("ring: no kbridge port")

// ErrPoolUnfit is returned when the app's mempool is no pktmbuf pool or its
// mbufs hold too little after their headroom for kbridge to fill them.
var ErrPoolUnfit = errors.New("ring: the app's mempool cannot take kbridge's frames")

// ErrPoolHandler means the app (kbridge.h version 6 or older, whose mbufs
// kbridge allocates and frees itself) has a pool whose mempool handler is
// another in kbridge's table than in the app's: kbridge would corrupt it.
var ErrPoolHandler = errors.New("ring: the app's mempool handler is not kbridge's")

// ErrLayoutMismatch means the app (kbridge.h version 7) was built with
// another mbuf or ring layout than kbridge: they cannot share them.
var ErrLayoutMismatch = errors.New("ring: the app's mbuf and ring layout is not kbridge's")

// Port is an exception port created by the app with kbridge_port_create().
type Port struct {
	name string
	info C.struct_kb_port_info
	// Read at open: the control block and the pool may vanish once the
	// port is released (kbridge_port_free), these stay readable.
	appPID   int
	poolSize int

	// mu orders reads of the app's shared memory (ctl, pool, rings)
	// outside the workers against Release: once released, the app may
	// free it at any moment, and nothing here reads it again.
	mu       sync.RWMutex
	released bool
	owner    uint64                 // this process's owner value once claimed
	held     *C.struct_kbridge_held // the record of what workers hold, or nil
	served   bool                   // SetServed told the app; Release takes it back

	// Of the mailbox (port_requests.go), touched only by the keeper, which
	// serializes requests: the value the app must take before another is
	// posted, the request Ask posted last, and the app's refusal of an
	// undo not yet reported.
	undo, last  pending
	undoRefused error
}

// OpenPort finds the exception port the app created under name.
func OpenPort(name string) (*Port, error) {
	p := &Port{name: name}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	switch rc := C.kb_port_open(cname, &p.info); rc {
	case 0:
		p.appPID = int(p.info.ctl.app_pid)
		p.poolSize = int(C.kb_pool_size(p.info.pool))
		return p, nil
	case -C.EINVAL:
		return nil, fmt.Errorf("ring: port %q: invalid control block: %s: rebuild the app with this kbridge's kbridge.h",
			name, C.GoString(&p.info.why[0]))
	case -C.ENOENT:
		return nil, fmt.Errorf("%w named %q: the DPDK app must call kbridge_port_create(\"%s\", ...)",
			ErrNoPort, name, name)
	case -C.EPROTO, -C.EPROTONOSUPPORT:
		return nil, fmt.Errorf("ring: port %q: control block magic/version mismatch (kbridge speaks versions %d to %d): rebuild the app with this kbridge's kbridge.h",
			name, C.KBRIDGE_VERSION_MIN, C.KBRIDGE_VERSION)
	case -C.EBADMSG:
		return nil, fmt.Errorf("ring: port %q: control block shorter than its version says: rebuild the app with this kbridge's kbridge.h", name)
	case -C.ENOBUFS:
		return nil, fmt.Errorf("%w: port %q: %s", ErrPoolUnfit, name, C.GoString(&p.info.why[0]))
	case -C.ESRCH:
		return nil, fmt.Errorf("ring: port %q: mempool %q not found", name, C.GoString(&p.info.ctl.mempool[0]))
	case -C.ELIBBAD:
		return nil, fmt.Errorf("%w: port %q: %s: kbridge would corrupt the pool; rebuild the app with kbridge.h version 7, "+
			"whose mbufs the app allocates and frees itself (the usual cause: an app that links DPDK statically, whose handlers are ordered otherwise)",
			ErrPoolHandler, name, C.GoString(&p.info.why[0]))
	case -C.ENOEXEC:
		return nil, fmt.Errorf("%w: port %q: %s: build kbridge and the app against the same DPDK, built with the same options",
			ErrLayoutMismatch, name, C.GoString(&p.info.why[0]))
	default:
		return nil, fmt.Errorf("ring: open port %q: %w", name, unix.Errno(-rc))
	}
}

// Name returns the port's name.
func (p *Port) Name() string { return p.name }

// NumQueues returns how many queue pairs the app created.
func (p *Port) NumQueues() int { return int(p.info.nb_queues) }

// Warning says what OpenPort turned off because the control block said
// something insane (the TSC rate, the timestamp field), or "".
func (p *Port) Warning() string { return C.GoString(&p.info.warn[0]) }

// PoolInUse returns how many mbufs of the app's mempool are allocated; 0
// once the port is released (the app may have freed the pool), and -1 for
// an app of kbridge.h version 7: counting asks the pool's handler, which
// kbridge never calls for it.
func (p *Port) PoolInUse() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released {
		return 0
	}
	if p.AppAllocates() {
		return -1
	}
	return int(C.kb_pool_in_use(p.info.pool))
}

// AppAllocates reports whether the app allocates and frees every mbuf of
// the port itself, on its fresh and spent rings (kbridge.h version 7):
// kbridge then never calls its pool's handlers.
func (p *Port) AppAllocates() bool { return p.info.version >= 7 }

// PoolHandler names the app pool's mempool handler: the app's name for it
// (kbridge.h version 7, which records it), else kbridge's, by the pool's
// index in kbridge's table, which OpenPort checked is the pool's.
func (p *Port) PoolHandler() string {
	if p.AppAllocates() {
		return C.GoString(&p.info.app_ops[0])
	}
	return C.GoString(&p.info.my_ops[0])
}

// PoolSize returns the number of mbufs in the app's mempool.
func (p *Port) PoolSize() int { return p.poolSize }

// DataRoom returns the bytes one mbuf of the app's pool holds after headroom.
func (p *Port) DataRoom() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released {
		return 0
	}
	return int(C.kb_pool_data_room(p.info.pool))
}

// AppTSO reports whether the app's port takes TCP super-frames as one TSO
// mbuf chain (KBRIDGE_APP_TSO, header version 2), and with how many
// segments at most.
func (p *Port) AppTSO() (ok bool, maxSegs int) {
	return p.info.app_offloads&C.KBRIDGE_APP_TSO != 0, int(p.info.app_max_segs)
}

// AppDPDK returns the DPDK the app runs, as its kbridge.h (version 3)
// recorded it (rte_version(), "DPDK 24.11.8"), or "" for an older app.
func (p *Port) AppDPDK() string { return C.GoString(&p.info.dpdk_version[0]) }

// AppPID returns the process ID of the app that created the port.
func (p *Port) AppPID() int { return p.appPID }

// Queue returns queue pair i.
func (p *Port) Queue(i int) (*Queue, error) {
	if i < 0 || i >= p.NumQueues() {
		return nil, fmt.Errorf("ring: port %q has %d queues, no queue %d", p.name, p.NumQueues(), i)
	}
	return &Queue{port: p, id: i, qc: &p.info.ctl.q[i]}, nil
}

// Queue is one pair of rings: to_kernel (app -> kernel) and from_kernel.
type Queue struct {
	port *Port
	id   int
	qc   *C.struct_kbridge_queue_ctl
}

// ID returns the queue number.
func (q *Queue) ID() int { return q.id }

// RegisterEventfd hands fd to the app so that kbridge_to_kernel() can wake a
// parked worker. It fails when the app does not answer (it then is not a
// kbridge.h app, or its IPC is disabled); the worker must then bound its
// sleeps itself.
func (q *Queue) RegisterEventfd(fd int) error {
	cname := C.CString(q.port.name)
	defer C.free(unsafe.Pointer(cname))
	if rc := C.kb_send_eventfd(cname, C.uint16_t(q.id), C.int(fd)); rc < 0 {
		return fmt.Errorf("ring: hand eventfd of queue %d to the app: %w", q.id, unix.Errno(-rc))
	}
	return nil
}

// PrepareToPark sets the need-wakeup flag, fences and re-checks the ring in
// one C call, so that the order of the three does not rest on what a Go
// atomic and a cgo call happen to imply on one architecture.
func (q *Queue) PrepareToPark() int {
	return int(C.kb_prepare_to_park(q.qc, q.port.info.to_kernel[q.id]))
}

// Unpark clears the need-wakeup flag.
func (q *Queue) Unpark() { C.kb_unpark(q.qc) }

// Pending returns how many packets wait in the to_kernel ring.
func (q *Queue) Pending() int {
	q.port.mu.RLock()
	defer q.port.mu.RUnlock()
	if q.port.released {
		return 0
	}
	return int(C.kb_ring_count(q.port.info.to_kernel[q.id]))
}

// AppCounters are the counters the app's side of the queue keeps.
type AppCounters struct {
	ToKernel        uint64 `json:"to_kernel"`
	ToKernelDropped uint64 `json:"to_kernel_dropped"`
	FromKernel      uint64 `json:"from_kernel"`
	Kicks           uint64 `json:"kicks"`
	// Of ToKernel: control and neighbour frames queued into the ring's
	// reserve. Of ToKernelDropped: control and neighbour frames freed
	// with the reserve full too (an app of kbridge.h version 6; 0 before).
	ToKernelReserved        uint64 `json:"to_kernel_reserved"`
	ToKernelDroppedControl  uint64 `json:"to_kernel_dropped_control"`
	ToKernelDroppedNeighbor uint64 `json:"to_kernel_dropped_neighbor"`
	// The fresh and spent rings (kbridge.h version 7; 0 before): mbufs the
	// app put on the fresh ring for kbridge, refills its pool could not
	// complete, mbufs it freed off the spent ring, and how often kbridge
	// found the spent ring without room for what it was done with (it
	// kept them and put them later).
	FreshPut   uint64 `json:"fresh_put"`
	FreshShort uint64 `json:"fresh_short"`
	SpentFreed uint64 `json:"spent_freed"`
	SpentWaits uint64 `json:"spent_waits"`
}

// AppCounters reads the app's counters for this queue.
func (q *Queue) AppCounters() AppCounters {
	q.port.mu.RLock()
	defer q.port.mu.RUnlock()
	if q.port.released {
		return AppCounters{}
	}
	ld := func(p *C.uint64_t) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(p))) }
	c := AppCounters{
		ToKernel:        ld(&q.qc.to_kernel_pkts),
		ToKernelDropped: ld(&q.qc.to_kernel_dropped),
		FromKernel:      ld(&q.qc.from_kernel_pkts),
		Kicks:           ld(&q.qc.kicks),
	}
	if q.port.info.version >= 6 {
		c.ToKernelReserved = ld(&q.qc.to_kernel_reserved)
		c.ToKernelDroppedControl = ld(&q.qc.to_kernel_dropped_control)
		c.ToKernelDroppedNeighbor = ld(&q.qc.to_kernel_dropped_neighbor)
	}
	if q.port.info.version >= 7 {
		qm := &q.port.info.ctl.qm[q.id]
		c.FreshPut, c.FreshShort = ld(&qm.fresh_put), ld(&qm.fresh_short)
		c.SpentFreed = ld(&qm.spent_freed_rx) + ld(&qm.spent_freed_tx)
		c.SpentWaits = ld(&qm.spent_waits)
	}
	return c
}

// RoomDrops puts what the app's to_kernel reserve did into dst's
// ToKernelRoom (by class: the app counts management frames as default)
// and ToKernelReserved.
func (c AppCounters) RoomDrops(dst *copp.Snapshot) {
	dst.ToKernelReserved = c.ToKernelReserved
	dst.ToKernelRoom[copp.Control] = c.ToKernelDroppedControl
	dst.ToKernelRoom[copp.Neighbor] = c.ToKernelDroppedNeighbor
	dst.ToKernelRoom[copp.Default] = c.ToKernelDropped - c.ToKernelDroppedControl - c.ToKernelDroppedNeighbor
}

// PortNames names the ports the app has created and not begun to free, in
// the order of its memzones: what `discover` serves.
func PortNames() []string {
	n := 64
	for {
		buf := make([][C.KBRIDGE_NAME_MAX + 1]C.char, n)
		got := int(C.kb_port_names(&buf[0], C.int(n)))
		if got > n {
			n = got + 16 // more were made meanwhile: look again
			continue
		}
		names := make([]string, got)
		for i := range names {
			names[i] = C.GoString(&buf[i][0])
		}
		return names
	}
}

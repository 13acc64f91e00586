// Package ringtest plays the DPDK application's side of kbridge.h in tests:
// it starts a real EAL primary in the test process, creates exception ports
// and mempools, injects crafted mbufs (chains, wrong lengths) and collects
// what the kernel sent. Root and hugepages are needed.
package ringtest

/*
#include <stdlib.h>
#include "primary.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InitPrimary starts the EAL as a primary with file prefix prefix, using mem
// MB of hugepages, on a thread that exits afterwards (see ring.InitSecondary).
func InitPrimary(prefix string, memMB int) error {
	args := []string{"kbridge-test", "--proc-type=primary", "--file-prefix=" + prefix,
		"--no-pci", "--no-telemetry", "-m", fmt.Sprint(memMB), "--lcores=0@(0-" + fmt.Sprint(runtime.NumCPU()-1) + ")"}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var mask unix.CPUSet
		_ = unix.SchedGetaffinity(0, &mask)
		argv := (**C.char)(C.malloc(C.size_t(len(args)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		cargv := unsafe.Slice(argv, len(args))
		for i, a := range args {
			cargv[i] = C.CString(a) // EAL keeps these: never freed
		}
		rc := C.kbt_init(C.int(len(args)), argv)
		_ = unix.SchedSetaffinity(0, &mask)
		if rc < 0 {
			errc <- fmt.Errorf("ringtest: rte_eal_init %q: %w", args, unix.Errno(-rc))
			return
		}
		errc <- nil
	}()
	return <-errc
}

// Pool is an mbuf pool of the test primary.
type Pool struct {
	mp    *C.struct_rte_mempool
	name  string
	mu    sync.Mutex
	ports []*Port // live ports whose fresh and spent rings InUse leaves out
}

// NewPool creates a pool of n mbufs of DPDK's default size, with no cache.
func NewPool(name string, n int) (*Pool, error) {
	return newPool(name, func(c *C.char) *C.struct_rte_mempool { return C.kbt_pool(c, C.uint(n)) })
}

// NewPoolRoom is NewPool with mbufs of dataRoom bytes, headroom included
// (NewPool's are RTE_MBUF_DEFAULT_BUF_SIZE).
func NewPoolRoom(name string, n, dataRoom int) (*Pool, error) {
	return newPool(name, func(c *C.char) *C.struct_rte_mempool {
		return C.kbt_pool_room(c, C.uint(n), C.uint16_t(dataRoom))
	})
}

// NewPlainPool creates a mempool of n 2048-byte objects that is no pktmbuf
// pool (no private data), as an app might pass by mistake.
func NewPlainPool(name string, n int) (*Pool, error) {
	return newPool(name, func(c *C.char) *C.struct_rte_mempool { return C.kbt_plain_pool(c, C.uint(n)) })
}

// NewForeignPool creates a pool of n mbufs of DPDK's default size, with no
// cache, whose mempool handler exists in this process only: ring_mp_mc's
// functions registered under another name after EAL started, at an index
// a secondary's handler table does not have. A kbridge that called the
// pool's handlers would call nothing there.
func NewForeignPool(name string, n int) (*Pool, error) {
	return newPool(name, func(c *C.char) *C.struct_rte_mempool { return C.kbt_foreign_pool(c, C.uint(n)) })
}

// OpsIndex is the index of mempool handler name in this process's table,
// -1 when it has none.
func OpsIndex(name string) int {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return int(C.kbt_ops_index(cname))
}

// SetOpsIndex gives the pool handler index i, as a primary whose handler
// table is ordered otherwise (a statically linked app) would have it, and
// returns the old one. The pool must not be used until it is set back.
func (p *Pool) SetOpsIndex(i int) int { return int(C.kbt_set_ops_index(p.mp, C.int(i))) }

// newPool creates a pool called name with create.
func newPool(name string, create func(*C.char) *C.struct_rte_mempool) (*Pool, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	mp := create(cname)
	if mp == nil {
		return nil, fmt.Errorf("ringtest: mempool %q: %w", name, unix.Errno(C.rte_errno_get()))
	}
	return &Pool{mp: mp, name: name}, nil
}

// Free frees the pool and its memory (rte_mempool_free), once no port and
// no kbridge uses it: a test binary run with -count=N makes its pools N
// times, and the primary's memory would grow by each until the hugepages
// ran out.
func (p *Pool) Free() {
	C.rte_mempool_free(p.mp)
	p.mp = nil
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// InUse returns how many mbufs are allocated and in use: held by the test,
// in a port's to_kernel or from_kernel ring, or held by kbridge. Those the
// app keeps on its live ports' fresh rings for kbridge, and those kbridge
// put on their spent rings for the app to free (kbridge.h version 7), are
// the app's spares: not counted.
func (p *Pool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	parked := func() (n int) {
		for _, port := range p.ports {
			n += int(C.kbt_port_parked(port.p))
		}
		return n
	}
	// kbridge moves mbufs between the rings meanwhile: read until a
	// count of the rings' holds on both sides of the pool's.
	for i := 0; ; i++ {
		before := parked()
		used := int(C.kbt_in_use(p.mp))
		if parked() == before || i == 1000 {
			return used - before
		}
	}
}

// RawInUse is the pool's own count of mbufs in use, spares included.
func (p *Pool) RawInUse() int { return int(C.kbt_in_use(p.mp)) }

// Hold allocates every free mbuf and returns a function that frees them.
func (p *Pool) Hold() (n int, release func()) {
	const max = 1 << 16
	held := (**C.struct_rte_mbuf)(C.malloc(max * C.size_t(unsafe.Sizeof((*C.struct_rte_mbuf)(nil)))))
	got := C.kbt_hold(p.mp, held, max)
	return int(got), func() {
		C.kbt_release(held, got)
		C.free(unsafe.Pointer(held))
	}
}

// Port is an exception port the test created, as an app would.
type Port struct {
	p    *C.struct_kbridge_port
	pool *Pool
	name string
}

// NewPort creates exception port name with the given queues and ring size,
// allocating kernel-to-app mbufs from pool.
func NewPort(name string, queues, ringSize int, pool *Pool) (*Port, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	p := C.kbt_port(cname, C.uint16_t(queues), C.uint(ringSize), pool.mp)
	if p == nil {
		return nil, fmt.Errorf("ringtest: kbridge_port_create(%q): %w", name, unix.Errno(C.rte_errno_get()))
	}
	port := &Port{p: p, pool: pool, name: name}
	pool.mu.Lock()
	pool.ports = append(pool.ports, port)
	pool.mu.Unlock()
	return port, nil
}

// InjectOpts shape the mbufs Inject builds.
type InjectOpts struct {
	SegSize  int // bytes per segment; 0: one segment per frame
	LenDelta int // added to pkt_len: a non-zero value makes the mbuf malformed
	// Raw enqueues on to_kernel without kbridge_to_kernel(), which frees
	// what the spent ring holds: an app that never frees it.
	Raw bool
}

// Inject hands frames to kbridge_to_kernel() on queue q and returns how many
// it queued (the rest it freed and counted as dropped).
func (p *Port) Inject(q int, frames [][]byte, o InjectOpts) (int, error) {
	if len(frames) == 0 {
		return 0, nil
	}
	var buf []byte
	lens := make([]C.uint32_t, len(frames))
	for i, f := range frames {
		buf = append(buf, f...)
		lens[i] = C.uint32_t(len(f))
	}
	rc := C.kbt_inject(p.p, C.uint16_t(q), p.pool.mp, (*C.uint8_t)(unsafe.Pointer(&buf[0])),
		&lens[0], C.uint16_t(len(frames)), C.uint16_t(o.SegSize), C.int32_t(o.LenDelta), cbool(o.Raw))
	if rc < 0 {
		return 0, fmt.Errorf("ringtest: inject: %w", unix.Errno(-rc))
	}
	return int(rc), nil
}

// Collect takes up to max packets the kernel sent on queue q, copied out.
func (p *Port) Collect(q, max int) [][]byte {
	if max <= 0 {
		return nil
	}
	buf := make([]byte, max*16384)
	lens := make([]C.uint32_t, max)
	n := int(C.kbt_collect(p.p, C.uint16_t(q), (*C.uint8_t)(unsafe.Pointer(&buf[0])),
		C.uint32_t(len(buf)), &lens[0], C.uint16_t(max)))
	out := make([][]byte, 0, n)
	off := 0
	for _, l := range lens[:n] {
		out = append(out, append([]byte(nil), buf[off:off+int(l)]...))
		off += int(l)
	}
	return out
}

// Meta is what an app sees of one mbuf the kernel sent, beside its bytes.
type Meta struct {
	OlFlags    uint64
	PktLen     int
	NbSegs     int
	L2, L3, L4 int
	TSOSegSize int
}

// TxTCPSeg is RTE_MBUF_F_TX_TCP_SEG: the app's port is to segment the mbuf.
const TxTCPSeg = uint64(C.RTE_MBUF_F_TX_TCP_SEG)

// CollectOne takes one packet the kernel sent on queue q with its metadata.
func (p *Port) CollectOne(q int) ([]byte, Meta, bool) {
	buf := make([]byte, 1<<17)
	var m C.struct_kbt_meta
	if C.kbt_collect_one(p.p, C.uint16_t(q), (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.uint32_t(len(buf)), &m) == 0 {
		return nil, Meta{}, false
	}
	return buf[:min(int(m.pkt_len), len(buf))], Meta{
		OlFlags: uint64(m.ol_flags), PktLen: int(m.pkt_len), NbSegs: int(m.nb_segs),
		L2: int(m.l2), L3: int(m.l3), L4: int(m.l4), TSOSegSize: int(m.tso_segsz),
	}, true
}

// DeclareTSO says, as an app whose port does TSO would, that kbridge may
// hand it TCP super-frames whole (KBRIDGE_APP_TSO), in chains of at most
// maxSegs mbufs. Call it before kbridge opens the port.
func (p *Port) DeclareTSO(maxSegs int) {
	C.kbt_declare_tso(p.p, C.uint16_t(maxSegs))
}

// Preload keeps frame in C memory for InjectPreloaded.
func Preload(frame []byte) {
	C.kbt_preload((*C.uint8_t)(unsafe.Pointer(&frame[0])), C.uint32_t(len(frame)))
}

// InjectPreloaded hands n copies of the preloaded frame to
// kbridge_to_kernel() without allocating in Go: for allocation tests.
func (p *Port) InjectPreloaded(q, n int) int {
	return int(C.kbt_inject_preloaded(p.p, C.uint16_t(q), p.pool.mp, C.uint16_t(n)))
}

// Drain frees what the kernel sent on queue q and returns how many there
// were, without copying or allocating in Go.
func (p *Port) Drain(q int) int { return int(C.kbt_drain(p.p, C.uint16_t(q))) }

// Counters are the app side's counters of queue q.
type Counters struct {
	ToKernel, ToKernelDropped, FromKernel, Kicks uint64
	HaveEventfd                                  bool
	// The to_kernel ring's reserve (kbridge.h version 6).
	ToKernelReserved, ToKernelDroppedControl, ToKernelDroppedNeighbor uint64
}

// Counters reads queue q's app-side counters.
func (p *Port) Counters(q int) Counters {
	var c [8]C.uint64_t
	C.kbt_counters(p.p, C.uint16_t(q), &c[0])
	return Counters{
		ToKernel:                uint64(c[0]),
		ToKernelDropped:         uint64(c[1]),
		FromKernel:              uint64(c[2]),
		Kicks:                   uint64(c[3]),
		HaveEventfd:             c[4] != 0,
		ToKernelReserved:        uint64(c[5]),
		ToKernelDroppedControl:  uint64(c[6]),
		ToKernelDroppedNeighbor: uint64(c[7]),
	}
}

// ToKernelCost times rounds bursts of n copies of frame through
// kbridge_to_kernel() and through a bare rte_ring_enqueue_burst() on queue
// q's empty to_kernel ring, filled first to all but room slots, each burst
// dequeued again: ns of each. No worker may serve the queue.
func (p *Port) ToKernelCost(q int, frame []byte, n, rounds, room int) (header, bare time.Duration, err error) {
	var out [2]C.uint64_t
	rc := C.kbt_to_kernel_cost(p.p, C.uint16_t(q), p.pool.mp, (*C.uint8_t)(unsafe.Pointer(&frame[0])),
		C.uint32_t(len(frame)), C.uint16_t(n), C.uint32_t(rounds), C.uint32_t(room), &out[0])
	if rc != 0 {
		return 0, 0, fmt.Errorf("ringtest: kbt_to_kernel_cost: %w", unix.Errno(-rc))
	}
	return time.Duration(out[0]), time.Duration(out[1]), nil
}

// Free drains and frees the port's rings and control block
// (kbridge_port_free). While the kbridge that owns the port still runs
// after the header's wait it frees nothing and returns an error matching
// unix.EBUSY; the port stays usable and Free may be called again.
func (p *Port) Free() error {
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	if rc := C.kbt_port_free(p.p); rc < 0 {
		return fmt.Errorf("ringtest: kbridge_port_free(%s): %w", p.name, unix.Errno(-rc))
	}
	p.p = nil
	p.pool.ports = slices.DeleteFunc(p.pool.ports, func(o *Port) bool { return o == p })
	return nil
}

// SetLink reports the port's link as an app does (kbridge_port_set_link).
func (p *Port) SetLink(up bool, speedMbps uint32, fullDuplex bool) {
	C.kbt_set_link(p.p, cbool(up), C.uint32_t(speedMbps), cbool(fullDuplex))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// SetOwner writes the control block's owner (kbridge_ctl.owner) as a
// kbridge's claim would: OwnerValue(pid, start).
func (p *Port) SetOwner(v uint64) { C.kbt_set_owner(p.p, C.uint64_t(v)) }

// WaitServed is kbridge_port_wait_served(): nil once a kbridge serves the
// port, else an error matching unix.ECONNREFUSED (with kbridge's reason)
// or unix.ETIMEDOUT.
func (p *Port) WaitServed(timeout time.Duration) error {
	var why [256]C.char
	if rc := C.kbt_wait_served(p.p, C.uint(timeout.Milliseconds()), &why[0], C.size_t(len(why))); rc < 0 {
		return fmt.Errorf("%w: %s", unix.Errno(-rc), C.GoString(&why[0]))
	}
	return nil
}

// Owner returns the control block's owner value.
func (p *Port) Owner() uint64 { return uint64(C.kbt_owner(p.p)) }

// LiveOwnerPID is kbridge_port_owner_pid(): the owner's pid while it runs,
// 0 when it is gone (exited, a zombie, a reused pid) or there is none.
func (p *Port) LiveOwnerPID() int { return int(C.kbt_port_owner_pid(p.p)) }

// OwnerValue is the owner value of the process pid that started at start
// (clock ticks since boot, field 22 of /proc/<pid>/stat).
func OwnerValue(pid int, start uint64) uint64 {
	return uint64(uint32(pid)) | (start&0xffffffff)<<32
}

// HeldRecordExists reports whether the memzone of the mbufs kbridge holds
// (kbridge_<name>_held) exists.
func (p *Port) HeldRecordExists() bool { return MemzoneExists("kbridge_" + p.name + "_held") }

// MemzoneExists reports whether memzone name exists.
func MemzoneExists(name string) bool {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.kbt_memzone_exists(cname) != 0
}

// Audit runs rte_mempool_audit on the pool, which panics (aborting the
// test process) when the pool is inconsistent.
func (p *Pool) Audit() { C.kbt_audit(p.mp) }

// OwnerPID returns the pid of the kbridge the control block says serves the
// port (kbridge_ctl.owner), 0 when none.
func (p *Port) OwnerPID() int { return int(uint32(C.kbt_owner(p.p))) }

// InRings returns how many mbufs wait in queue q's to_kernel and
// from_kernel rings.
func (p *Port) InRings(q int) int {
	return p.RingCount(q, ToKernel) + p.RingCount(q, FromKernel)
}

// Ring names one of a queue's rings.
type Ring int

// A queue's rings: kbridge.h's to_kernel and from_kernel, and (version 7)
// fresh, which the app fills for kbridge, and spent, which kbridge fills
// for the app to free.
const (
	FromKernel Ring = C.KBT_FROM_KERNEL
	ToKernel   Ring = C.KBT_TO_KERNEL
	Fresh      Ring = C.KBT_FRESH
	Spent      Ring = C.KBT_SPENT
)

// RingCount returns how many mbufs wait in queue q's ring r.
func (p *Port) RingCount(q int, r Ring) int {
	return int(C.kbt_ring_count(p.p, C.uint16_t(q), C.int(r)))
}

// RingState is one ring's heads and tails (free-running positions).
type RingState struct {
	ProdHead, ProdTail, ConsHead, ConsTail uint32
}

// RingState reads queue q's to_kernel ring (toKernel) or its from_kernel
// ring as this DPDK's struct rte_ring lays it out.
func (p *Port) RingState(q int, toKernel bool) RingState {
	if toKernel {
		return p.RingStateOf(q, ToKernel)
	}
	return p.RingStateOf(q, FromKernel)
}

// RingStateOf reads queue q's ring r as this DPDK's struct rte_ring lays it
// out.
func (p *Port) RingStateOf(q int, r Ring) RingState {
	var v [4]C.uint32_t
	C.kbt_ring_state(p.p, C.uint16_t(q), C.int(r), &v[0])
	return RingState{uint32(v[0]), uint32(v[1]), uint32(v[2]), uint32(v[3])}
}

// HoldFresh takes every mbuf off queue q's fresh ring, as kbridge would,
// and returns how many and a function that frees them: with the pool held
// (Pool.Hold), kbridge finds no mbuf. No kbridge may serve the port (the
// ring has one consumer).
func (p *Port) HoldFresh(q int) (n int, release func()) {
	const max = 1 << 14
	held := (**C.struct_rte_mbuf)(C.malloc(max * C.size_t(unsafe.Sizeof((*C.struct_rte_mbuf)(nil)))))
	got := C.kbt_fresh_take(p.p, C.uint16_t(q), held, max)
	return int(got), func() {
		C.kbt_release(held, got)
		C.free(unsafe.Pointer(held))
	}
}

// FillSpent puts mbufs of the port's pool on queue q's spent ring, as
// kbridge would, until leave slots are left, and returns how many. No
// kbridge may serve the port (the ring has one producer).
func (p *Port) FillSpent(q, leave int) int {
	return int(C.kbt_spent_fill(p.p, C.uint16_t(q), p.pool.mp, C.uint(leave)))
}

// Reap frees what waits on queue q's spent ring, as kbridge_to_kernel()
// and kbridge_from_kernel() do, and returns how many.
func (p *Port) Reap(q int) int { return int(C.kbt_reap(p.p, C.uint16_t(q))) }

// MbufCounters are the counters of queue q's fresh and spent rings
// (kbridge.h version 7), and the port's fresh target.
type MbufCounters struct {
	FreshPut, FreshShort, SpentFreed, SpentWaits uint64
	FreshTarget                                  int
}

// MbufCounters reads queue q's counters of its fresh and spent rings.
func (p *Port) MbufCounters(q int) MbufCounters {
	var c [5]C.uint64_t
	C.kbt_mbuf_counters(p.p, C.uint16_t(q), &c[0])
	return MbufCounters{FreshPut: uint64(c[0]), FreshShort: uint64(c[1]), SpentFreed: uint64(c[2]),
		SpentWaits: uint64(c[3]), FreshTarget: int(c[4])}
}

// SetFreshTarget is kbridge_port_set_fresh_target().
func (p *Port) SetFreshTarget(n int) { C.kbt_set_fresh_target(p.p, C.uint(n)) }

// LayoutNext is the item of the control block's layout (kbridge.h's struct
// kbridge_layout) that holds offsetof(struct rte_mbuf, next).
var LayoutNext = int(C.kbt_layout_next())

// SetLayout overwrites item i of the layout the app recorded, as an app
// built against a DPDK of other options would have it; Layout reads it.
func (p *Port) SetLayout(i int, v uint32) { C.kbt_set_layout(p.p, C.uint(i), C.uint32_t(v)) }

// Layout reads item i of the layout the app recorded.
func (p *Port) Layout(i int) uint32 { return uint32(C.kbt_layout(p.p, C.uint(i))) }

// SetCtl overwrites control block fields to play an older or a broken app;
// a negative value leaves the field as it is.
func (p *Port) SetCtl(version, tscHz, nbQueues int64) {
	C.kbt_set_ctl(p.p, C.int64_t(version), C.int64_t(tscHz), C.int64_t(nbQueues))
}

// ErrNotRoot is returned when a test needs root.
var ErrNotRoot = errors.New("ringtest: needs root")

// AppEventfd returns the app's descriptor of the eventfd that wakes queue
// q's worker (received from kbridge over DPDK IPC), -1 when it has none.
func (p *Port) AppEventfd(q int) int { return int(C.kbt_app_eventfd(p.p, C.uint16_t(q))) }

// ClearHaveEventfd resets the control block's have_eventfd of queue q, so
// that a test can see the next kbridge hand its eventfd over again.
func (p *Port) ClearHaveEventfd(q int) { C.kbt_clear_have_eventfd(p.p, C.uint16_t(q)) }

package bridge

// The app's side of one queue pair, as the worker sees it (doc.go).

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/copp"
)

// Verdicts for packets from the app that cannot be written whole.
var (
	ErrTooManySegments = errors.New("bridge: packet has more segments than a write takes")
	ErrMalformed       = errors.New("bridge: packet length disagrees with its segments")
)

// Packet is one packet of a burst from the app: its segments in the app's
// memory and what the app's NIC already did for it.
type Packet struct {
	Len  int
	Segs []unix.Iovec
	// L4CsumGood: the app's NIC verified the TCP/UDP checksum
	// (RTE_MBUF_F_RX_L4_CKSUM_GOOD), so the kernel side need not.
	L4CsumGood bool
	// CsumChecked: the app side checked the packet's IPv4 header and TCP
	// checksums in software and both are right, so the kernel side need
	// not check them again. Unlike L4CsumGood it is not the NIC's word.
	CsumChecked bool
	// LROSegSize is non-zero for a packet the app's NIC coalesced
	// (RTE_MBUF_F_RX_LRO): the size of the segments it was made of.
	LROSegSize uint16
}

// App is the app's side of one queue pair as NewWorker takes it: the three
// parts every side has, and what only some sides can do, nil where a side
// cannot. A side says here, once, what it can; the worker asks nothing of
// it by type later.
type App struct {
	Out   AppOut
	In    AppIn
	Waker Waker

	// TSO: In takes TCP super-frames whole, while its TakesTSO says so
	// (a vhost-user frontend's TSO comes and goes with the frontend).
	TSO AppTSO
	// Split: In cuts TCP super-frames into MTU frames itself.
	Split AppSplit
	// Csum: In finishes the partial checksums the kernel leaves
	// (NEEDS_CSUM) itself, as it copies the frames over.
	Csum AppCsum
	// Policer: Out classifies the app's frames and polices them per class.
	Policer AppPolicer
	// Reserver: In keeps the last of the app's room for control frames.
	Reserver AppReserver
	// Residence copies Out's residence-time histogram into dst.
	Residence func(dst []uint64)
	// WatchKicks gives the worker's waiter to a Waker whose app kicks
	// through descriptors of its own (a vhost-user vring's kick eventfd)
	// rather than only the worker's eventfd: it then watches and unwatches
	// them itself, on the worker's thread (in PrepareToPark), as they come
	// and go with the app.
	WatchKicks func(FdWatcher)
}

// Close closes both directions of the app's side, for a caller whose
// worker never took them (a worker closes its own when Run returns).
func (a App) Close() {
	a.Out.Close()
	a.In.Close()
}

// AppOut yields the packets the app sends toward the kernel, a burst at a
// time. The packets of a burst stay valid until the next call of Next.
type AppOut interface {
	// Next releases (frees) the previous burst and returns the size of the
	// next one, possibly 0.
	Next() int
	// Packet returns packet i of the current burst, or why it cannot be
	// written whole (ErrTooManySegments, ErrMalformed).
	Packet(i int) (Packet, error)
	// Written marks packet i as delivered to the kernel.
	Written(i int)
	// Close releases the current burst and the reader.
	Close()
}

// AppPolicer is what an AppOut that classifies the app's frames and
// polices them per class inside Next can do more (package ring's burst core): a frame its
// policer refuses is freed there and never returned.
type AppPolicer interface {
	// Policed is how many frames of the last Next's burst were freed so.
	Policed() int
	// SetCoPP puts c in force from the next burst on; any goroutine may
	// call it.
	SetCoPP(c copp.Config) error
	// CoPP copies the counters into dst; false once closed.
	CoPP(dst *copp.Snapshot) bool
}

// AppReserver is what an AppIn that keeps the last of the app's room for
// control and neighbour frames when told to can do more (package ring's
// burst core).
type AppReserver interface {
	// SetReserve turns the reserve on or off from the next burst on; any
	// goroutine may call it.
	SetReserve(on bool)
	// Reserve puts what the reserve did into dst's FromKernel fields;
	// false once closed.
	Reserve(dst *copp.Snapshot) bool
}

// ErrNoCoPP means the app's side cannot classify and police (its App has
// no Policer).
var ErrNoCoPP = errors.New("bridge: the app's side does not police")

// AppIn carries frames from the kernel to the app, a burst at a time.
type AppIn interface {
	// Cap returns the number of slots in a burst.
	Cap() int
	// Slot returns the buffer of slot i; a frame is read into it.
	Slot(i int) []byte
	// Put queues slots 0..len(lens)-1, holding frames of those lengths.
	// An In that is also a Reserver and keeps fewer for want of room
	// moves the kept frames' lengths to the front of lens.
	Put(lens []int) PutResult
	// Close releases the writer.
	Close()
}

// AppTSO is what an AppIn whose app declared that its port segments TCP
// super-frames itself (TSO) can do more. The kernel side then hands it a
// super-frame whole instead of splitting it.
type AppTSO interface {
	// TakesTSO reports whether the app declared TSO.
	TakesTSO() bool
	// PutTSO queues frame, an Ethernet frame holding one TCP packet
	// larger than the MTU, as one mbuf chain marked for TSO. It returns
	// ErrTooManySegments when the chain would have more segments than the
	// app's port takes: the caller then splits the frame itself.
	PutTSO(frame []byte, t TSOFrame) (PutResult, error)
}

// AppSplit is what an AppIn that cuts a TCP super-frame into MTU frames itself,
// straight into the app's buffers (package ring's ring mode), instead of
// the kernel side cutting it into the slots: one copy fewer.
type AppSplit interface {
	// PutSplit queues frame, an Ethernet frame holding one TCP packet
	// larger than the MTU, as the frames of t.MSS payload bytes the
	// kernel's TCP segmentation would make. It returns
	// ErrSegmentTooLarge when a segment would not fit one of the app's
	// buffers: the caller then has the kernel side split it.
	PutSplit(frame []byte, t TSOFrame) (PutResult, error)
}

// AppCsum is what an AppIn that finishes a frame's partial checksum itself
// offers. The kernel side then leaves such frames as the kernel wrote them
// (ReadCsum) and says where their checksum lies (Frame.CsumStart).
type AppCsum interface {
	// PartialCsum marks slot i of the next Put as a frame whose checksum
	// the kernel left partial: the sum from start to the frame's end,
	// stored at start+offset.
	PartialCsum(i int, start, offset uint16)
}

// ErrSegmentTooLarge means a segment of a super-frame does not fit one of
// the app's buffers (AppSplit).
var ErrSegmentTooLarge = errors.New("bridge: a segment does not fit one of the app's buffers")

// TSOFrame describes a TCP super-frame: its header lengths and the segment
// size the app's port cuts it into.
type TSOFrame struct {
	L2, L3, L4 int
	MSS        int
	IPv6       bool
}

// PutResult says what became of the frames given to AppIn.Put.
type PutResult struct {
	Queued   int // on the ring, now the app's
	NoMbuf   int // dropped: the app's mempool was empty
	RingFull int // dropped: the app does not dequeue fast enough
}

// Waker is the app's side of the need-wakeup handshake for one queue.
type Waker interface {
	// PrepareToPark publishes that the worker is about to park, issues a
	// full memory fence and returns how many packets wait in the ring,
	// all in one step: either the app sees the flag and kicks, or the
	// worker sees the packet and does not park.
	PrepareToPark() (pending int)
	// Unpark clears the flag once the worker runs again.
	Unpark()
	// RegisterEventfd hands the eventfd the app should write to wake the
	// worker; the worker calls it once, on its own thread as Run starts,
	// while its rings may already carry packets. An error means the app
	// will never kick.
	RegisterEventfd(fd int) error
}

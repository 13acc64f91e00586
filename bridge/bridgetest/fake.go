// Package bridgetest has fakes of both sides of a queue, in Go memory, for
// testing package bridge (and tap's Kernel) without DPDK or root: Out is an
// AppOut fed with Packet values (chains, wrong claimed lengths, NIC offload
// hints), In is an AppIn and AppTSO that records what the kernel side put
// (Received, and Super for TSO super-frames), SplitIn an In that cuts
// super-frames itself (AppSplit), Waker plays the need-wakeup
// handshake, counting parks, kicks and eventfds, or refusing the eventfd
// like an app without IPC; App and SplitIn.App make them a worker's
// bridge.App. Kernel is a plain kernel side over a SOCK_SEQPACKET pair,
// which keeps frame boundaries like a TAP fd.
package bridgetest

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
)

// Packet is one packet the fake app sends toward the kernel: its segments,
// and the length it claims (0: the sum of the segments).
type Packet struct {
	Segs     [][]byte
	ClaimLen int
	// What the app's NIC says of it (see bridge.Packet).
	CsumGood   bool
	LROSegSize uint16
}

// Out is a fake to_kernel ring.
type Out struct {
	mu        sync.Mutex
	queue     []Packet
	batch     int
	maxSegs   int
	cur       []Packet
	iov       [][]unix.Iovec
	written   []bool
	Released  int // packets released by Next or Close: each exactly once
	Delivered int // packets the worker marked written
	Closed    bool
}

var _ bridge.AppOut = (*Out)(nil)

// NewOut returns a fake ring handing out bursts of up to batch packets of up
// to maxSegs segments.
func NewOut(batch, maxSegs int) *Out {
	o := &Out{batch: batch, maxSegs: maxSegs, cur: make([]Packet, 0, batch),
		iov: make([][]unix.Iovec, batch), written: make([]bool, batch)}
	for i := range o.iov {
		o.iov[i] = make([]unix.Iovec, maxSegs)
	}
	return o
}

// Enqueue adds packets, as the app's kbridge_to_kernel() would.
func (o *Out) Enqueue(p ...Packet) {
	o.mu.Lock()
	o.queue = append(o.queue, p...)
	o.mu.Unlock()
}

// App is out, in and w as a worker's app side: in takes super-frames whole
// while its TSO is set.
func App(out *Out, in *In, w *Waker) bridge.App {
	return bridge.App{Out: out, In: in, Waker: w, TSO: in}
}

// Frame is a convenience for a one-segment packet.
func Frame(b []byte) Packet { return Packet{Segs: [][]byte{b}} }

// Next releases the current burst and takes the next one.
func (o *Out) Next() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.Released += len(o.cur)
	n := min(len(o.queue), o.batch)
	o.cur = append(o.cur[:0], o.queue[:n]...)
	// Shift in place rather than reslice, so Enqueue reuses the capacity
	// and the fake does not allocate in allocation tests.
	o.queue = append(o.queue[:0], o.queue[n:]...)
	for i := range o.cur {
		o.written[i] = false
	}
	return n
}

// Packet returns packet i of the current burst.
func (o *Out) Packet(i int) (bridge.Packet, error) {
	p := o.cur[i]
	iov := o.iov[i][:0]
	sum := 0
	for k, s := range p.Segs {
		if k == o.maxSegs {
			return bridge.Packet{Len: sum, Segs: iov}, bridge.ErrTooManySegments
		}
		v := unix.Iovec{Base: unsafe.SliceData(s)}
		v.SetLen(len(s))
		iov = append(iov, v)
		sum += len(s)
	}
	pkt := bridge.Packet{Len: sum, Segs: iov, L4CsumGood: p.CsumGood, LROSegSize: p.LROSegSize}
	if p.ClaimLen != 0 && p.ClaimLen != sum {
		pkt.Len = p.ClaimLen
		return pkt, bridge.ErrMalformed
	}
	return pkt, nil
}

// Written marks packet i as delivered.
func (o *Out) Written(i int) {
	o.written[i] = true
	o.Delivered++
}

// Pending returns the packets not yet dequeued (what Waker.PrepareToPark
// reports).
func (o *Out) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue)
}

// Close releases the current burst.
func (o *Out) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.Released += len(o.cur)
	o.cur = o.cur[:0]
	o.Closed = true
}

// In is a fake from_kernel ring with a fake mempool.
type In struct {
	mu     sync.Mutex
	slots  [][]byte
	Frames [][]byte // what the app received, copied
	// Discard counts frames instead of keeping them (allocation tests).
	Discard bool
	Count   int
	// RingSpace and Mbufs limit what Put accepts (negative: unlimited).
	RingSpace int
	Mbufs     int
	Closed    bool
	// TSO makes the fake an app that declared TSO; super-frames larger
	// than TSOMaxBytes (when set) are refused as too many segments.
	TSO         bool
	TSOMaxBytes int
	Supers      []Super // what PutTSO received
}

// Super is a super-frame the app took whole.
type Super struct {
	Frame []byte
	bridge.TSOFrame
}

var (
	_ bridge.AppIn  = (*In)(nil)
	_ bridge.AppTSO = (*In)(nil)
)

// TakesTSO reports whether the fake plays a TSO app.
func (in *In) TakesTSO() bool { return in.TSO }

// PutTSO keeps a copy of the super-frame.
func (in *In) PutTSO(frame []byte, t bridge.TSOFrame) (bridge.PutResult, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.TSOMaxBytes > 0 && len(frame) > in.TSOMaxBytes {
		return bridge.PutResult{}, bridge.ErrTooManySegments
	}
	in.Supers = append(in.Supers, Super{append([]byte(nil), frame...), t})
	in.Count++
	return bridge.PutResult{Queued: 1}, nil
}

// SplitIn is a fake from_kernel ring whose side cuts super-frames itself
// (bridge.AppSplit), as ring mode's does: it keeps what PutSplit received
// (unless Discard) and queues every segment, or refuses all while Refuse
// is set.
type SplitIn struct {
	*In
	Refuse bool
	Splits []Super // what PutSplit took
}

var _ bridge.AppSplit = (*SplitIn)(nil)

// App is out, in and w as a worker's app side, in cutting super-frames
// itself (and taking them whole while its TSO is set).
func (in *SplitIn) App(out *Out, w *Waker) bridge.App {
	return bridge.App{Out: out, In: in, Waker: w, TSO: in, Split: in}
}

// PutSplit keeps a copy of the super-frame and queues its segments.
func (in *SplitIn) PutSplit(frame []byte, t bridge.TSOFrame) (bridge.PutResult, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.Refuse {
		return bridge.PutResult{}, bridge.ErrSegmentTooLarge
	}
	if !in.Discard {
		in.Splits = append(in.Splits, Super{append([]byte(nil), frame...), t})
	}
	segs := max(1, (len(frame)-t.L2-t.L3-t.L4+t.MSS-1)/t.MSS)
	in.Count += segs
	return bridge.PutResult{Queued: segs}, nil
}

// NewIn returns a fake with batch slots of stride bytes and no limits.
func NewIn(batch, stride int) *In {
	in := &In{RingSpace: -1, Mbufs: -1}
	for range batch {
		in.slots = append(in.slots, make([]byte, stride))
	}
	return in
}

// Cap returns the number of slots.
func (in *In) Cap() int { return len(in.slots) }

// Slot returns slot i.
func (in *In) Slot(i int) []byte { return in.slots[i] }

// Put takes frames as the C side would: mbufs first, then ring space.
func (in *In) Put(lens []int) bridge.PutResult {
	in.mu.Lock()
	defer in.mu.Unlock()
	var r bridge.PutResult
	for i, n := range lens {
		if in.Mbufs == 0 {
			r.NoMbuf++
			continue
		}
		if in.RingSpace == 0 {
			r.RingFull++
			continue
		}
		if in.Mbufs > 0 {
			in.Mbufs--
		}
		if in.RingSpace > 0 {
			in.RingSpace--
		}
		if !in.Discard {
			in.Frames = append(in.Frames, append([]byte(nil), in.slots[i][:n]...))
		}
		in.Count++
		r.Queued++
	}
	return r
}

// Received returns a copy of the frames the app got.
func (in *In) Received() [][]byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([][]byte(nil), in.Frames...)
}

// Close marks the fake closed.
func (in *In) Close() { in.Closed = true }

// Waker is a fake app side of the need-wakeup handshake: it kicks the
// worker's eventfd when Kick is called while the flag is set, as
// kbridge_to_kernel() does.
type Waker struct {
	mu       sync.Mutex
	fd       int
	parked   bool
	Refuse   bool // the app takes no eventfd: the worker cannot be kicked
	Out      *Out // the ring PrepareToPark re-checks
	Parks    int
	Kicks    int
	Eventfds int
}

// PrepareToPark records the flag and returns the packets pending in out,
// when the fake was given one.
func (w *Waker) PrepareToPark() int {
	w.mu.Lock()
	if !w.parked {
		w.Parks++
	}
	w.parked = true
	w.mu.Unlock()
	if w.Out != nil {
		return w.Out.Pending()
	}
	return 0
}

// Unpark clears the flag.
func (w *Waker) Unpark() {
	w.mu.Lock()
	w.parked = false
	w.mu.Unlock()
}

// RegisterEventfd keeps fd unless Refuse is set.
func (w *Waker) RegisterEventfd(fd int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.Refuse {
		return unix.ENOTSUP
	}
	w.fd = fd
	w.Eventfds++
	return nil
}

// Kick writes the eventfd if the worker asked for a wakeup.
func (w *Waker) Kick() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.parked || w.Refuse {
		return false
	}
	w.parked = false
	one := [8]byte{1}
	_, _ = unix.Write(w.fd, one[:])
	w.Kicks++
	return true
}

// Parked reports whether the worker published need-wakeup.
func (w *Waker) Parked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.parked
}

// Kernel is a fake kernel side: a SOCK_SEQPACKET pair, which keeps frame
// boundaries like a TAP fd. The worker's side writes and reads frames whole,
// one syscall each, with no header and no frame rule; the test uses Peer.
type Kernel struct {
	WorkerFd int
	Peer     int
	iov      []unix.Iovec
}

var _ bridge.Kernel = (*Kernel)(nil)

// NewKernel returns a non-blocking fake kernel side.
func NewKernel() (*Kernel, error) {
	fd, peer, err := SeqPacket()
	if err != nil {
		return nil, err
	}
	return &Kernel{WorkerFd: fd, Peer: peer, iov: make([]unix.Iovec, 0, 64)}, nil
}

// SeqPacket returns a non-blocking SOCK_SEQPACKET pair with room for a
// burst of 64 KiB frames each way: it keeps frame boundaries like a TAP fd.
// Tests put a real kernel side (tap.NewQueue) on fd and play the kernel on
// peer.
func SeqPacket() (fd, peer int, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	for _, fd := range fds {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	}
	return fds[0], fds[1], nil
}

// Fd returns the worker's end.
func (k *Kernel) Fd() int { return k.WorkerFd }

// FdGeneration is 0: the fake's fd never gets another file.
func (k *Kernel) FdGeneration() uint64 { return 0 }

// Write writes every packet whole; a refused one counts as a write error.
func (k *Kernel) Write(pkts []bridge.Packet, written []bool, r *bridge.Result) {
	for i, p := range pkts {
		_, _, errno := unix.RawSyscall(unix.SYS_WRITEV, uintptr(k.WorkerFd),
			uintptr(unsafe.Pointer(unsafe.SliceData(p.Segs))), uintptr(len(p.Segs)))
		if errno != 0 {
			r.Drops[bridge.DropTAPWriteError]++
			continue
		}
		written[i] = true
	}
}

// Read reads whole frames into the slots.
func (k *Kernel) Read(slots [][]byte, frames []bridge.Frame, _ bridge.ReadFlags, _ *bridge.Result) int {
	n := 0
	for n < len(slots) {
		slot := slots[n]
		r, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(k.WorkerFd),
			uintptr(unsafe.Pointer(&slot[0])), uintptr(len(slot)))
		if errno != 0 {
			break
		}
		frames[n] = bridge.Frame{Len: int(r)}
		n++
	}
	return n
}

// Close closes both ends.
func (k *Kernel) Close() {
	unix.Close(k.WorkerFd)
	unix.Close(k.Peer)
}

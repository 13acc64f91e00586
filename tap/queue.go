package tap

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/internal/limits"
	"github.com/kbridge/kbridge/tap/vnet"
)

const (
	ethHeaderLen = limits.EthHeaderLen
	vlanTagLen   = limits.VLANTagLen
	// maxRead is the largest frame a TAP hands over with TSO on: a 64 KiB
	// IP packet, its Ethernet header and one VLAN tag, after the
	// virtio-net header.
	maxRead = vnet.HdrLen + ethHeaderLen + vlanTagLen + 1<<16
	// maxWriteIov bounds one writev: the header, then the segments of up
	// to a whole burst of packets merged into one.
	maxWriteIov = 1024
	// maxLRO is the largest LRO packet taken: what one GSO write, or the
	// software split behind it, can carry.
	maxLRO = 1 << 16
)

// FrameLen is the largest frame that crosses the kernel side either way at
// this MTU: the Ethernet header and one VLAN tag on top. App-side buffers are
// sized with it.
func FrameLen(mtu int) int { return mtu + ethHeaderLen + vlanTagLen }

// QueueConfig configures one queue.
type QueueConfig struct {
	// MTU of the interface: frames longer than MTU plus the Ethernet
	// header (plus one VLAN tag) are dropped and counted, never truncated.
	MTU int
	// MaxMTU is the largest MTU SetMTU may set later (0, or less than
	// MTU: MTU). The buffers that depend on the MTU are sized for it
	// here, so that a change allocates nothing.
	MaxMTU int
	// Batch and MaxSegs size the scratch space: packets per burst and
	// segments per packet.
	Batch, MaxSegs int
	// Merge coalesces TCP segments of one flow into one write.
	Merge bool
	Log   *slog.Logger
}

// Queue is one queue of a TAP device with virtio-net headers. It implements
// bridge.Kernel; one worker uses it at a time.
type Queue struct {
	fd int
	// mtu and maxFrame are the worker's copy of nextMTU, taken at the start
	// of each Write and Read (loadMTU), so that a burst sees one MTU from
	// its first packet to its last and the hot path reads no atomic per
	// packet.
	mtu      int
	maxFrame int
	nextMTU  atomic.Int32 // what SetMTU stored; NewQueue stores QueueConfig.MTU
	maxMTU   int          // the bound of SetMTU, which the buffers are sized for
	merge    atomic.Bool  // coalesce writes; the worker reads it once per burst
	log      *slog.Logger
	closed   atomic.Bool
	swaps    atomic.Uint64 // files the keeper put in fd's number (FdGeneration)
	// draining: the queue was adopted with what the kernel queued while
	// no kbridge read it; frames read until its first empty read are
	// counted in backlog (Backlog). emptied is that empty read.
	draining atomic.Bool
	backlog  atomic.Uint64
	emptied  bool

	co       *vnet.Coalescer
	pkts     []vnet.Packet
	segStore [][]byte
	idx      []int // pkts[k] is packet idx[k] of the burst
	lro      []bool
	iov      []unix.Iovec
	plain    [vnet.HdrLen]byte // all zero: a frame as it is
	// lbuf holds an LRO packet made contiguous, to split it, and sbuf
	// one segment of it, at up to maxMTU: made by the first split. Most
	// queues never split, and the 74 KiB, live on the heap, count twice
	// towards the garbage collector's goal: a port set's dozens of idle
	// queues paid for them in RSS.
	lbuf  []byte
	sbuf  []byte
	valid [vnet.HdrLen]byte // DATA_VALID: the app's NIC or the burst core checked it

	rbuf []byte
	rlen int
	// super is parsed (its segment size cut to the MTU) when it is read:
	// a split still pending across Read calls (pending, or offered and
	// then refused) goes on with the segment size of the MTU it was read
	// under, whatever SetMTU did since, so that one super-frame is never
	// cut into frames of two sizes and no buffer is re-sized. After a
	// lowered MTU the rest of that one super-frame, at most 64 KiB, still
	// reaches the app in frames of the old MTU (slots that take frames of
	// MaxMTU hold them); the next super-frame is cut to the new one.
	super   vnet.Super
	next    int  // next segment of super to hand out
	pending int  // segments of super still to hand out
	offered bool // the last Read handed super over whole (Frame.Super)
}

var _ bridge.Kernel = (*Queue)(nil)

// NewQueue wraps fd, a non-blocking descriptor that carries frames with a
// virtio-net header in front, one frame per read and write (a TAP queue, or
// in tests a SOCK_SEQPACKET socket).
func NewQueue(fd int, cfg QueueConfig) *Queue {
	cfg.Batch = max(cfg.Batch, 1)
	cfg.MaxSegs = max(cfg.MaxSegs, 1)
	cfg.MaxMTU = max(cfg.MaxMTU, cfg.MTU)
	rbuf, mapped := readBuffer()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	q := &Queue{
		fd:       fd,
		mtu:      cfg.MTU,
		maxFrame: cfg.MTU + ethHeaderLen,
		maxMTU:   cfg.MaxMTU,
		log:      cfg.Log,
		co:       vnet.NewCoalescer(cfg.Batch, 0), // up to 64 segments a write
		pkts:     make([]vnet.Packet, cfg.Batch),
		segStore: make([][]byte, cfg.Batch*cfg.MaxSegs),
		idx:      make([]int, cfg.Batch),
		lro:      make([]bool, cfg.Batch),
		iov:      make([]unix.Iovec, 0, maxWriteIov),
		rbuf:     rbuf,
	}
	if mapped {
		// Once nothing reaches the queue, nothing reads into its buffer.
		runtime.AddCleanup(q, func(b []byte) { _ = unix.Munmap(b) }, rbuf)
	}
	q.nextMTU.Store(int32(cfg.MTU))
	q.merge.Store(cfg.Merge)
	vnet.Hdr{Flags: vnet.FlagDataValid}.Encode(q.valid[:])
	for i := range q.pkts {
		q.pkts[i].Segs = q.segStore[i*cfg.MaxSegs : i*cfg.MaxSegs : (i+1)*cfg.MaxSegs]
	}
	return q
}

// readBuffer returns a buffer for one read of up to maxRead bytes, mapped
// outside Go's heap where it can be: its pages are memory only once a
// frame touched them (an idle queue's few), and it does not count towards
// the garbage collector's goal, which a heap buffer of 64 KiB a queue
// doubled for every port of a port set. The mapping goes with the queue.
func readBuffer() (b []byte, mapped bool) {
	b, err := unix.Mmap(-1, 0, maxRead, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, maxRead), false
	}
	return b, true
}

// Fd returns the queue's descriptor.
func (q *Queue) Fd() int { return q.fd }

// FdGeneration counts the files the interface's keeper put in the queue's
// fd number with dup3 (a deleted interface made again). The worker's waiter
// follows it (bridge.Kernel.FdGeneration), so that the new file is watched even when
// the old one was closed before any park saw its error.
func (q *Queue) FdGeneration() uint64 { return q.swaps.Load() }

// SetMTU changes the queue's MTU, from the worker's next burst: the next
// Write and the next Read hold frames to it (a Write or Read under way keeps
// the MTU it started with, and so does a super-frame split pending across
// Reads: see Queue.super). It may be called from any goroutine, and
// allocates nothing. An MTU below limits.MinMTU or above the queue's MaxMTU
// is refused with an error matching ErrMTURange, and nothing changes.
//
// It sets kbridge's frame limits only, not the kernel interface's MTU.
func (q *Queue) SetMTU(mtu int) error {
	if err := q.checkMTU(mtu); err != nil {
		return fmt.Errorf("tap: %w", err)
	}
	q.nextMTU.Store(int32(mtu))
	return nil
}

func (q *Queue) checkMTU(mtu int) error {
	if mtu < limits.MinMTU || mtu > q.maxMTU {
		return fmt.Errorf("MTU %d: %w (%d to MaxMTU %d)", mtu, ErrMTURange, limits.MinMTU, q.maxMTU)
	}
	return nil
}

// loadMTU takes what SetMTU last stored into the worker's plain fields: once
// per Write and per Read, never per packet.
func (q *Queue) loadMTU() {
	q.mtu = int(q.nextMTU.Load())
	q.maxFrame = q.mtu + ethHeaderLen
}

// Merging reports whether writes are coalesced.
func (q *Queue) Merging() bool { return q.merge.Load() }

// Close closes the descriptor.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	return unix.Close(q.fd)
}

// Write writes pkts: merged where the Coalescer can, alone otherwise, one
// writev each. It sets written[i] for each packet the kernel took.
func (q *Queue) Write(pkts []bridge.Packet, written []bool, r *bridge.Result) {
	q.loadMTU()
	merge := q.merge.Load()
	k := 0
	for i := 0; i < len(pkts) && k < len(q.pkts); i++ {
		p := &pkts[i]
		if reason, ok := q.verdict(p, merge); !ok {
			r.Drops[reason]++
			continue
		}
		vp := &q.pkts[k]
		vp.Segs = vp.Segs[:0]
		for _, s := range p.Segs {
			vp.Segs = append(vp.Segs, unsafe.Slice(s.Base, s.Len))
		}
		vp.Len = p.Len
		vp.CsumOK = p.L4CsumGood
		vp.Checked = p.CsumChecked
		vp.LROSize = p.LROSegSize
		q.idx[k] = i
		k++
	}
	done := func(ks ...int) {
		for _, j := range ks {
			written[q.idx[j]] = true
		}
	}
	if !merge {
		for j := 0; j < k; j++ {
			if q.writePlain(j, r) {
				done(j)
			}
		}
		return
	}
	before := q.co.Stats()
	ws := q.co.Coalesce(q.pkts[:k])
	after := q.co.Stats()
	r.Offload.CoalescePackets += after.Packets - before.Packets
	r.Offload.CoalesceWrites += after.Writes - before.Writes
	r.Offload.BadCsum += after.BadCsum - before.BadCsum
	r.Offload.CsumTrusted += after.CsumTrusted - before.CsumTrusted
	for _, w := range ws {
		if !w.Merged && w.LRO == 0 && q.pkts[w.First].LROSize != 0 {
			// Not a TCP super-frame the kernel segments: the MTU
			// rule holds for it as for any frame.
			if q.writePlain(w.First, r) {
				done(w.First)
			}
			continue
		}
		errno := q.writev(w.Iov)
		switch {
		case errno == 0:
			done(w.Pkts...)
			r.Offload.LROWrites += uint64(w.LRO)
			if w.Merged {
				r.Offload.MergedWrites++
				r.Offload.MergedPackets += uint64(len(w.Pkts))
				r.Offload.LROMerged += uint64(w.LRO)
			}
		case errno == unix.EINVAL && (w.Merged || q.pkts[w.First].LROSize != 0):
			// Some kernels refuse a GSO write (a short last
			// segment, e269d79c7d35): redo it frame by frame and
			// stop merging on this queue.
			r.Offload.Fallbacks++
			q.fallBack(errno)
			for _, j := range w.Pkts {
				if q.writePlain(j, r) {
					done(j)
				}
			}
		default:
			r.Drops[bridge.DropTAPWriteError] += uint64(len(w.Pkts))
		}
	}
}

func (q *Queue) fallBack(errno unix.Errno) {
	if !q.merge.Swap(false) {
		return
	}
	q.log.Warn("the kernel refused a coalesced write: writing frame by frame from now on", "err", errno)
}

// writePlain writes packet k of the burst without GSO: as it is if it fits
// the MTU; an LRO packet over it split into MTU frames in software (the
// kernel refuses GSO writes, or it is not a super-frame the kernel would
// segment), and so is one whose IP length its NIC left short of the frame;
// anything else over it dropped. It reports whether the kernel
// took the packet, and counts it when not.
func (q *Queue) writePlain(k int, r *bridge.Result) bool {
	p := &q.pkts[k]
	over := p.Len > q.frameLimit(p.Segs[0])
	if over && p.LROSize == 0 {
		r.Drops[bridge.DropOversize]++
		return false
	}
	if over || p.LROSize != 0 && vnet.StaleIPLen(p.Segs[0], p.Len) {
		// Over the MTU, or an IP length the kernel would cut the
		// frame to: ParseLRO takes the frame's length.
		return q.writeSplit(k, r)
	}
	if q.writeAlone(k) != 0 {
		r.Drops[bridge.DropTAPWriteError]++
		return false
	}
	return true
}

// writeSplit cuts LRO packet k of the burst into frames of its segment size
// (at most the MTU) and writes them one by one, checksums computed here: the
// segmentation the kernel would have done for a GSO write. A packet that is
// not a whole TCP frame has no segments to cut: it is oversize.
func (q *Queue) writeSplit(k int, r *bridge.Result) bool {
	p := &q.pkts[k]
	if q.lbuf == nil {
		q.lbuf = make([]byte, maxLRO)
		// Sized for the largest MTU SetMTU may set, so that a change
		// needs no new buffer on the worker's side.
		q.sbuf = make([]byte, FrameLen(q.maxMTU)+vlanTagLen)
	}
	if p.Len > len(q.lbuf) {
		r.Drops[bridge.DropOversize]++
		return false
	}
	n := 0
	for _, s := range p.Segs {
		n += copy(q.lbuf[n:], s)
	}
	pkt := q.lbuf[:n]
	s, err := vnet.ParseLRO(pkt, p.LROSize, q.mtu)
	if err != nil {
		r.Drops[bridge.DropOversize]++
		return false
	}
	hdr := q.plain[:]
	if p.CsumOK {
		hdr = q.valid[:]
	}
	for i := range s.N() {
		m := s.Segment(i, pkt, q.sbuf)
		if m == 0 || m > q.frameLimit(q.sbuf[:m]) {
			r.Drops[bridge.DropOversize]++ // headers too long for the MTU
			return false
		}
		if q.rawWritev(append(q.iov[:0], iovec(hdr), iovec(q.sbuf[:m]))) != 0 {
			r.Drops[bridge.DropTAPWriteError]++
			return false
		}
	}
	r.Offload.SplitWrites++
	r.Offload.SplitWriteFrames += uint64(s.N())
	return true
}

// writeAlone writes packet k of the burst as it is.
func (q *Queue) writeAlone(k int) unix.Errno {
	hdr := q.plain[:]
	if q.pkts[k].CsumOK || q.pkts[k].Checked {
		hdr = q.valid[:]
	}
	iov := append(q.iov[:0], iovec(hdr))
	for _, s := range q.pkts[k].Segs {
		iov = append(iov, iovec(s))
	}
	return q.rawWritev(iov)
}

func (q *Queue) writev(bufs [][]byte) unix.Errno {
	iov := q.iov[:0]
	for _, b := range bufs {
		if len(iov) == cap(iov) {
			return unix.EMSGSIZE
		}
		iov = append(iov, iovec(b))
	}
	return q.rawWritev(iov)
}

func (q *Queue) rawWritev(iov []unix.Iovec) unix.Errno { return sysWritev(q.fd, iov) }

// sysWritev is writev(2). It is a variable for one test, which plays a
// kernel that refuses GSO writes.
var sysWritev = func(fd int, iov []unix.Iovec) unix.Errno {
	_, _, errno := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd),
		uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	return errno
}

func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: unsafe.SliceData(b)}
	v.SetLen(len(b))
	return v
}

// verdict decides whether a packet from the app can be written.
func (q *Queue) verdict(p *bridge.Packet, merge bool) (int, bool) {
	if p.Len < ethHeaderLen || len(p.Segs) == 0 {
		return bridge.DropRunt, false
	}
	if p.LROSegSize != 0 && p.Len <= maxLRO {
		// Written as one GSO frame of LROSegSize segments, or split
		// into them; what is neither is held to the MTU at the write.
		return 0, true
	}
	var first []byte
	if p.Segs[0].Len >= ethHeaderLen {
		first = unsafe.Slice(p.Segs[0].Base, ethHeaderLen)
	}
	if p.Len > q.frameLimit(first) {
		return bridge.DropOversize, false
	}
	return 0, true
}

// frameLimit is the largest frame the MTU allows, one VLAN tag included.
func (q *Queue) frameLimit(first []byte) int {
	if len(first) >= ethHeaderLen && first[12] == 0x81 && first[13] == 0x00 {
		return q.maxFrame + vlanTagLen
	}
	return q.maxFrame
}

// Read fills slots with frames from the kernel: plain frames as they are,
// super-frames split into MTU frames (what does not fit in this burst waits
// for the next call) or, with ReadTSO, handed whole as the batch's last
// frame; frames with a partial checksum finished, or with ReadCsum left for
// the app's side to finish (Frame.CsumStart). On an adopted queue the
// frames up to its first empty read are the backlog (Backlog).
func (q *Queue) Read(slots [][]byte, frames []bridge.Frame, flags bridge.ReadFlags, r *bridge.Result) int {
	if !q.draining.Load() {
		return q.read(slots, frames, flags, r)
	}
	q.emptied = false
	n := q.read(slots, frames, flags, r)
	q.backlog.Add(uint64(n))
	if q.emptied {
		q.draining.Store(false)
	}
	return n
}

// Backlog returns the frames read from the queue's backlog since it was
// adopted, and whether it has been read empty since.
func (q *Queue) Backlog() (frames uint64, drained bool) {
	return q.backlog.Load(), !q.draining.Load()
}

// drainBacklog starts counting the backlog of an adopted queue.
func (q *Queue) drainBacklog() { q.draining.Store(true) }

func (q *Queue) read(slots [][]byte, frames []bridge.Frame, flags bridge.ReadFlags, r *bridge.Result) int {
	q.loadMTU() // for what is read from now on; a pending super keeps its own
	limit := min(len(slots), len(frames))
	if q.offered {
		q.offered = false
		if flags&bridge.ReadSplit != 0 {
			// The app's port cannot take it whole: split it.
			r.Offload.SplitReads++
			r.Offload.SplitFrames += uint64(q.super.N())
			q.next, q.pending = 0, q.super.N()
		}
	}
	filled := 0
	// Bounded work: a kernel that sends only frames kbridge drops must not
	// keep the worker here.
	for reads := 0; filled < limit && reads < 2*limit; {
		if q.pending > 0 {
			for q.pending > 0 && filled < limit {
				frames[filled] = bridge.Frame{Len: q.super.Segment(q.next, q.rbuf[vnet.HdrLen:q.rlen], slots[filled])}
				filled++
				q.next++
				q.pending--
			}
			continue
		}
		reads++
		n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(q.fd),
			uintptr(unsafe.Pointer(&q.rbuf[0])), uintptr(len(q.rbuf)))
		if errno != 0 {
			if errno != unix.EAGAIN && errno != unix.EINTR {
				r.Drops[bridge.DropTAPReadError]++
			}
			q.emptied = errno == unix.EAGAIN
			break
		}
		if int(n) < vnet.HdrLen+ethHeaderLen {
			r.Drops[bridge.DropRunt]++
			r.Dropped++
			continue
		}
		h := vnet.Decode(q.rbuf[:vnet.HdrLen])
		frame := q.rbuf[vnet.HdrLen:n]
		if h.GSOType == vnet.GSONone && h.Flags&vnet.FlagNeedsCsum == 0 {
			// The common case: a whole frame with its checksums.
			if len(frame) > q.frameLimit(frame) {
				r.Drops[bridge.DropOversize]++
				r.Dropped++
				continue
			}
			frames[filled] = bridge.Frame{Len: copy(slots[filled], frame)}
			filled++
			continue
		}
		if h.GSOType == vnet.GSONone && len(frame) > q.frameLimit(frame) {
			r.Drops[bridge.DropOversize]++ // a partial checksum does not make it fit
			r.Dropped++
			continue
		}
		s, err := vnet.Parse(h, frame, q.mtu)
		if err != nil {
			r.Drops[bridge.DropBadVnetHdr]++
			r.Dropped++
			continue
		}
		if start, off, ok := s.PartialCsum(); ok && flags&bridge.ReadCsum != 0 {
			// The app's side finishes it as it copies the frame over.
			frames[filled] = bridge.Frame{Len: copy(slots[filled], frame),
				CsumStart: uint16(start), CsumOffset: uint16(off)}
			filled++
			r.Offload.CsumFromKernel++
			continue
		}
		q.super, q.rlen = s, int(n)
		if l2, l3, l4, mss, v6, ok := s.TSO(); ok && flags&bridge.ReadTSO != 0 {
			// Whole, after the frames read before it; the app may
			// refuse it, and the next Read then splits it.
			frames[filled] = bridge.Frame{Super: frame,
				TSO: bridge.TSOFrame{L2: l2, L3: l3, L4: l4, MSS: mss, IPv6: v6}}
			q.offered = true
			return filled + 1
		}
		if h.GSOType != vnet.GSONone {
			r.Offload.SplitReads++
			r.Offload.SplitFrames += uint64(s.N())
		} else {
			r.Offload.CsumFromKernel++
		}
		q.next, q.pending = 0, s.N()
	}
	return filled
}

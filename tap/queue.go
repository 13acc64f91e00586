package tap

import (
	"errors"
	"log/slog"
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
	fd       int
	maxFrame int
	mtu      int
	merge    atomic.Bool // coalesce writes; the worker reads it once per burst
	log      *slog.Logger
	closed   atomic.Bool

	co       *vnet.Coalescer
	pkts     []vnet.Packet
	segStore [][]byte
	idx      []int // pkts[k] is packet idx[k] of the burst
	lro      []bool
	iov      []unix.Iovec
	plain    [vnet.HdrLen]byte // all zero: a frame as it is
	valid    [vnet.HdrLen]byte // DATA_VALID: the app's NIC checked it

	refuseGSO bool // tests: play a kernel that refuses GSO writes

	rbuf    []byte
	rlen    int
	super   vnet.Super
	next    int  // next segment of super to hand out
	pending int  // segments of super still to hand out
	tso     bool // super goes to the app whole, once the slots before it are put
}

var _ bridge.Kernel = (*Queue)(nil)

// NewQueue wraps fd, a non-blocking descriptor that carries frames with a
// virtio-net header in front, one frame per read and write (a TAP queue, or
// in tests a SOCK_SEQPACKET socket).
func NewQueue(fd int, cfg QueueConfig) *Queue {
	cfg.Batch = max(cfg.Batch, 1)
	cfg.MaxSegs = max(cfg.MaxSegs, 1)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	q := &Queue{
		fd:       fd,
		mtu:      cfg.MTU,
		maxFrame: cfg.MTU + ethHeaderLen,
		log:      cfg.Log,
		co:       vnet.NewCoalescer(cfg.Batch, 0), // up to 64 packets a write
		pkts:     make([]vnet.Packet, cfg.Batch),
		segStore: make([][]byte, cfg.Batch*cfg.MaxSegs),
		idx:      make([]int, cfg.Batch),
		lro:      make([]bool, cfg.Batch),
		iov:      make([]unix.Iovec, 0, maxWriteIov),
		rbuf:     make([]byte, maxRead),
	}
	q.merge.Store(cfg.Merge)
	vnet.Hdr{Flags: vnet.FlagDataValid}.Encode(q.valid[:])
	for i := range q.pkts {
		q.pkts[i].Segs = q.segStore[i*cfg.MaxSegs : i*cfg.MaxSegs : (i+1)*cfg.MaxSegs]
	}
	return q
}

// Fd returns the queue's descriptor.
func (q *Queue) Fd() int { return q.fd }

// Merging reports whether writes are coalesced.
func (q *Queue) Merging() bool { return q.merge.Load() }

// Close closes the descriptor.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	return unix.Close(q.fd)
}

// Write writes packets 0..n-1 of out's burst: merged where the Coalescer
// can, alone otherwise, one writev each.
func (q *Queue) Write(out bridge.AppOut, n int, c *bridge.Counters) {
	var drops [len(bridge.DropNames)]uint64
	var pkts, bytes uint64
	merge := q.merge.Load()
	k := 0
	for i := 0; i < n && k < len(q.pkts); i++ {
		p, err := out.Packet(i)
		if reason, ok := q.verdict(p, err, merge); !ok {
			drops[reason]++
			continue
		}
		vp := &q.pkts[k]
		vp.Segs = vp.Segs[:0]
		for _, s := range p.Segs {
			vp.Segs = append(vp.Segs, unsafe.Slice(s.Base, s.Len))
		}
		vp.Len = p.Len
		vp.CsumOK = p.L4CsumGood
		vp.LROSize = p.LROSegSize
		q.idx[k] = i
		k++
	}
	written := func(ks ...int) {
		for _, j := range ks {
			out.Written(q.idx[j])
			pkts++
			bytes += uint64(q.pkts[j].Len)
		}
	}
	if !merge {
		for j := 0; j < k; j++ {
			if q.writeAlone(j) == 0 {
				written(j)
			} else {
				drops[bridge.DropTAPWriteError]++
			}
		}
	} else {
		for _, w := range q.co.Coalesce(q.pkts[:k]) {
			errno := q.writev(w.Iov)
			switch {
			case errno == 0:
				written(w.Pkts...)
				if w.Merged {
					c.Offload.MergedWrites.Add(1)
					c.Offload.MergedPackets.Add(uint64(len(w.Pkts)))
				} else if q.pkts[w.First].LROSize != 0 {
					c.Offload.LROWrites.Add(1)
				}
			case errno == unix.EINVAL && (w.Merged || q.pkts[w.First].LROSize != 0):
				// Some kernels refuse a GSO write (a short last
				// segment, e269d79c7d35): redo it frame by frame
				// and stop merging on this queue.
				c.Offload.Fallbacks.Add(1)
				q.fallBack(errno)
				for _, j := range w.Pkts {
					if q.pkts[j].Len > q.frameLimit(q.pkts[j].Segs[0]) {
						drops[bridge.DropOversize]++ // an LRO packet, alone
					} else if q.writeAlone(j) == 0 {
						written(j)
					} else {
						drops[bridge.DropTAPWriteError]++
					}
				}
			default:
				drops[bridge.DropTAPWriteError] += uint64(len(w.Pkts))
			}
		}
	}
	c.ToKernelPackets.Add(pkts)
	c.ToKernelBytes.Add(bytes)
	for r, v := range drops {
		if v > 0 {
			c.Drops[r].Add(v)
		}
	}
}

func (q *Queue) fallBack(errno unix.Errno) {
	if !q.merge.Swap(false) {
		return
	}
	q.log.Warn("the kernel refused a coalesced write: writing frame by frame from now on", "err", errno)
}

// writeAlone writes packet k of the burst as it is.
func (q *Queue) writeAlone(k int) unix.Errno {
	hdr := q.plain[:]
	if q.pkts[k].CsumOK {
		hdr = q.valid[:]
	}
	iov := append(q.iov[:0], iovec(hdr))
	for _, s := range q.pkts[k].Segs {
		iov = append(iov, iovec(s))
	}
	return q.rawWritev(iov)
}

func (q *Queue) writev(bufs [][]byte) unix.Errno {
	if q.refuseGSO && vnet.Decode(bufs[0]).GSOType != vnet.GSONone {
		return unix.EINVAL
	}
	iov := q.iov[:0]
	for _, b := range bufs {
		if len(iov) == cap(iov) {
			return unix.EMSGSIZE
		}
		iov = append(iov, iovec(b))
	}
	return q.rawWritev(iov)
}

func (q *Queue) rawWritev(iov []unix.Iovec) unix.Errno {
	_, _, errno := unix.RawSyscall(unix.SYS_WRITEV, uintptr(q.fd),
		uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	return errno
}

func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: unsafe.SliceData(b)}
	v.SetLen(len(b))
	return v
}

// verdict decides whether a packet from the app can be written.
func (q *Queue) verdict(p bridge.Packet, err error, merge bool) (int, bool) {
	switch {
	case errors.Is(err, bridge.ErrTooManySegments):
		return bridge.DropTooManySegs, false
	case err != nil:
		return bridge.DropMalformed, false
	case p.Len < ethHeaderLen || len(p.Segs) == 0:
		return bridge.DropRunt, false
	}
	if p.LROSegSize != 0 && merge && p.Len <= 1<<16 {
		return 0, true // written as one GSO frame of LROSegSize segments
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

// Read fills in's slots with frames from the kernel: plain frames as they
// are, super-frames split into MTU frames (what does not fit in this burst
// waits for the next call), frames with a partial checksum finished.
func (q *Queue) Read(in bridge.AppIn, lens []int, c *bridge.Counters) (filled, dropped int) {
	limit := min(len(lens), in.Cap())
	var bytes uint64
	var runt, oversize, bad uint64
	tsoIn, _ := in.(bridge.AppTSO)
	// Bounded work: a kernel that sends only frames kbridge drops must not
	// keep the worker here.
	for reads := 0; filled < limit && reads < 2*limit; {
		if q.tso {
			if filled > 0 {
				break // the frames before it go to the app first
			}
			q.tso = false
			if q.putTSO(tsoIn, c) {
				continue
			}
			// The app's port cannot take it whole: split it.
			c.Offload.SplitReads.Add(1)
			c.Offload.SplitFrames.Add(uint64(q.super.N()))
			q.next, q.pending = 0, q.super.N()
		}
		if q.pending > 0 {
			for q.pending > 0 && filled < limit {
				n := q.super.Segment(q.next, q.rbuf[vnet.HdrLen:q.rlen], in.Slot(filled))
				lens[filled] = n
				bytes += uint64(n)
				filled++
				q.next++
				q.pending--
			}
			continue
		}
		reads++
		r, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(q.fd),
			uintptr(unsafe.Pointer(&q.rbuf[0])), uintptr(len(q.rbuf)))
		if errno != 0 {
			if errno != unix.EAGAIN && errno != unix.EINTR {
				c.Drops[bridge.DropTAPReadError].Add(1)
			}
			break
		}
		if int(r) < vnet.HdrLen+ethHeaderLen {
			runt++
			dropped++
			continue
		}
		h := vnet.Decode(q.rbuf[:vnet.HdrLen])
		frame := q.rbuf[vnet.HdrLen:r]
		if h.GSOType == vnet.GSONone && h.Flags&vnet.FlagNeedsCsum == 0 {
			// The common case: a whole frame with its checksums.
			if len(frame) > q.frameLimit(frame) {
				oversize++
				dropped++
				continue
			}
			lens[filled] = copy(in.Slot(filled), frame)
			bytes += uint64(len(frame))
			filled++
			continue
		}
		if h.GSOType == vnet.GSONone && len(frame) > q.frameLimit(frame) {
			oversize++ // a partial checksum does not make it fit
			dropped++
			continue
		}
		s, err := vnet.Parse(h, frame, q.mtu)
		if err != nil {
			bad++
			dropped++
			continue
		}
		q.super, q.rlen = s, int(r)
		if _, _, _, _, _, ok := s.TSO(); ok && tsoIn != nil && tsoIn.TakesTSO() {
			q.tso = true
			continue
		}
		if h.GSOType != vnet.GSONone {
			c.Offload.SplitReads.Add(1)
			c.Offload.SplitFrames.Add(uint64(s.N()))
		} else {
			c.Offload.CsumCompleted.Add(1)
		}
		q.next, q.pending = 0, s.N()
	}
	c.FromKernelBytes.Add(bytes)
	if runt+oversize+bad > 0 {
		c.Drops[bridge.DropRunt].Add(runt)
		c.Drops[bridge.DropOversize].Add(oversize)
		c.Drops[bridge.DropBadVnetHdr].Add(bad)
	}
	return filled, dropped
}

// putTSO hands the super-frame in q.rbuf to an app that segments it itself.
// It returns false when the app's port cannot take it whole.
func (q *Queue) putTSO(in bridge.AppTSO, c *bridge.Counters) bool {
	l2, l3, l4, mss, v6, _ := q.super.TSO()
	frame := q.rbuf[vnet.HdrLen:q.rlen]
	res, err := in.PutTSO(frame, bridge.TSOFrame{L2: l2, L3: l3, L4: l4, MSS: mss, IPv6: v6})
	if err != nil {
		return false
	}
	c.Offload.TSOToApp.Add(1)
	c.FromKernelPackets.Add(uint64(res.Queued))
	c.FromKernelBytes.Add(uint64(len(frame)))
	if res.NoMbuf+res.RingFull > 0 {
		c.Drops[bridge.DropNoMbuf].Add(uint64(res.NoMbuf))
		c.Drops[bridge.DropRingFull].Add(uint64(res.RingFull))
	}
	return true
}

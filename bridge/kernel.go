package bridge

// Kernel is the kernel's side of one queue pair. Package tap implements it
// over one queue of a TAP device; it owns every syscall and every frame rule
// (MTU, VLAN, offloads), so that another kernel side (vhost-net, say) fits
// behind the same calls. Like wireguard-go's tun.Device it sees plain
// batches only: it never calls the app's side, and it counts nothing in the
// worker's Counters; it says what it did in a Result and the worker counts.
type Kernel interface {
	// Fd is a descriptor that polls readable when the kernel has frames
	// for the app: the worker parks on it.
	Fd() int
	// Write delivers pkts to the kernel. It sets written[i] for each
	// packet it delivered (len(written) >= len(pkts)) and adds to r its
	// drops by reason and its offload events; the packets stay the
	// caller's.
	Write(pkts []Packet, written []bool, r *Result)
	// Read reads frames for the app into slots, from the start, and
	// describes them in frames (len(frames) >= len(slots)). It returns
	// how many frames it produced. With ReadTSO, a TCP super-frame may
	// end the batch whole (Frame.Super); with ReadSplit, the super-frame
	// of the previous Read, which the app refused, is split into the
	// slots first. Frames it read and dropped are counted in r.Dropped
	// (and by reason in r.Drops), so that the worker can tell an idle
	// kernel from a busy one.
	Read(slots [][]byte, frames []Frame, flags ReadFlags, r *Result) int
	// FdGeneration counts the times Fd's number got a new file under the
	// running worker (tap's keeper dup3s a re-made interface's queue onto
	// it); 0 for a side whose fd never changes. The worker's waiter
	// follows it (policy.Waiter.Follow) and watches the new file at the
	// next park.
	FdGeneration() uint64
}

// ReadFlags say what the app's side takes at this Read.
type ReadFlags uint8

const (
	// ReadTSO: the app takes TCP super-frames whole (AppTSO.TakesTSO).
	ReadTSO ReadFlags = 1 << iota
	// ReadSplit: the app refused the super-frame the previous Read
	// handed over (ErrTooManySegments): split it into the slots, as for
	// an app without TSO, before reading anything else.
	ReadSplit
	// ReadCsum: the app's side finishes partial checksums itself
	// (App.Csum): a frame the kernel handed with NEEDS_CSUM lies in its
	// slot as the kernel wrote it, with Frame.CsumStart and CsumOffset set.
	ReadCsum
)

// Frame is one frame a Read produced. A plain frame lies in its slot, Len
// bytes long. A super-frame (Super != nil) uses no slot: it lies in the
// kernel side's buffer, valid until the next Read, and ends the batch.
type Frame struct {
	Len   int
	Super []byte   // a TCP super-frame for an app that takes TSO, or nil
	TSO   TSOFrame // how to segment Super
	// With ReadCsum, a plain frame whose checksum the kernel left partial:
	// the app's side sums from CsumStart to the end and stores the result
	// at CsumStart+CsumOffset. CsumStart 0: the frame's checksums are whole.
	CsumStart, CsumOffset uint16
}

// Result is what one Kernel call did besides the frames it moved: frames it
// read and dropped, drops by reason and offload events. The caller zeroes it
// (or adds several calls up) and counts it once.
type Result struct {
	Dropped int // frames read and dropped (Read only)
	Drops   [NumDrops]uint64
	Offload OffloadSnapshot
}

// Reset zeroes r for the next call.
func (r *Result) Reset() { *r = Result{} }

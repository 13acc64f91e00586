package bridge

import "sync/atomic"

// Drop reasons, in the order of Counters.Drops.
const (
	DropOversize      = iota // frame larger than the MTU allows
	DropRunt                 // frame shorter than an Ethernet header
	DropTooManySegs          // chained mbuf with more segments than a writev takes
	DropMalformed            // mbuf chain inconsistent with its length
	DropTAPWriteError        // the kernel refused the frame
	DropTAPReadError         // reading the TAP device failed
	DropNoMbuf               // the app's mempool was empty
	DropRingFull             // the app's from_kernel ring was full
	DropBadVnetHdr           // the kernel's virtio-net header made no sense
	NumDrops
)

// DropNames are the metric labels of the drop reasons.
var DropNames = [NumDrops]string{
	"oversize", "runt", "too_many_segments", "malformed",
	"tap_write_error", "tap_read_error", "no_mbuf", "ring_full",
	"bad_vnet_header",
}

// Counters of one queue. Workers add to them once per burst; anyone may read
// them at any time.
type Counters struct {
	ToKernelPackets   atomic.Uint64
	ToKernelBytes     atomic.Uint64
	FromKernelPackets atomic.Uint64
	FromKernelBytes   atomic.Uint64
	Drops             [NumDrops]atomic.Uint64
	Parks             atomic.Uint64 // times the worker blocked in epoll
	Wakeups           atomic.Uint64 // parks ended by the app's kick or the TAP
	Timeouts          atomic.Uint64 // parks ended by the park timeout
	Sleeps            atomic.Uint64 // precise sleeps (adaptive backoff, fixed, policed_sleep)
	SpinNanos         atomic.Uint64 // time spent polling with nothing to do
	Offload           OffloadCounters
}

// OffloadCounters count what the kernel side's offloads did.
type OffloadCounters struct {
	MergedWrites  atomic.Uint64 // GSO writes made of several app packets (GRO)
	MergedPackets atomic.Uint64 // app packets that went down inside them
	LROWrites     atomic.Uint64 // app LRO (mode vhost: TSO) packets written in GSO writes, alone or merged
	LROMerged     atomic.Uint64 // those of them merged with other packets (in MergedPackets too)
	SplitReads    atomic.Uint64 // kernel super-frames split into MTU frames
	SplitFrames   atomic.Uint64 // frames those splits made
	TSOToApp      atomic.Uint64 // super-frames handed whole to an app that declared TSO
	// CsumFromKernel counts kernel frames whose partial checksum
	// (NEEDS_CSUM) kbridge finished before the app got them.
	CsumFromKernel atomic.Uint64
	// CsumToKernel counts app packets whose partial checksum kbridge
	// finished before the kernel got them (mode vhost: a guest's
	// NEEDS_CSUM; ring mode has none).
	CsumToKernel atomic.Uint64
	Fallbacks    atomic.Uint64 // merged writes the kernel refused, redone frame by frame
	// SplitWrites counts app LRO (mode vhost: TSO) packets cut into MTU
	// frames in software, because the kernel refuses GSO writes or they
	// are not TCP super-frames it segments; SplitWriteFrames the frames.
	SplitWrites      atomic.Uint64
	SplitWriteFrames atomic.Uint64
	// What the coalescer saw of the app's packets (vnet.CoalesceStats):
	// packets offered, writes it planned, packets whose IPv4 or TCP
	// checksum was wrong (written alone, unmerged, for the kernel to drop)
	// and packets that came with their checksums verified, which it
	// does not check again (the app's NIC's RTE_MBUF_F_RX_L4_CKSUM_GOOD,
	// or a partial checksum kbridge completed itself).
	CoalescePackets atomic.Uint64
	CoalesceWrites  atomic.Uint64
	BadCsum         atomic.Uint64
	CsumTrusted     atomic.Uint64
}

// OffloadSnapshot is a plain copy of OffloadCounters.
type OffloadSnapshot struct {
	MergedWrites     uint64 `json:"merged_writes"`
	MergedPackets    uint64 `json:"merged_packets"`
	LROWrites        uint64 `json:"lro_writes"`
	LROMerged        uint64 `json:"lro_merged"`
	SplitReads       uint64 `json:"split_reads"`
	SplitFrames      uint64 `json:"split_frames"`
	TSOToApp         uint64 `json:"tso_to_app"`
	CsumFromKernel   uint64 `json:"csum_completed_from_kernel"`
	CsumToKernel     uint64 `json:"csum_completed_to_kernel"`
	Fallbacks        uint64 `json:"fallbacks"`
	SplitWrites      uint64 `json:"split_writes"`
	SplitWriteFrames uint64 `json:"split_write_frames"`
	CoalescePackets  uint64 `json:"coalesce_packets"`
	CoalesceWrites   uint64 `json:"coalesce_writes"`
	BadCsum          uint64 `json:"coalesce_bad_csum"`
	CsumTrusted      uint64 `json:"coalesce_csum_trusted"`
}

// Snapshot copies the counters.
func (c *OffloadCounters) Snapshot() OffloadSnapshot {
	return OffloadSnapshot{
		MergedWrites:     c.MergedWrites.Load(),
		MergedPackets:    c.MergedPackets.Load(),
		LROWrites:        c.LROWrites.Load(),
		LROMerged:        c.LROMerged.Load(),
		SplitReads:       c.SplitReads.Load(),
		SplitFrames:      c.SplitFrames.Load(),
		TSOToApp:         c.TSOToApp.Load(),
		CsumFromKernel:   c.CsumFromKernel.Load(),
		CsumToKernel:     c.CsumToKernel.Load(),
		Fallbacks:        c.Fallbacks.Load(),
		SplitWrites:      c.SplitWrites.Load(),
		SplitWriteFrames: c.SplitWriteFrames.Load(),
		CoalescePackets:  c.CoalescePackets.Load(),
		CoalesceWrites:   c.CoalesceWrites.Load(),
		BadCsum:          c.BadCsum.Load(),
		CsumTrusted:      c.CsumTrusted.Load(),
	}
}

// add adds o's events, one atomic add each for those that happened.
func (c *OffloadCounters) add(o *OffloadSnapshot) {
	addIf(&c.MergedWrites, o.MergedWrites)
	addIf(&c.MergedPackets, o.MergedPackets)
	addIf(&c.LROWrites, o.LROWrites)
	addIf(&c.LROMerged, o.LROMerged)
	addIf(&c.SplitReads, o.SplitReads)
	addIf(&c.SplitFrames, o.SplitFrames)
	addIf(&c.TSOToApp, o.TSOToApp)
	addIf(&c.CsumFromKernel, o.CsumFromKernel)
	addIf(&c.CsumToKernel, o.CsumToKernel)
	addIf(&c.Fallbacks, o.Fallbacks)
	addIf(&c.SplitWrites, o.SplitWrites)
	addIf(&c.SplitWriteFrames, o.SplitWriteFrames)
	addIf(&c.CoalescePackets, o.CoalescePackets)
	addIf(&c.CoalesceWrites, o.CoalesceWrites)
	addIf(&c.BadCsum, o.BadCsum)
	addIf(&c.CsumTrusted, o.CsumTrusted)
}

func addIf(c *atomic.Uint64, v uint64) {
	if v != 0 {
		c.Add(v)
	}
}

// Events names the offload events with their values, in a fixed order, for
// metrics and display.
func (o OffloadSnapshot) Events() [16]Event {
	return [...]Event{
		{"merged_writes", o.MergedWrites}, {"merged_packets", o.MergedPackets}, {"lro_writes", o.LROWrites}, {"lro_merged", o.LROMerged},
		{"split_reads", o.SplitReads}, {"split_frames", o.SplitFrames}, {"tso_to_app", o.TSOToApp},
		{"csum_completed_from_kernel", o.CsumFromKernel}, {"csum_completed_to_kernel", o.CsumToKernel},
		{"fallbacks", o.Fallbacks}, {"split_writes", o.SplitWrites}, {"split_write_frames", o.SplitWriteFrames},
		{"coalesce_packets", o.CoalescePackets}, {"coalesce_writes", o.CoalesceWrites},
		{"coalesce_bad_csum", o.BadCsum}, {"coalesce_csum_trusted", o.CsumTrusted},
	}
}

// Event is one named counter value.
type Event struct {
	Name  string
	Value uint64
}

// Snapshot is a plain copy of Counters, for JSON and display.
type Snapshot struct {
	Queue             int               `json:"queue"`
	Mode              string            `json:"mode"`
	ToKernelPackets   uint64            `json:"to_kernel_packets"`
	ToKernelBytes     uint64            `json:"to_kernel_bytes"`
	FromKernelPackets uint64            `json:"from_kernel_packets"`
	FromKernelBytes   uint64            `json:"from_kernel_bytes"`
	Drops             map[string]uint64 `json:"drops"`
	Parks             uint64            `json:"parks"`
	Wakeups           uint64            `json:"wakeups"`
	Timeouts          uint64            `json:"timeouts"`
	Sleeps            uint64            `json:"sleeps"`
	SpinNanos         uint64            `json:"spin_ns"`
	Offload           OffloadSnapshot   `json:"offload"`
	// Residence[i] counts packets that waited less than ResidenceBounds[i]
	// ns between the app's enqueue and the TAP write.
	Residence []uint64 `json:"residence,omitempty"`
}

// Snapshot copies the counters.
func (c *Counters) Snapshot() Snapshot {
	s := Snapshot{
		ToKernelPackets:   c.ToKernelPackets.Load(),
		ToKernelBytes:     c.ToKernelBytes.Load(),
		FromKernelPackets: c.FromKernelPackets.Load(),
		FromKernelBytes:   c.FromKernelBytes.Load(),
		Drops:             make(map[string]uint64, NumDrops),
		Parks:             c.Parks.Load(),
		Wakeups:           c.Wakeups.Load(),
		Timeouts:          c.Timeouts.Load(),
		Sleeps:            c.Sleeps.Load(),
		SpinNanos:         c.SpinNanos.Load(),
		Offload:           c.Offload.Snapshot(),
	}
	for i := range c.Drops {
		s.Drops[DropNames[i]] = c.Drops[i].Load()
	}
	return s
}

// TotalDrops sums the drops of all reasons.
func (s Snapshot) TotalDrops() uint64 {
	var n uint64
	for _, v := range s.Drops {
		n += v
	}
	return n
}

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
	numDrops
)

// DropNames are the metric labels of the drop reasons.
var DropNames = [numDrops]string{
	"oversize", "runt", "too_many_segments", "malformed",
	"tap_write_error", "tap_read_error", "no_mbuf", "ring_full",
}

// Counters of one queue. Workers add to them once per burst; anyone may read
// them at any time.
type Counters struct {
	ToKernelPackets   atomic.Uint64
	ToKernelBytes     atomic.Uint64
	FromKernelPackets atomic.Uint64
	FromKernelBytes   atomic.Uint64
	Drops             [numDrops]atomic.Uint64
	Parks             atomic.Uint64 // times the worker blocked in epoll
	Wakeups           atomic.Uint64 // parks ended by the app's kick or the TAP
	Timeouts          atomic.Uint64 // parks ended by the park timeout
	Sleeps            atomic.Uint64 // precise sleeps (adaptive backoff, fixed)
	SpinNanos         atomic.Uint64 // time spent polling with nothing to do
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
		Drops:             make(map[string]uint64, numDrops),
		Parks:             c.Parks.Load(),
		Wakeups:           c.Wakeups.Load(),
		Timeouts:          c.Timeouts.Load(),
		Sleeps:            c.Sleeps.Load(),
		SpinNanos:         c.SpinNanos.Load(),
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

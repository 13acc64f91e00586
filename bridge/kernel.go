package bridge

// Kernel is the kernel's side of one queue pair. Package tap implements it
// over one queue of a TAP device; it owns every syscall and every frame rule
// (MTU, VLAN, offloads), so that another kernel side (vhost-net, say) fits
// behind the same three calls.
type Kernel interface {
	// Fd is a descriptor that polls readable when the kernel has frames
	// for the app: the worker parks on it.
	Fd() int
	// Write delivers packets 0..n-1 of out's current burst to the kernel.
	// It marks each delivered packet with out.Written and adds what it
	// did (packets, bytes, drops by reason, offload counters) to c.
	Write(out AppOut, n int, c *Counters)
	// Read fills in's slots from the start with frames for the app and
	// stores their lengths in lens, up to len(lens) (at most in.Cap()).
	// It returns how many slots it filled and the number of frames it
	// read and dropped, so that the worker can tell an idle kernel from a
	// busy one. Drops are counted in c.
	Read(in AppIn, lens []int, c *Counters) (filled, dropped int)
}

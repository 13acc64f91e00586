// Package limits names, once, the sizes that kbridge's configuration checks
// and its data path must agree on: the MTU range a TAP can be given and the
// frame buffers that range has to fit, and the longest port and interface
// names, and a burst's packets and a packet's segments. config validates
// against these constants and bridge, daemon and ring's burst core size
// their buffers and checks with them, so a value the configuration
// accepts is one the data path can carry. It imports nothing, so any
// package can use it without an import cycle.
package limits

// Interface MTUs.
const (
	// MinMTU is the smallest MTU kbridge accepts: IPv4's minimum
	// (RFC 791), which is also the kernel's ETH_MIN_MTU.
	MinMTU = 68

	// MaxMTU is the largest MTU of the TAP interface (interface.mtu): the
	// largest frame it allows, read into one FrameBuffer, still leaves
	// room for a virtio-net header and the slack that tells an oversize
	// frame from one that fits:
	//
	//	65536 FrameBuffer
	//	  -10 VnetHeaderLen (struct virtio_net_hdr)
	//	  -14 EthHeaderLen
	//	   -4 VLANTagLen (one tag is allowed beyond the MTU)
	//	  -64 FrameSlack
	//	= 65444
	//
	// The kernel would take up to MaxKernelMTU, but a frame that long
	// would not fit a worker's buffer.
	MaxMTU = FrameBuffer - VnetHeaderLen - EthHeaderLen - VLANTagLen - FrameSlack

	// MaxKernelMTU is the kernel's ETH_MAX_MTU, the bound of an interface
	// kbridge does not read frames from (mode xdp's veth pair).
	MaxKernelMTU = 0xFFFF
)

// Frame buffers.
const (
	// FrameBuffer is the largest buffer a frame from the kernel is read
	// into: ring.Queue.In refuses slots larger than 64 KiB.
	FrameBuffer = 1 << 16
	// EthHeaderLen is an Ethernet header without VLAN tag.
	EthHeaderLen = 14
	// VLANTagLen is one 802.1Q tag.
	VLANTagLen = 4
	// VnetHeaderLen is struct virtio_net_hdr, which precedes every frame
	// the TAP reads or writes: the TAP is always opened with IFF_VNET_HDR,
	// with interface.offload on or off.
	VnetHeaderLen = 10
	// FrameSlack is room past the largest legal frame, so that a frame
	// that is too long is seen as such instead of being cut to fit.
	FrameSlack = 64
)

// Names.
const (
	// IfNameMax is the longest interface name: IFNAMSIZ - 1.
	IfNameMax = 15
	// PortNameMax is the longest port name (the name the app passes to
	// kbridge_port_create()): KBRIDGE_NAME_MAX in
	// include/kbridge/kbridge_ring.h, chosen so that a port name is also a
	// valid interface name.
	PortNameMax = 15
)

// Bursts.
const (
	// MaxBatch is the most packets one burst moves (workers.batch): the
	// size of a worker's burst buffers, each made in one allocation.
	MaxBatch = 256
	// MaxSegments is the most mbuf segments of one app packet written
	// whole (workers.max_segments): an iovec each in one writev(2).
	MaxSegments = 64
)

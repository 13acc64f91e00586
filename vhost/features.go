package vhost

import (
	"math/bits"
	"strconv"
	"strings"
)

// Virtio feature bits kbridge cares about (virtio 1.1, 5.1.3; vhost-user).
const (
	FeatCSUM          = 0
	FeatGuestCSUM     = 1
	FeatGuestTSO4     = 7
	FeatGuestTSO6     = 8
	FeatHostTSO4      = 11
	FeatHostTSO6      = 12
	FeatMrgRxbuf      = 15
	FeatCtrlVQ        = 17
	FeatMQ            = 22
	FeatIndirectDesc  = 28
	FeatEventIdx      = 29
	FeatProtocolFeats = 30
	FeatVersion1      = 32
	FeatRingPacked    = 34
)

var featNames = map[int]string{
	0: "CSUM", 1: "GUEST_CSUM", 2: "CTRL_GUEST_OFFLOADS", 3: "MTU", 5: "MAC",
	7: "GUEST_TSO4", 8: "GUEST_TSO6", 9: "GUEST_ECN", 10: "GUEST_UFO",
	11: "HOST_TSO4", 12: "HOST_TSO6", 13: "HOST_ECN", 14: "HOST_UFO",
	15: "MRG_RXBUF", 16: "STATUS", 17: "CTRL_VQ", 18: "CTRL_RX", 19: "CTRL_VLAN",
	21: "GUEST_ANNOUNCE", 22: "MQ", 23: "CTRL_MAC_ADDR", 24: "NOTIFY_ON_EMPTY",
	27: "ANY_LAYOUT", 28: "RING_INDIRECT_DESC", 29: "RING_EVENT_IDX",
	30: "PROTOCOL_FEATURES", 32: "VERSION_1", 33: "ACCESS_PLATFORM",
	34: "RING_PACKED", 35: "IN_ORDER", 36: "ORDER_PLATFORM",
}

// FeatureNames lists the names of the bits set in f, lowest first; unknown
// bits appear as bitN.
func FeatureNames(f uint64) []string {
	var out []string
	for f != 0 {
		b := bits.TrailingZeros64(f)
		f &^= 1 << b
		if n, ok := featNames[b]; ok {
			out = append(out, n)
		} else {
			out = append(out, "bit"+strconv.Itoa(b))
		}
	}
	return out
}

// Offloads summarises what a negotiated feature set means for the data
// path, for the log: which checksums and TSOs each direction carries.
type Offloads struct {
	// AppCsum: the app may send packets with a partial checksum
	// (VIRTIO_NET_F_CSUM); AppTSO: TCP super-frames (HOST_TSO4/6).
	AppCsum, AppTSO bool
	// KernelCsum: kbridge may hand the app partial checksums
	// (GUEST_CSUM); KernelTSO4/6: super-frames (GUEST_TSO4/6).
	KernelCsum, KernelTSO4, KernelTSO6 bool
	Mergeable                          bool
}

// OffloadsOf decodes a negotiated feature set.
func OffloadsOf(f uint64) Offloads {
	has := func(b int) bool { return f&(1<<b) != 0 }
	return Offloads{
		AppCsum:    has(FeatCSUM),
		AppTSO:     has(FeatHostTSO4) || has(FeatHostTSO6),
		KernelCsum: has(FeatGuestCSUM),
		KernelTSO4: has(FeatGuestTSO4),
		KernelTSO6: has(FeatGuestTSO6),
		Mergeable:  has(FeatMrgRxbuf),
	}
}

// FeatureString is the features' names joined by commas.
func FeatureString(f uint64) string { return strings.Join(FeatureNames(f), ",") }

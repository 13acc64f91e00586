package vnet

import (
	"encoding/binary"
	"errors"
)

// HdrLen is the size of struct virtio_net_hdr without num_buffers, which is
// what a TAP uses unless TUNSETVNETHDRSZ says otherwise.
const HdrLen = 10

// virtio_net_hdr flags.
const (
	FlagNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM: checksum from CsumStart, stored at CsumStart+CsumOffset
	FlagDataValid = 2 // VIRTIO_NET_HDR_F_DATA_VALID: the L4 checksum was verified
)

// virtio_net_hdr gso_type values.
const (
	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3
	GSOTCPv6 = 4
	GSOUDPL4 = 5
	GSOECN   = 0x80
)

// Hdr is struct virtio_net_hdr.
type Hdr struct {
	Flags, GSOType                         uint8
	HdrLen, GSOSize, CsumStart, CsumOffset uint16
}

// Encode writes h into b[:HdrLen]. The multi-byte fields are little-endian:
// a TAP uses the host's byte order (virtio legacy), and kbridge runs on
// little-endian hosts (x86-64, arm64); a big-endian host would need
// TUNSETVNETLE.
func (h Hdr) Encode(b []byte) {
	_ = b[HdrLen-1]
	b[0] = h.Flags
	b[1] = h.GSOType
	binary.LittleEndian.PutUint16(b[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(b[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(b[8:], h.CsumOffset)
}

// Decode reads a header written by Encode (or by the kernel).
func Decode(b []byte) Hdr {
	_ = b[HdrLen-1]
	return Hdr{
		Flags:      b[0],
		GSOType:    b[1],
		HdrLen:     binary.LittleEndian.Uint16(b[2:]),
		GSOSize:    binary.LittleEndian.Uint16(b[4:]),
		CsumStart:  binary.LittleEndian.Uint16(b[6:]),
		CsumOffset: binary.LittleEndian.Uint16(b[8:]),
	}
}

// ErrBadHeader is what every Parse error matches with errors.Is, so that the
// caller can count "bad vnet header" drops with one counter; the wrapped
// HeaderError says why.
var ErrBadHeader = errors.New("vnet: bad virtio_net_hdr")

// HeaderError is a reason for rejecting a frame read from the TAP. The values
// are package variables so that the error path does not allocate either.
type HeaderError struct{ Reason string }

func (e *HeaderError) Error() string        { return "vnet: bad virtio_net_hdr: " + e.Reason }
func (e *HeaderError) Is(target error) bool { return target == ErrBadHeader }

var (
	errGSOECN       = &HeaderError{"GSO_ECN is not supported (TUN_F_TSO_ECN is not offered)"}
	errGSOUDP       = &HeaderError{"UDP GSO is not supported (USO/UFO are not offered)"}
	errGSOType      = &HeaderError{"unknown gso_type"}
	errGSONoCsum    = &HeaderError{"GSO without NEEDS_CSUM"}
	errGSOSize      = &HeaderError{"gso_size is 0"}
	errCsumRange    = &HeaderError{"csum_start/csum_offset outside the frame"}
	errCsumOdd      = &HeaderError{"odd csum_offset"}
	errCsumMismatch = &HeaderError{"csum_start/csum_offset do not point at the TCP checksum"}
	errShort        = &HeaderError{"frame shorter than an Ethernet header"}
	errL2           = &HeaderError{"Ethernet header malformed or unsupported for GSO"}
	errL3           = &HeaderError{"IP header malformed, fragmented, with extension headers, or not TCP"}
	errL3Version    = &HeaderError{"IP version does not match gso_type"}
	errTooLong      = &HeaderError{"frame longer than mtu+18 without GSO"}
	errMTU          = &HeaderError{"mtu too small for the headers"}
)

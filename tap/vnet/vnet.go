// Package vnet is the offloaded kernel side of a TAP opened with
// IFF_VNET_HDR, as pure Go over byte slices (no cgo, no syscalls, no
// allocations once warm): hdr.go encodes and decodes the 10-byte
// struct virtio_net_hdr; csum.go holds the ones-complement helpers (a uint64
// accumulating sum over one or several slices, pseudo-header sums); frame.go
// parses Ethernet (one optional 802.1Q tag), IPv4/IPv6 and TCP headers;
// coalesce.go is the app-to-kernel direction, a GRO that merges in-order TCP
// segments of one flow within a burst into one GSO super-frame written with a
// single writev (Coalescer); split.go is the kernel-to-app direction, which
// cuts a GSO super-frame read from the TAP into MTU-sized frames with finished
// checksums, or completes the checksum of a NEEDS_CSUM frame (Parse, Super).
// The caller (package tap) does the read/writev syscalls and the conversion
// between mbuf memory and [][]byte.
package vnet

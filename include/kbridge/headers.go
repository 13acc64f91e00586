// Package kbridge is the app's ABI: the C headers a DPDK application
// includes to hand kbridge its exception traffic (kbridge.h and the
// headers of its concerns, KNI's API over it in rte_kni.h, kbridge_child.h),
// exactly as make install-dev and the Debian package install them, and
// nothing private beside them.
//
// Go code whose C includes these headers from its own directory refers to
// Headers (ring, ring/ringtest): Go's build cache hashes only a package's
// own files, and the reference makes every byte of the headers part of
// what that code is built from, so an edit here rebuilds it.
//
// The layout of what the app and kbridge share, field by field, is
// recorded per version in testdata/abi-v<N>.txt (read by abiprobe, a
// cgo package of its own so that no product binary links the probe) and
// held there by TestLayoutIsTheReleasedOnes, which says how to record a
// new version.
package kbridge

import "embed"

// Headers are the app's headers, as installed.
//
//go:embed *.h
var Headers embed.FS

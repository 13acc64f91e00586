// Package abiprobe reads the layout of what a DPDK app and kbridge share
// (the structures of include/kbridge's headers) as a C compiler lays it
// out: the table include/kbridge's test compares with the released
// versions'. A cgo package of its own, so that the probe's C is linked into
// no product binary.
package abiprobe

/*
#include "probe.h"
*/
import "C"

import (
	"unsafe"

	"github.com/kbridge/kbridge/include/kbridge"
)

// probe.c includes the app's headers from the directory above, which Go's
// build cache does not hash for this package: kbridge.Headers makes it.
var _ = kbridge.Headers

// Item is one line of the table: "sizeof S", "offsetof S.field", a
// constant, or "layout item NAME" (its index in kbridge_layout.v).
type Item struct {
	Name  string
	Value uint64
}

// Version is KBRIDGE_VERSION of the headers.
func Version() int { return int(C.kb_abi_version()) }

// Items returns the table, in probe.c's order.
func Items() []Item {
	var n C.uint
	c := unsafe.Slice(C.kb_abi_table(&n), int(n))
	out := make([]Item, len(c))
	for i, it := range c {
		out[i] = Item{Name: C.GoString(it.name), Value: uint64(it.value)}
	}
	return out
}

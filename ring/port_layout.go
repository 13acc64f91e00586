package ring

// What the app and kbridge must agree on to share mbufs and rings (kbridge.h
// version 7): the app records its build's layout in the control block and
// OpenPort refuses one that differs (port.c's kb_layout_check). These give
// that check to the package's tests without a DPDK app.

/*
#include <stdlib.h>
#include "port.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// layoutMine is kbridge's own layout: the values kbridge_port_create()
// records for an app built as kbridge is, and the items' names.
func layoutMine() (values []uint32, names []string) {
	var l C.struct_kbridge_layout
	C.kb_layout_mine(&l)
	for i := range int(l.n) {
		values = append(values, uint32(l.v[i]))
		names = append(names, C.GoString(C.kb_layout_name(C.uint(i))))
	}
	return values, names
}

// checkLayout runs kbridge's check on a control block's layout holding
// values: nil, or ErrLayoutMismatch naming the first item that differs.
func checkLayout(values []uint32) error {
	var l C.struct_kbridge_layout
	if len(values) > len(l.v) {
		return fmt.Errorf("%w: %d items", ErrLayoutMismatch, len(values))
	}
	l.n = C.uint32_t(len(values))
	for i, v := range values {
		l.v[i] = C.uint32_t(v)
	}
	why := (*C.char)(C.malloc(256))
	defer C.free(unsafe.Pointer(why))
	if C.kb_layout_check(&l, why, 256) < 0 {
		return fmt.Errorf("%w: %s", ErrLayoutMismatch, C.GoString(why))
	}
	return nil
}

//go:build kbridge_testhook

package ring

/*
#cgo CFLAGS: -DKB_RING_TESTHOOK
#include "port.h"
*/
import "C"

import (
	"os"
	"strings"
)

// TestHook reports whether this build has the ring test hook.
const TestHook = true

// In a kbridge built with -tags kbridge_testhook (tests only; see
// tests/restart/reconcile_test.go), KBRIDGE_TEST_PARK ("to_kernel",
// "from_kernel", "fresh", "spent", comma-separated) parks the worker once
// inside its first non-empty operation on that ring: between to_kernel's
// or fresh's cons.head and cons.tail, between from_kernel's or spent's
// prod.head and its copy.
// A product build has neither the variable nor the branch (reconcile.c).
func init() {
	var bits C.int
	for _, d := range strings.Split(os.Getenv("KBRIDGE_TEST_PARK"), ",") {
		switch strings.TrimSpace(d) {
		case "to_kernel":
			bits |= C.KB_RING_PARK_TO_KERNEL
		case "from_kernel":
			bits |= C.KB_RING_PARK_FROM_KERNEL
		case "fresh":
			bits |= C.KB_RING_PARK_FRESH
		case "spent":
			bits |= C.KB_RING_PARK_SPENT
		}
	}
	C.kb_ring_test_park = bits
}

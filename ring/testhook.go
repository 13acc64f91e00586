//go:build kbridge_testhook

package ring

/*
#include "port.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// TestHook reports whether this build has the ring test hook.
const TestHook = true

// In a kbridge built with -tags kbridge_testhook (tests only; see
// tests/restart/reconcile_test.go), KBRIDGE_TEST_PARK ("to_kernel",
// "from_kernel", "fresh", "spent", comma-separated) parks the worker once
// inside its first non-empty operation on that ring: between to_kernel's
// or fresh's cons.head and cons.tail, between from_kernel's or spent's
// prod.head and its copy.
// A product build has neither the variable nor the branch (port_reconcile.c).
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
	setTestHold(os.Getenv("KBRIDGE_TEST_HOLD"))
}

// setTestHold arms the hold of burst.h for KBRIDGE_TEST_HOLD's value v
// ("out", "in" or "out,in", tests/restart's owner_test.go and
// takeover_test.go): the next non-empty burst of each direction named, in a
// buffer with a held record, is held for up to 60 s.
// A product build has neither the variable nor the branch (burst.h).
func setTestHold(v string) {
	var bits C.int
	for _, d := range strings.Split(v, ",") {
		switch strings.TrimSpace(d) {
		case "out":
			bits |= C.KB_TEST_HOLD_OUT
		case "in":
			bits |= C.KB_TEST_HOLD_IN
		}
	}
	C.kb_test_hold = bits
}

// occupyForTest, in a kbridge built with the test hook, maps a page where
// KBRIDGE_TEST_EAL_OCCUPY (an address in hex: one of the app's hugepages)
// says, in the first KBRIDGE_TEST_EAL_OCCUPY_STARTS starts of EAL of this
// process (attempt counts those before): that start's EAL finds the
// address taken, as ASLR can make it (ErrAddressTaken), deterministically.
func occupyForTest(attempt int) {
	addr, err := strconv.ParseUint(strings.TrimPrefix(os.Getenv("KBRIDGE_TEST_EAL_OCCUPY"), "0x"), 16, 64)
	starts, _ := strconv.Atoi(os.Getenv("KBRIDGE_TEST_EAL_OCCUPY_STARTS"))
	if err != nil || attempt >= starts {
		return
	}
	page := uintptr(addr) &^ 0xfff
	// A raw mmap: the address is no Go pointer.
	got, _, errno := unix.Syscall6(unix.SYS_MMAP, page, 4096, unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if errno != 0 || got != page {
		fmt.Fprintf(os.Stderr, "kbridge test hook: occupy %#x: got %#x, %v\n", page, got, errno)
	}
}

package abiprobe

// The package's one home of #cgo directives: probe.c is compiled against
// DPDK as an app is, with the app's headers of the directory above.

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wno-deprecated-declarations -I${SRCDIR}/..
*/
import "C"

package ring

// The one home of the #cgo directives for all of kbridge's DPDK C: cgo
// compiles every .c file of this directory with them, and each file
// includes only headers of this directory or the system's, so Go's build
// cache, which hashes the package's own files, sees every header.
// (cgo_testhook.go adds a define in test-hook builds only.)

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wno-deprecated-declarations
*/
import "C"

package ring

// The one home of the #cgo directives for all of kbridge's DPDK C: cgo
// compiles every .c file of this directory with them. Each file includes
// headers of this directory, the system's, or the app's installed headers
// in include/kbridge (the -I below): Go's build cache hashes only a
// package's own files, and headers.go makes it see those too.
// (cgo_testhook.go adds a define in test-hook builds only.)

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wno-deprecated-declarations -I${SRCDIR}/../include/kbridge
*/
import "C"

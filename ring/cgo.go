package ring

// The one home of the #cgo directives for all of kbridge's DPDK C: cgo
// compiles every .c file of this directory with them. Each file includes
// headers of this directory, the system's, or the app's installed headers
// in include/kbridge (the -I below).
// (cgo_testhook.go adds a define in test-hook builds only.)

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wno-deprecated-declarations -I${SRCDIR}/../include/kbridge
*/
import "C"

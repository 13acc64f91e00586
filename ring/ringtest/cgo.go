package ringtest

// The package's one home of #cgo directives: the test primary (primary.c)
// is compiled against DPDK as ring's C is (ring/cgo.go), and includes the
// app's header from include/kbridge, as an app does (headers.go makes Go's
// cache see it).

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wno-deprecated-declarations -I${SRCDIR}/../../include/kbridge
*/
import "C"

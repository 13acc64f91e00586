//go:build kbridge_testhook

package ring

// The test hook's define (testhook.go), beside cgo.go's directives: a
// product build compiles neither the hook's variables nor its branches.

/*
#cgo CFLAGS: -DKB_RING_TESTHOOK
*/
import "C"

package doctor

// The package's one home of #cgo directives, for the wakeup probe's C
// (wakeprobe.c; wakeprobe.go says why it is C).

/*
#cgo CFLAGS: -O2 -Wall -Wextra
#cgo LDFLAGS: -pthread
*/
import "C"

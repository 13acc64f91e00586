package daemon

import (
	"slices"
	"testing"
	"time"

	"github.com/kbridge/kbridge/copp"
)

// TestPathsShareTheProcesssSocketWatch: a port set's paths join one
// sockWatch, which reads for every path's interface and runs until the last
// path leaves: the burst core's view is the process's, and a freed port's
// path withdrew it for the others when each path had its own.
func TestPathsShareTheProcesssSocketWatch(t *testing.T) {
	off := copp.DefaultConfig()
	off.Enabled = false // no reading: the watch only says so
	user := func(ifindex int) *sockUser {
		return &sockUser{cfg: func() copp.Config { return off }, ifindex: func() int { return ifindex }, log: quiet()}
	}
	a, b := user(7), user(8)
	wa := joinSockets(a)
	wb := joinSockets(b)
	if wa != wb {
		t.Fatalf("two paths of one process got two socket watches")
	}
	if got := sharedIfindexes(); !slices.Equal(got, []int{7, 8}) {
		t.Errorf("the watch reads for interfaces %v, want both paths' [7 8]", got)
	}
	leaveSockets(a)
	select {
	case <-wa.done:
		t.Fatalf("the watch stopped when the first of two paths left")
	case <-time.After(50 * time.Millisecond):
	}
	if got := sharedIfindexes(); !slices.Equal(got, []int{8}) {
		t.Errorf("after the first path left the watch reads for %v, want [8]", got)
	}
	leaveSockets(b)
	select {
	case <-wa.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the watch still runs after the last path left")
	}
	if w := joinSockets(a); w == wa {
		t.Errorf("a path joining after the last left got the stopped watch")
	}
	leaveSockets(a)
}

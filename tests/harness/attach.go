package harness

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tap/taptest"
)

// NoOtherUserAttaches checks that a local user without privileges, in
// network namespace ns (a name `ip netns` knows), is refused a queue of TAP
// ifname (EPERM): kbridge's TAP is its own user's and group's alone. The
// attacker is this test binary started again (taptest), which Main lets
// it be.
func NoOtherUserAttaches(t testing.TB, ns, ifname string) {
	t.Helper()
	err := taptest.AttachAsNobody("/run/netns/"+ns, ifname)
	if !errors.Is(err, unix.EPERM) {
		t.Errorf("a process of uid %d without capabilities in %s asked for a queue of %s: %v; want EPERM", taptest.Nobody, ns, ifname, err)
		return
	}
	t.Logf("a queue of %s refused to uid %d: %v", ifname, taptest.Nobody, err)
}

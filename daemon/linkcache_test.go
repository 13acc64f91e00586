package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tap"
)

// A reading of the links serves linkCacheFor; an error serves nothing and
// is not kept.
func TestTheLinksAreReadAtMostOnceASecond(t *testing.T) {
	dumps, fail := 0, false
	c := linkCache{dump: func() ([]net.Interface, error) {
		dumps++
		if fail {
			return nil, errors.New("no netlink")
		}
		return []net.Interface{{Name: "eth0", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}}}, nil
	}}
	t0 := time.Unix(1000, 0)
	for _, at := range []time.Duration{0, 500 * time.Millisecond, 999 * time.Millisecond} {
		if got := c.read(t0.Add(at)); len(got) != 1 {
			t.Fatalf("read at +%v: %v", at, got)
		}
	}
	if dumps != 1 {
		t.Errorf("%d dumps within a second, want 1", dumps)
	}
	c.read(t0.Add(linkCacheFor))
	if dumps != 2 {
		t.Errorf("%d dumps after a second, want 2", dumps)
	}
	c.read(t0) // the clock went back: read again
	if dumps != 3 {
		t.Errorf("%d dumps after the clock went back, want 3", dumps)
	}
	fail = true
	if got := c.read(t0.Add(10 * time.Second)); got != nil {
		t.Errorf("a failed dump read %v", got)
	}
	fail = false
	c.read(t0.Add(10 * time.Second))
	if dumps != 5 {
		t.Errorf("%d dumps, want the failed one not kept (5)", dumps)
	}
}

// The interface of a PMD on a kernel interface counts as another's MAC;
// the TAP of another port of this kbridge does not.
func TestAKernelInterfaceSharesTheMACButNotAnotherPortsTAP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes TAP interfaces")
	}
	n := os.Getpid() % 100000
	mine, theirs := fmt.Sprintf("kbmac%d", n), fmt.Sprintf("kbpmd%d", n)
	macMine, macTheirs := net.HardwareAddr{2, 0, 0x5e, 0, 1, 1}, net.HardwareAddr{2, 0, 0x5e, 0, 1, 2}
	d, err := tap.Create(tap.Config{Name: mine, MTU: 1500, MAC: macMine.String()}, tap.Options{Queues: 1, Batch: 8, MaxSegs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A TAP another program made (persistent, as `ip tuntap add` makes
	// it) stands for the kernel interface under a PMD.
	if out, err := exec.Command("ip", "tuntap", "add", "dev", theirs, "mode", "tap").CombinedOutput(); err != nil {
		t.Fatalf("ip tuntap add: %v: %s", err, out)
	}
	defer exec.Command("ip", "link", "del", theirs).Run()
	if out, err := exec.Command("ip", "link", "set", "dev", theirs, "address", macTheirs.String()).CombinedOutput(); err != nil {
		t.Fatalf("ip link set address: %v: %s", err, out)
	}
	kernelLinks = linkCache{}
	if got := linkWithMAC(macMine, "kbnew0"); got != "" {
		t.Errorf("the MAC of this kbridge's own %s counts as kernel interface %q's", mine, got)
	}
	if got := linkWithMAC(macTheirs, "kbnew0"); got != theirs {
		t.Errorf("linkWithMAC(%s) = %q, want %s", macTheirs, got, theirs)
	}
	if got := linkWithMAC(macTheirs, theirs); got != "" {
		t.Errorf("the interface itself counted: %q", got)
	}
}

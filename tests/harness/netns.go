package harness

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// AddNS creates network namespace name with its loopback up, first removing
// a namespace of that name a crashed run left.
func AddNS(name string) error {
	DelNS(name)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("lo up in %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// DelNS removes namespace name and, with it, every interface in it.
func DelNS(name string) { _ = exec.Command("ip", "netns", "del", name).Run() }

// NS creates namespaces (AddNS) that are removed when t ends.
func NS(t testing.TB, names ...string) {
	t.Helper()
	t.Cleanup(func() {
		for _, ns := range names {
			DelNS(ns)
		}
	})
	for _, ns := range names {
		if err := AddNS(ns); err != nil {
			t.Fatal(err)
		}
	}
}

// Wire is the smallest bed: namespace DUT holds the "NIC" (NIC, up, no
// address: it belongs to whatever the test runs there), namespace Peer the
// remote host, joined by a veth whose peer end PeerIf has PeerAddr/24.
type Wire struct {
	DUT, Peer   string
	NIC, PeerIf string
	PeerAddr    string
	// GRO turns GRO on at PeerIf: a veth end needs NAPI for frames an XDP
	// program redirects to it (docs/XDP.md).
	GRO bool
}

// Up makes w; Cleanup removes both namespaces. The peer sends full
// checksums (tx offload off): a veth hands partial checksums to an
// AF_PACKET reader unfilled, and no one on the path would complete them.
func (w Wire) Up(t testing.TB) {
	t.Helper()
	NS(t, w.DUT, w.Peer)
	Run(t, "ip", "link", "add", w.NIC, "netns", w.DUT, "type", "veth", "peer", "name", w.PeerIf, "netns", w.Peer)
	Run(t, "ip", "-n", w.DUT, "link", "set", w.NIC, "up")
	Run(t, "ip", "-n", w.Peer, "addr", "add", w.PeerAddr+"/24", "dev", w.PeerIf)
	Run(t, "ip", "-n", w.Peer, "link", "set", w.PeerIf, "up")
	ethtool := []string{"ip", "netns", "exec", w.Peer, "ethtool", "-K", w.PeerIf}
	if w.GRO {
		ethtool = append(ethtool, "gro", "on")
	}
	Run(t, append(ethtool, "tx", "off")...)
}

// InNS runs f on a thread inside namespace ns.
func InNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked: the thread's namespace is changed, so it must die.
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// LinkGone reports whether interface name no longer exists in namespace ns,
// and what `ip link show` said.
func LinkGone(ns, name string) (bool, string) {
	out, _ := exec.Command("ip", "-n", ns, "link", "show", name).CombinedOutput()
	return strings.Contains(string(out), "does not exist"), string(out)
}

// NetSys reads /sys/class/net/<ifname>/<attr> in namespace ns.
func NetSys(ns, ifname, attr string) string {
	out, _ := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+ifname+"/"+attr).CombinedOutput()
	return strings.TrimSpace(string(out))
}

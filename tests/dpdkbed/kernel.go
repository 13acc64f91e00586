package dpdkbed

import (
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// What the kernel side of a Bed looks like: kb0's routes and addresses, and
// kbridge's log lines about it.

// IP runs ip -n <the bed's namespace> args.
func (b *Bed) IP(args ...string) {
	b.T.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", b.Env.NS}, args...)...).CombinedOutput(); err != nil {
		b.T.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// OnLink runs f on the bed's interface, inside its namespace.
func (b *Bed) OnLink(f func(l netlink.Link) error) {
	_ = InNS(b.Env.NS, func() error {
		l, err := netlink.LinkByName(b.Ifname)
		if err != nil {
			return err
		}
		return f(l)
	})
}

// Routes lists the IPv4 routes through the interface as "dst via gw".
func (b *Bed) Routes() []string {
	var out []string
	b.OnLink(func(l netlink.Link) error {
		rs, err := netlink.RouteList(l, netlink.FAMILY_V4)
		for _, r := range rs {
			if r.Dst == nil {
				continue
			}
			s := r.Dst.String()
			if r.Gw != nil {
				s += " via " + r.Gw.String()
			}
			out = append(out, s)
		}
		return err
	})
	return out
}

// Addrs lists the interface's IPv4 addresses.
func (b *Bed) Addrs() []string {
	var out []string
	b.OnLink(func(l netlink.Link) error {
		as, err := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range as {
			out = append(out, a.IPNet.String())
		}
		return err
	})
	return out
}

// WaitLogCount waits up to 5 s for n lines containing sub in log (a
// process's output). A line written before the state a test just saw still
// reaches the buffer through a pipe, so a log check right after a state
// check must wait.
func WaitLogCount(log func() string, sub string, n int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(log(), sub) < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// WaitLogCount is WaitLogCount on the bed's kbridge.
func (b *Bed) WaitLogCount(sub string, n int) bool {
	b.T.Helper()
	return WaitLogCount(b.Out.String, sub, n)
}

// WaitLog waits for one line containing sub (WaitLogCount).
func (b *Bed) WaitLog(sub string) bool {
	b.T.Helper()
	return b.WaitLogCount(sub, 1)
}

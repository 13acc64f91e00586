package faults

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// The kernel-interface fault tests run on the shared harness's beds
// (tests/dpdkbed, on tests/harness), in the namespace TestMain made.

type kfBed = dpdkbed.Bed

var (
	kfFrame    = dpdkbed.TestFrame
	kfOnlyTest = dpdkbed.OnlyTest
)

// kfNewBed starts kbridge with the generated configuration plus yaml (an
// interface: section's keys, indented by two spaces, go in ifaceYAML).
func kfNewBed(t *testing.T, ifaceYAML, yaml string) *kfBed {
	t.Helper()
	return env.NewBed(t, dpdkbed.Opts{Iface: ifaceYAML, YAML: yaml})
}

// kfIP runs ip -n <the bed's namespace> args.
func kfIP(b *kfBed, args ...string) {
	b.T.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", b.Env.NS}, args...)...).CombinedOutput(); err != nil {
		b.T.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// kfOnLink runs f on the bed's interface, inside its namespace.
func kfOnLink(b *kfBed, f func(l netlink.Link) error) {
	_ = harness.InNS(b.Env.NS, func() error {
		l, err := netlink.LinkByName(b.Ifname)
		if err != nil {
			return err
		}
		return f(l)
	})
}

// kfRoutes lists the IPv4 routes through the interface as "dst via gw".
func kfRoutes(b *kfBed) []string {
	var out []string
	kfOnLink(b, func(l netlink.Link) error {
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

// kfAddrs lists the interface's IPv4 addresses.
func kfAddrs(b *kfBed) []string {
	var out []string
	kfOnLink(b, func(l netlink.Link) error {
		as, err := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range as {
			out = append(out, a.IPNet.String())
		}
		return err
	})
	return out
}

// kfWaitUntil polls cond for up to within and returns how long it took.
// waitLogCount waits up to 5 s for n lines containing sub in log (a
// process's output). A line written before the state a test just saw still
// reaches the buffer through a pipe, so a log check right after a state
// check must wait.
func waitLogCount(log func() string, sub string, n int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(log(), sub) < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// kfWaitLogCount is waitLogCount on the bed's kbridge.
func kfWaitLogCount(t *testing.T, b *kfBed, sub string, n int) bool {
	t.Helper()
	return waitLogCount(b.Out.String, sub, n)
}

// kfWaitLog waits for one line containing sub (kfWaitLogCount).
func kfWaitLog(t *testing.T, b *kfBed, sub string) bool {
	t.Helper()
	return kfWaitLogCount(t, b, sub, 1)
}

func kfWaitUntil(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return harness.WaitUntil(t, what, within, cond)
}

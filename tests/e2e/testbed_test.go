// Package e2e brings the whole test bed of tests/testbed/README.md up in its
// ring modes (tests/testbed's Test: namespaces, the NFS, sockperf and iperf3
// servers, the reference app and kbridge) and checks what a user would:
// ping both ways, TCP both ways and NFS over kb0, a clean stop that leaks
// nothing, and a tear-down that leaves nothing behind. The modes: ring (the
// reference app and kbridge's rings), jumbo (the ring bed at MTU 9000),
// ports (the ring bed with a second port and a second kbridge, an instance)
// offload (the ring bed with an app port that does LRO and TSO) and static
// (the ring bed with the reference app linked with DPDK statically).
// KBT_MODE=ring, jumbo, ports, offload or static runs one of them only; the
// vhost and xdp modes are in tests/vhost and tests/xdp.
package e2e

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
	"github.com/kbridge/kbridge/tests/testbed"
)

var bedModes = []testbed.Mode{
	{Name: "ring", Bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, App: "refapp",
		Checks: func(t *testing.T, r *testbed.Run) { testbed.TapChecks(t, r, mtuChecks, ringStop) }},
	// The ring bed at MTU 9000 (KBT_JUMBO=1): the shared checks above run
	// on jumbo frames, then jumboChecks.
	{Name: "jumbo", Mode: "ring", Env: []string{"KBT_JUMBO=1"}, Bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, App: "refapp",
		Checks: func(t *testing.T, r *testbed.Run) { jumboChecks(t); ringStop(t, r.Root) }},
	// The ring bed with two ports (KBT_PORTS=2): the shared checks through
	// kb0, then portsChecks through both, a kbridge instance serving kb1.
	{Name: "ports", Mode: "ring", Env: []string{"KBT_PORTS=2"}, Bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, App: "refapp",
		Links: []string{"kbt-wire2", "kbt-nic2", "kb1"}, Logs: []string{"kbridge-kb1.log"},
		Checks: func(t *testing.T, r *testbed.Run) { portsChecks(t, r) }},
	// The ring bed whose app port does LRO and TSO in software
	// (KBT_SW_OFFLOAD=1): the shared checks cross kbridge's LRO and TSO
	// paths, then nicOffloadChecks.
	{Name: "offload", Mode: "ring", Env: []string{"KBT_SW_OFFLOAD=1"}, Bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, App: "refapp",
		Checks: nicOffloadChecks},
	// The ring bed with the reference app linked with DPDK statically
	// (pkg-config --static), as DPVS, F-Stack, dperf and Gatekeeper link
	// it: its mempool handlers are ordered otherwise than kbridge's, and
	// kbridge never calls them (kbridge.h version 7). KBT_APP, when set,
	// names another build of it (an older tree's, to compare).
	{Name: "static", Mode: "ring", Env: []string{"KBT_APP=" + cmp.Or(os.Getenv("KBT_APP"), "bin/kbridge-refapp-static")},
		Bins: []string{"bin/kbridge", "bin/kbridge-refapp-static"}, App: "refapp",
		Checks: func(t *testing.T, r *testbed.Run) { testbed.TapChecks(t, r, nil, ringStop) }},
}

func TestTestbed(t *testing.T) { testbed.Test(t, bedModes...) }

// ringStop stops kbridge, then asks the reference app for its pool: every
// mbuf is free again but those waiting in the rings.
func ringStop(t *testing.T, root string) {
	testbed.StopKbridge(t)
	app := harness.PidOf(t, "refapp")
	re := regexp.MustCompile(`in_rings=(\d+) pool_in_use=(\d+)`)
	var m []string
	for i := 0; i < 100 && m == nil; i++ {
		_ = syscall.Kill(app, syscall.SIGUSR1)
		time.Sleep(50 * time.Millisecond)
		b, _ := os.ReadFile(filepath.Join(harness.RunDir, "refapp.log"))
		all := re.FindAllStringSubmatch(string(b), -1)
		if len(all) > 0 {
			m = all[len(all)-1]
		}
	}
	if m == nil {
		t.Fatal("the app printed no counters on SIGUSR1")
	}
	if m[1] != m[2] {
		t.Errorf("mbuf leak: the app's pool has %s mbufs in use but only %s wait in the rings", m[2], m[1])
	}
}

// ifMTU reads an interface's MTU in namespace ns.
func ifMTU(t *testing.T, ns, ifname string) string {
	return strings.TrimSpace(testbed.Sh(t, "ip", "netns", "exec", ns, "cat", "/sys/class/net/"+ifname+"/mtu"))
}

// waitFor polls cond for up to 5 s and returns how long it took.
func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%s: not after 5 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// pingDF pings with the don't-fragment bit and a payload of size bytes,
// from kbt-dut to the peer and back, and wants no loss.
func pingDF(t *testing.T, size int) {
	t.Helper()
	for _, c := range []struct{ ns, ip string }{{"kbt-dut", harness.PeerIP}, {"kbt-peer", harness.DUTIP}} {
		out := testbed.In(t, c.ns, "ping", "-M", "do", "-s", fmt.Sprint(size), "-c", "5", "-i", "0.1", "-W", "2", c.ip)
		if !strings.Contains(out, " 0% packet loss") {
			t.Errorf("ping -M do -s %d from %s to %s:\n%s", size, c.ns, c.ip, out)
		}
	}
}

// mtuChecks changes kb0's MTU live the way an operator would (ip link),
// which kbridge hands to the app as a request: the app sets its port's
// MTU (net_af_packet sets kbt-nic's), frames of the new size cross both
// ways, and back to 1500 the same way. (Down, not up: net_af_packet's
// ethdev refuses an MTU over 1500; the jumbo bed configures 9000.)
func mtuChecks(t *testing.T, root string) {
	t.Run("mtu changed live", func(t *testing.T) {
		for _, mtu := range []string{"1400", "1500"} {
			testbed.Sh(t, "ip", "-n", "kbt-dut", "link", "set", "kb0", "mtu", mtu)
			took := waitFor(t, "kbt-nic at "+mtu+", the app's answer", func() bool {
				return ifMTU(t, "kbt-dut", "kbt-nic") == mtu && ifMTU(t, "kbt-dut", "kb0") == mtu
			})
			t.Logf("kb0 mtu %s: the app set its port's in %v", mtu, took.Round(time.Millisecond))
			if mtu == "1400" {
				pingDF(t, 1400-28)
			}
		}
		pingDF(t, 1500-28)
	})
}

// jumboChecks, on the bed at MTU 9000: ping with 9000-byte packets both
// ways, unfragmented, and not a frame dropped as oversize through all the
// shared checks (iperf3 both ways and NFS at 9000).
func jumboChecks(t *testing.T) {
	t.Run("jumbo frames", func(t *testing.T) {
		for _, l := range [][2]string{{"kbt-dut", "kb0"}, {"kbt-dut", "kbt-nic"}, {"kbt-peer", "kbt-wire"}} {
			if got := ifMTU(t, l[0], l[1]); got != "9000" {
				t.Fatalf("%s's MTU is %s on the jumbo bed", l[1], got)
			}
		}
		pingDF(t, 9000-28)
		if d := testbed.Status(t).Queues[0].Drops["oversize"]; d != 0 {
			t.Errorf("%d frames dropped as oversize at MTU 9000", d)
		}
	})
}

package link

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// kb0's carrier follows the app port's link. The reference app
// owns a net_tap port, whose link is its TAP's (kbftl-wire: the wire's far
// end, as the PMD sees it: up and running, or not), and reports it
// (kbridge_port_set_link, from its control thread); kbridge turns kb0's
// carrier off and on with it. The far end down: kb0 NO-CARRIER and its
// routes linkdown; up: carrier back. How long each took is logged, never
// asserted. (net_af_packet and net_pcap of DPDK 22.11 and 24.11 report
// their link up whatever the interface's; net_tap reads its TAP's flags.)
func TestCarrierFollowsTheAppLink(t *testing.T) {
	env.NeedRoot(t)
	wire := "kbftl-wire"
	appPrefix, port := env.Prefix+"lnk", "kbftlnk"
	refapp := filepath.Join(harness.RepoRoot(t), "bin/kbridge-refapp")
	if _, err := os.Stat(refapp); err != nil {
		t.Skip("bin/kbridge-refapp missing: run make build (make test does)")
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join("/var/run/dpdk", appPrefix)) })
	app := harness.Start(t, "kbridge-refapp", "ip", "netns", "exec", env.NS, refapp, "-l", "0",
		"--file-prefix", appPrefix, "--proc-type", "primary", "--no-pci", "--vdev", "net_tap0,iface="+wire,
		"-m", "64", "--", "--port", port)
	app.WaitLog("kbridge-refapp: ready", 20*time.Second)
	app.WaitLog("Link up", 5*time.Second)

	k := env.StartKbridgeConfig(t, dpdkbed.Config{Prefix: appPrefix, Port: port, Ifname: port,
		Iface: "  addresses: [198.18.31.2/24]\n  up: true\n"})
	k.Ready()
	k.WaitLog("carrier follows the app's link", 5*time.Second)
	if _, ok := carrierWithin(port, "1", time.Now()); !ok {
		t.Fatalf("%s has no carrier with the app's link up:\n%s", port, k.Log)
	}

	for _, step := range []struct{ wire, want, app string }{
		{"down", "0", "Link down"}, {"up", "1", "Link up"},
	} {
		t0 := time.Now()
		if out, err := exec.Command("ip", "-n", env.NS, "link", "set", wire, step.wire).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s %s: %v\n%s", wire, step.wire, err, out)
		}
		took, ok := carrierWithin(port, step.want, t0)
		if !ok {
			t.Fatalf("the wire's far end %s: %s's carrier is not %s after 5 s\napp:\n%s\nkbridge:\n%s", step.wire, port, step.want, app.Log, k.Log)
		}
		routes, _ := exec.Command("ip", "-n", env.NS, "route", "show", "dev", port).CombinedOutput()
		if linkdown := strings.Contains(string(routes), "linkdown"); linkdown != (step.want == "0") {
			t.Errorf("wire %s: the routes through %s:\n%s", step.wire, port, routes)
		}
		t.Logf("the wire's far end %s: %s's carrier %s %v later", step.wire, port, step.want, took.Round(time.Millisecond))
	}
	if !strings.Contains(app.Log.String(), "Link down") {
		t.Errorf("the app never reported its link down:\n%s", app.Log)
	}
	k.Stop(true)
}

// carrierWithin waits up to 5 s for the carrier of ifname (in the test's
// namespace) to read want and returns how long after since it did.
func carrierWithin(ifname, want string, since time.Time) (time.Duration, bool) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", env.NS, "cat", "/sys/class/net/"+ifname+"/carrier").CombinedOutput()
		if strings.TrimSpace(string(out)) == want {
			return time.Since(since), true
		}
		if time.Now().After(deadline) {
			return 0, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The app's link report carries its speed and duplex to kb0, as a NIC's
// driver reports its own (ethtool, /sys/class/net/kb0/speed): the Go
// primary reports 25 Gb/s full duplex, then 1 Gb/s half, then the link
// down; a kb0 deleted and made again keeps the last speed.
func TestSpeedFollowsTheAppLink(t *testing.T) {
	env.NeedRoot(t)
	p := env.NewPort(t)
	k := env.NewKbridge(t, p)
	k.Ready()
	for _, c := range []struct {
		up                         bool
		speed                      uint32
		full                       bool
		carrier, wantSpeed, duplex string
	}{
		{true, 25000, true, "1", "25000", "full"},
		{true, 1000, false, "1", "1000", "half"},
		{false, 1000, false, "0", "1000", "half"},
	} {
		p.Port.SetLink(c.up, c.speed, c.full)
		if _, ok := carrierWithin(k.Ifname, c.carrier, time.Now()); !ok {
			t.Fatalf("link %v: %s's carrier is not %s:\n%s", c.up, k.Ifname, c.carrier, k.Log)
		}
		harness.WaitUntil(t, "speed "+c.wantSpeed+" "+c.duplex, 5*time.Second, func() bool {
			return harness.NetSys(env.NS, k.Ifname, "speed") == c.wantSpeed && harness.NetSys(env.NS, k.Ifname, "duplex") == c.duplex
		})
	}
	p.Port.SetLink(true, 40000, true)
	harness.WaitUntil(t, "speed 40000", 5*time.Second, func() bool { return harness.NetSys(env.NS, k.Ifname, "speed") == "40000" })
	if out, err := exec.Command("ip", "-n", env.NS, "link", "del", k.Ifname).CombinedOutput(); err != nil {
		t.Fatalf("ip link del: %v\n%s", err, out)
	}
	k.WaitLog("the interface was deleted and made again", 5*time.Second)
	if got := harness.NetSys(env.NS, k.Ifname, "speed"); got != "40000" {
		t.Errorf("the re-made %s reports speed %q, want the app's 40000:\n%s", k.Ifname, got, k.Log)
	}
	k.Stop(true)
}

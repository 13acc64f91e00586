package vhost

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// carrierOf reads /sys/class/net/IF/carrier in namespace ns: "1", "0", or
// what went wrong.
func carrierOf(ns, ifname string) string {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+ifname+"/carrier").CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)) + " (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// waitCarrier waits up to 5 s for ifname's carrier to be want and returns
// how long after since it was.
func waitCarrier(t *testing.T, ns, ifname string, want bool, since time.Time) time.Duration {
	t.Helper()
	w := map[bool]string{true: "1", false: "0"}[want]
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := carrierOf(ns, ifname)
		if got == w {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's carrier is %s, want %s", ifname, got, w)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// In mode vhost kb0's carrier follows the frontend as a NIC's
// interface follows its link. No frontend: NO-CARRIER, its routes
// linkdown; a device running: carrier on; the frontend gone: off again.
// (The app's kill and restart under traffic: appRestarts.)
func TestVhostCarrierFollowsFrontend(t *testing.T) {
	b := newBed(t, false)
	kb := b.kbridge()
	waitCarrier(t, dut, ifname, false, time.Now())
	out, _ := exec.Command("ip", "-n", dut, "route", "show", "dev", ifname).CombinedOutput()
	if !strings.Contains(string(out), "linkdown") {
		t.Errorf("with no frontend, the routes through %s are not linkdown:\n%s", ifname, out)
	}
	if s := b.carrierStatus(); s {
		t.Errorf("kbridge stats: carrier true with no frontend")
	}

	f := dial(t, b.sock)
	t0 := time.Now()
	if _, err := f.Up(); err != nil {
		t.Fatal(err)
	}
	on := waitCarrier(t, dut, ifname, true, t0)
	kb.WaitLog("carrier follows the frontend", 5*time.Second)
	if !b.carrierStatus() {
		t.Errorf("kbridge stats: carrier false with a frontend's device running")
	}
	t1 := time.Now()
	f.Close()
	off := waitCarrier(t, dut, ifname, false, t1)
	t.Logf("carrier on %v after the frontend's bring-up began, off %v after it hung up", on.Round(time.Microsecond),
		off.Round(time.Microsecond))
	kb.Stop(true)
}

// carrierStatus is kbridge's status's carrier.
func (b *bed) carrierStatus() bool {
	b.t.Helper()
	var s struct {
		Carrier bool `json:"carrier"`
	}
	harness.KbridgeStats(b.t, b.ctl, &s)
	return s.Carrier
}

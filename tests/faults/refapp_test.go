package faults

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// The reference app stopped (SIGTERM) while kbridge serves its port:
// kbridge_port_free() has kbridge let go before it drains, kbridge exits
// non-zero naming the cause, and the app's mempool audit is clean.
func TestRefappStopsUnderKbridge(t *testing.T) {
	needRoot(t)
	appPrefix := prefix + "app"
	app := dpdkbed.StartRefapp(t, appPrefix, "kbftapp")

	k := startKbridge(t, dpdkbed.Config{Prefix: appPrefix, Port: "kbftapp", Ifname: "kbftapp"})
	k.ready()
	k.send(20) // through kbridge into the app, which sends them out of net_ring0

	if err := app.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !app.ExitedWithin(15 * time.Second) {
		t.Fatalf("the app did not stop within 15s:\n%s", app.Log)
	}
	if err := app.Err(); err != nil {
		t.Errorf("the app exited with %v:\n%s", err, app.Log)
	}
	if !strings.Contains(app.Log.String(), "kbridge-refapp: mempool audit ok pool_in_use=0") {
		t.Errorf("the app's mempool is not whole after kbridge_port_free:\n%s", app.Log)
	}
	if strings.Contains(app.Log.String(), "did not let go") {
		t.Errorf("kbridge_port_free timed out waiting for kbridge:\n%s", app.Log)
	}
	if !k.ExitedWithin(5 * time.Second) {
		t.Fatalf("kbridge still runs 5s after the app stopped:\n%s", k.Log)
	}
	if code := k.ExitCode(); code <= 0 {
		t.Errorf("kbridge exited with %v, want a non-zero status", k.Err())
	}
	if !strings.Contains(k.Log.String(), "the DPDK app is freeing port kbftapp") {
		t.Errorf("kbridge did not name the cause:\n%s", k.Log)
	}
}

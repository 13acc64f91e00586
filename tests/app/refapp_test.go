package app

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// The reference app stopped (SIGTERM) while kbridge serves its port:
// kbridge_port_free() has kbridge let go before it drains, kbridge exits
// non-zero naming the cause, and the app's mempool audit is clean.
func TestRefappStopsUnderKbridge(t *testing.T) {
	env.NeedRoot(t)
	appPrefix := env.Prefix + "app"
	app := dpdkbed.StartRefapp(t, appPrefix, "kbftapp")

	k := env.StartKbridgeConfig(t, dpdkbed.Config{Prefix: appPrefix, Port: "kbftapp", Ifname: "kbftapp"})
	k.Ready()
	k.Send(20) // through kbridge into the app, which sends them out of net_ring0

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

// The reference app stopped while the kbridge serving its port is stopped
// (SIGSTOP): kbridge_port_free() refuses, and the app waits for kbridge
// (--free-wait). "waits": kbridge continued during the wait lets go, and the
// app frees the port, its mempool whole. "exits": kbridge still stopped when
// the wait ends, the app exits 3 naming kbridge's pid, without touching the
// rings; kbridge, continued, sees the app gone and exits.
func TestRefappUnderStoppedKbridge(t *testing.T) {
	for i, end := range []string{"waits", "exits"} {
		t.Run(end, func(t *testing.T) {
			env.NeedRoot(t)
			appPrefix := fmt.Sprintf("%sapp%d", env.Prefix, i+2)
			portName := fmt.Sprintf("kbftapp%d", i+2)
			wait := map[string]string{"waits": "30", "exits": "3"}[end]
			app := dpdkbed.StartRefapp(t, appPrefix, portName, "--free-wait", wait)
			k := env.StartKbridgeConfig(t, dpdkbed.Config{Prefix: appPrefix, Port: portName, Ifname: portName})
			k.Ready()
			k.Send(20)
			if err := k.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k.Signal(syscall.SIGCONT) })
			harness.WaitProcState(t, k.Pid(), "T")
			if err := app.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waiting := fmt.Sprintf("kbridge pid %d still serves port %s: waiting for it", k.Pid(), portName)
			app.WaitLog(waiting, 10*time.Second)

			switch end {
			case "waits":
				if err := k.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				if !app.ExitedWithin(15 * time.Second) {
					t.Fatalf("the app did not stop within 15s of kbridge continuing:\n%s", app.Log)
				}
				if err := app.Err(); err != nil {
					t.Errorf("the app exited with %v:\n%s", err, app.Log)
				}
				if !strings.Contains(app.Log.String(), "kbridge-refapp: mempool audit ok pool_in_use=0") {
					t.Errorf("the app's mempool is not whole after kbridge_port_free:\n%s", app.Log)
				}
				if !k.ExitedWithin(5 * time.Second) {
					t.Fatalf("kbridge still runs 5s after the app stopped:\n%s", k.Log)
				}
				if !strings.Contains(k.Log.String(), "the DPDK app is freeing port "+portName) {
					t.Errorf("kbridge did not name the cause:\n%s", k.Log)
				}
			case "exits":
				if !app.ExitedWithin(15 * time.Second) {
					t.Fatalf("the app did not give up within 15s:\n%s", app.Log)
				}
				want := fmt.Sprintf("kbridge-refapp: kbridge pid %d still serves port %s after 3 s", k.Pid(), portName)
				if code, out := app.ExitCode(), app.Log.String(); code != 3 || !strings.Contains(out, want) {
					t.Errorf("the app exited with %v, want status 3 and %q:\n%s", app.Err(), want, out)
				}
				if strings.Contains(app.Log.String(), "mempool audit") {
					t.Errorf("the app went on to audit a pool a live kbridge still uses:\n%s", app.Log)
				}
				if err := k.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				if !k.ExitedWithin(10 * time.Second) {
					t.Fatalf("kbridge still runs 10s after it continued with the app gone:\n%s", k.Log)
				}
			}
			if code := k.ExitCode(); code <= 0 {
				t.Errorf("kbridge exited with %v, want a non-zero status", k.Err())
			}
		})
	}
}

package ring

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// interface.offload switches live on SIGHUP: TSO and checksum offload leave
// the TAP's features and come back, and kbridge says so in its log.
func TestOffloadSwitchesLive(t *testing.T) {
	b := newBed(t, bedOpts{})
	if got := harness.TSO(t, env.NS, b.Ifname); got != "on" {
		t.Fatalf("TSO %s on %s at start, want on (interface.offload defaults to true)", got, b.Ifname)
	}
	cfg, err := os.ReadFile(b.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"off", "on"} {
		text := strings.Replace(string(cfg), "  mtu: 1500\n", "  mtu: 1500\n  offload: "+map[string]string{"off": "false", "on": "true"}[want]+"\n", 1)
		if err := os.WriteFile(b.Cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := b.Kb.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if got := harness.WaitTSO(t, env.NS, b.Ifname, want, 5*time.Second); got != want {
			t.Fatalf("TSO %s after reloading with offload %s\n%s", got, want, b.Out)
		}
	}
	if !strings.Contains(b.Out.String(), "interface offloads switched") {
		t.Errorf("kbridge did not log the switch:\n%s", b.Out)
	}
	b.Stop(true)
}

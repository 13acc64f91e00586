package ring

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// kbridge notices when its DPDK app exits (pidfd), stops, removes its TAP and
// exits 1 with a message that says why.
func TestStopsWhenTheAppExits(t *testing.T) {
	needRoot(t)
	appPrefix := env.Prefix + "app"
	app := dpdkbed.StartRefapp(t, appPrefix, "kbitapp")

	dir := t.TempDir()
	cfg := filepath.Join(dir, "kbridge.yaml")
	dpdkbed.Config{Prefix: appPrefix, Port: "kbitapp", Ifname: "kbitapp", Sock: filepath.Join(dir, "kbridge.sock")}.Write(t, cfg)
	kb := env.StartKbridge(t, cfg)
	kb.WaitLog("bridge running", 20*time.Second)

	if err := app.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !kb.ExitedWithin(15 * time.Second) {
		t.Fatalf("kbridge kept running after its app died:\n%s", kb.Log)
	}
	if kb.ExitCode() != 1 {
		t.Errorf("kbridge exited with %v, want exit status 1", kb.Err())
	}
	if !strings.Contains(kb.Log.String(), "exited: kbridge stops with it") {
		t.Errorf("kbridge did not say why it stopped:\n%s", kb.Log)
	}
	if gone, out := harness.LinkGone(env.NS, "kbitapp"); !gone {
		t.Errorf("TAP left behind: %s", out)
	}
}

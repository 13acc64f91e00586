package app

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// The app's kbridge.h (version 3) records the DPDK it runs, and kbridge
// names it at start; a version-2 app, which records none, is served as
// before.
func TestAppDPDKVersion(t *testing.T) {
	out, err := exec.Command("pkg-config", "--modversion", "libdpdk").Output()
	if err != nil {
		t.Fatalf("pkg-config: %v", err)
	}
	want := `app_dpdk="DPDK ` + strings.TrimSpace(string(out))
	t.Run("version 3 names it", func(t *testing.T) {
		p := env.NewPort(t)
		k := env.NewKbridge(t, p)
		k.Ready()
		if !strings.Contains(k.Log.String(), want) {
			t.Errorf("kbridge's start did not say %s...:\n%s", want, k.Log)
		}
		k.Stop(true)
	})
	t.Run("version 2 is served without it", func(t *testing.T) {
		p := env.NewPort(t)
		p.Port.SetCtl(2, -1, -1)
		t.Cleanup(func() { p.Port.SetCtl(3, -1, -1) })
		k := env.NewKbridge(t, p)
		k.Ready()
		if !strings.Contains(k.Log.String(), `app_dpdk=""`) {
			t.Errorf("a version-2 app's DPDK is unknown, kbridge said otherwise:\n%s", k.Log)
		}
		if q, err := p.Port.Inject(0, dpdkbed.Frames(4), ringtest.InjectOpts{}); err != nil || q != 4 {
			t.Fatalf("inject: queued %d: %v", q, err)
		}
		harness.WaitUntil(t, "kbridge to move the frames", 5*time.Second, func() bool {
			return k.Status().ToKernelPackets >= 4
		})
		k.Stop(true)
	})
}

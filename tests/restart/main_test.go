// Package restart checks kbridge's hold on a port across its own deaths and
// restarts: a second kbridge refused, kill -9 with mbufs held (both
// directions) or inside a ring operation and their recovery by the next
// kbridge, an owner whose pid was reused or that is a zombie, the app's
// free under a stopped owner, a wakeup from a secondary that is not the
// owner, a restart handing the app the new eventfd, signals during
// start-up, and kb0 outliving its kbridge: handed over by hand
// (--takeover), or held through a kill -9 and adopted (handover_test.go).
// The test process is the DPDK primary (tests/dpdkbed). Root only.
package restart

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// env is this test binary's DPDK primary, namespace and kbridge binary
// (tests/dpdkbed).
var env *dpdkbed.Env

func TestMain(m *testing.M) {
	if port := os.Getenv(owPeerEnv); port != "" {
		// Run again as a DPDK secondary of a test (owner_test.go).
		os.Exit(owPeerMain(port, os.Getenv("KBFT_WAKEUP_PREFIX")))
	}
	os.Exit(dpdkbed.Main(m, "kbrs", &env))
}

// hookBin builds the kbridge with the test hooks (ring/testhook.go,
// daemon/testhook.go, tap/testhook.go): the product build has none.
func hookBin(t *testing.T) string {
	t.Helper()
	bin, err := harness.BuildKbridgeTestHook()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// holdingKbridge starts the test-hook build on PortConfig(p) with
// KBRIDGE_TEST_HOLD=dir ("out" or "in"): its worker holds the next
// non-empty burst of that direction (ring/burst.h).
func holdingKbridge(t *testing.T, p *dpdkbed.Port, dir string) *dpdkbed.Kbridge {
	t.Helper()
	return env.StartKbridgeConfigBin(t, hookBin(t), env.PortConfig(p), "KBRIDGE_TEST_HOLD="+dir)
}

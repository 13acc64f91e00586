// Package app checks what kbridge does with what the app hands it and how
// the app leaves: the app freeing its port under a running kbridge or
// stopping under a running or stopped one, a version-1 app (no owner), the
// app's DPDK version, an insane control block, a pool kbridge cannot copy
// frames into. The test process is the DPDK primary (package ringtest) and
// kbridge a real secondary with its TAP in a namespace (tests/dpdkbed).
// Root only.
package app

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// env is this test binary's DPDK primary, namespace and kbridge binary
// (tests/dpdkbed).
var env *dpdkbed.Env

func TestMain(m *testing.M) { os.Exit(dpdkbed.Main(m, "kbap", &env)) }

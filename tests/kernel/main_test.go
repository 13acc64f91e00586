// Package kernel checks kbridge's kernel interface (kb0) against what an
// administrator or a crash does to it: deleted (made again, also under
// load), down and up (addresses and routes back), an MTU changed outside
// kbridge (set back), and kbridge cleanup (a live TAP left alone, an orphan
// removed). The test process is the DPDK primary (tests/dpdkbed). Root only.
package kernel

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// env is this test binary's DPDK primary, namespace and kbridge binary
// (tests/dpdkbed).
var env *dpdkbed.Env

func TestMain(m *testing.M) { os.Exit(dpdkbed.Main(m, "kbkn", &env)) }

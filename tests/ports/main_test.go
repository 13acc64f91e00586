// Package ports checks one kbridge serving several ports of one app
// (`ports:`, `discover: true`): each port through its own interface, ports
// the app creates and frees while kbridge runs, a port that cannot be
// served beside those that are. The test process is the DPDK primary
// (package ringtest) and kbridge a real secondary with its interfaces in a
// namespace (tests/dpdkbed). Root only.
package ports

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// env is this test binary's DPDK primary, namespace and kbridge binary.
var env *dpdkbed.Env

func TestMain(m *testing.M) { os.Exit(dpdkbed.Main(m, "kbps", &env)) }

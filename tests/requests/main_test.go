// Package requests checks that what an administrator does to kb0 (MTU, MAC
// address, up/down, promiscuous and all-multicast) reaches the app as a
// request and is applied to its port, and that kb0 is set back when the app
// refuses, does not answer, or serves no requests. The app is the reference
// app on a net_tap port. Root only.
package requests

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// env is this test binary's DPDK primary, namespace and kbridge binary
// (tests/dpdkbed).
var env *dpdkbed.Env

func TestMain(m *testing.M) { os.Exit(dpdkbed.Main(m, "kbrq", &env)) }

// Package link checks that kb0's carrier, speed and duplex follow the app
// port's link, both ways. Root only.
package link

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// env is this test binary's DPDK primary, namespace and kbridge binary
// (tests/dpdkbed).
var env *dpdkbed.Env

func TestMain(m *testing.M) { os.Exit(dpdkbed.Main(m, "kblk", &env)) }

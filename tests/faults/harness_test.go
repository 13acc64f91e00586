// Package faults checks what happens around a crash or a misuse of the
// exception port: a second kbridge on a served port, a kbridge killed with
// mbufs in flight, the app freeing the port under a running kbridge. Like
// tests/integration it runs the real kbridge binary as a DPDK secondary of
// this test process (package ringtest), with its TAP in a network namespace
// the tests create. Root only.
package faults

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/dpdkbed"
)

// env is this test binary's DPDK primary, namespace and kbridge binary
// (tests/dpdkbed).
var env *dpdkbed.Env

func TestMain(m *testing.M) {
	if port := os.Getenv(owPeerEnv); port != "" {
		// Run again as a DPDK secondary of a test (owner_test.go).
		os.Exit(owPeerMain(port, os.Getenv("KBFT_WAKEUP_PREFIX")))
	}
	os.Exit(dpdkbed.Main(m, "kbft", &env))
}

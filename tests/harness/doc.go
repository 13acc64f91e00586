// Package harness is what kbridge's test packages share to run real
// programs around kbridge: child processes whose output is read while they
// run (Proc, Buffer), one kbridge binary built once per test binary
// (Kbridge), namespaces and veth pairs that are removed again (NS, Wire),
// iperf3's JSON (ParseIperf3), and the fixed names of the namespace test bed
// of tests/testbed/README.md (bed.go: RunDir, ClaimBed, CheckNothingLeft).
//
// Every helper that creates something registers its removal with
// t.Cleanup and removes a crashed run's leftovers of the same name first.
// Processes are stopped by the PID this test started, never by name.
package harness

import (
	"os"
	"testing"
)

// NeedRoot skips t in -short mode and when the test does not run as root;
// needs says what for ("mode vhost needs root (namespaces, TAP)").
func NeedRoot(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skip(needs + ": skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip(needs + ": run it as root (make test)")
	}
}

package testbed

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/tests/harness"
)

// BGPSide is one side's line of `bgp.sh state`: its session's state, when
// the session came up (ms since the epoch), for how long, the routes it has
// from the other side and how many it was told to withdraw.
type BGPSide struct {
	State     string
	Since     int64
	Uptime    float64
	Imported  int
	Withdraws int
}

// NeedBIRD skips t when BIRD 2 is missing (make deps installs bird2).
func NeedBIRD(t *testing.T) {
	t.Helper()
	for _, c := range []string{"bird", "birdc"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s missing: the BGP session needs BIRD 2 (Debian's bird2; make deps installs it)", c)
		}
	}
}

// BGPUp starts the bed's BGP session over kb0 (bgp.sh up, under the bed's
// lock the caller holds) and has Cleanup stop it.
func BGPUp(t *testing.T, root string) {
	t.Helper()
	script := filepath.Join(root, "tests/testbed/bgp.sh")
	t.Cleanup(func() { _, _ = harness.Command(harness.LockedEnv, "bash", script, "down").CombinedOutput() })
	harness.Sh(t, harness.LockedEnv, "bash", script, "up")
}

// BGPState reads both sides of the session (bgp.sh state), by side name
// ("dut", "peer"). A side whose session is not Established is there too.
func BGPState(t *testing.T, root string) map[string]BGPSide {
	t.Helper()
	out, _ := harness.Command(nil, "bash", filepath.Join(root, "tests/testbed/bgp.sh"), "state").Output()
	sides := map[string]BGPSide{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		s := BGPSide{State: f[1]}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "since":
				s.Since, _ = strconv.ParseInt(v, 10, 64)
			case "uptime":
				s.Uptime, _ = strconv.ParseFloat(v, 64)
			case "imported":
				s.Imported, _ = strconv.Atoi(v)
			case "withdraws":
				s.Withdraws, _ = strconv.Atoi(v)
			}
		}
		sides[f[0]] = s
	}
	if len(sides) != 2 {
		t.Fatalf("bgp.sh state: want a line per side, got:\n%s", out)
	}
	return sides
}

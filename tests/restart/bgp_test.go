package restart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
	"github.com/kbridge/kbridge/tests/testbed"
)

// A routing daemon's session over kb0 survives `kbridge run --takeover`:
// on the ring bed, with BIRD on both ends (link checking on, hold time
// 3 s), one handover leaves both sessions Established with the start they
// had before (uptime continued), no route withdrawn, and kb0's ifindex.
func TestBGPSessionStaysEstablishedAcrossATakeover(t *testing.T) {
	harness.NeedRoot(t, "the test bed needs root")
	testbed.NeedBIRD(t)
	for _, c := range []string{"ganesha.nfsd", "nfs-ls", "sockperf", "iperf3"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s missing: the test bed needs it (make deps)", c)
		}
	}
	root := harness.RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "bin/kbridge-refapp")); err != nil {
		t.Skip("bin/kbridge-refapp missing: run make build")
	}
	harness.ClaimBed(t, root)
	bed := append([]string{"KBT_KBRIDGE=" + env.Bin}, harness.LockedEnv...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range []string{"kbridge.log", "bird-dut.log", "bird-peer.log"} {
				b, _ := os.ReadFile(filepath.Join(harness.RunDir, l))
				t.Logf("%s:\n%s", l, b)
			}
		}
		harness.Sh(t, bed, "bash", filepath.Join(root, "tests/testbed/down.sh"))
		harness.CheckNothingLeft(t)
	})
	harness.Sh(t, bed, "bash", filepath.Join(root, "tests/testbed/up.sh"))
	testbed.BGPUp(t, root)
	before := testbed.BGPState(t, root)
	ifindex := func() string {
		return strings.TrimSpace(harness.Sh(t, nil, "ip", "netns", "exec", "kbt-dut", "cat", "/sys/class/net/kb0/ifindex"))
	}
	idx := ifindex()
	old := harness.PidOf(t, "kbridge")

	next := harness.StartSpec(t, "kbridge-next", harness.Spec{},
		"ip", "netns", "exec", "kbt-dut", "taskset", "-c", harness.ClientCPU,
		env.Bin, "run", "--config", filepath.Join(root, "tests/testbed/kbridge.yaml"), "--takeover")
	next.StopWait = 15 * time.Second
	if !harness.WaitGone(old, 30*time.Second) {
		t.Fatalf("the old kbridge (pid %d) still runs after the takeover was asked:\n%s", old, next.Log)
	}
	harness.WaitUntil(t, "the peer to answer through kb0 after the takeover", 10*time.Second, func() bool {
		return exec.Command("ip", "netns", "exec", "kbt-dut", "ping", "-c1", "-W1", harness.PeerIP).Run() == nil
	})
	// Longer than the hold time: a session the handover broke would be
	// down, or up again with a new start, by now.
	time.Sleep(4 * time.Second)
	after := testbed.BGPState(t, root)
	for _, side := range []string{"dut", "peer"} {
		b, a := before[side], after[side]
		t.Logf("%s: before %+v, after %+v", side, b, a)
		if a.State != "Established" {
			t.Errorf("%s: session %s after the takeover, want Established", side, a.State)
		}
		if a.Since != b.Since {
			t.Errorf("%s: the session restarted: up since %d, before the takeover since %d", side, a.Since, b.Since)
		}
		if a.Withdraws != 0 || a.Imported != b.Imported {
			t.Errorf("%s: %d routes withdrawn, %d imported (before: %d)", side, a.Withdraws, a.Imported, b.Imported)
		}
	}
	if got := ifindex(); got != idx {
		t.Errorf("kb0's ifindex %s, before the takeover %s", got, idx)
	}
}

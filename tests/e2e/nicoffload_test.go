package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/harness"
	"github.com/kbridge/kbridge/tests/testbed"
)

// nicOffloadChecks, on the bed whose app port does LRO and TSO in software
// (up.sh KBT_SW_OFFLOAD=1), after the shared checks (ping, iperf3 both
// ways, the NFS listing and the big file's hash) crossed it: the app merged
// what it received and kbridge wrote those as GSO frames, consecutive ones
// of a flow merged into one write (the data intact: the hash); kbridge handed
// super-frames to the app, which cut them. Then the clean stop of the ring
// bed, the pool whole.
func nicOffloadChecks(t *testing.T, r *testbed.Run) {
	t.Run("lro and tso at the app's port", func(t *testing.T) {
		st, err := daemon.ReadStatus(filepath.Join(harness.RunDir, "kbridge.sock"))
		if err != nil {
			t.Fatal(err)
		}
		o := st.Queues[0].Offload
		if o.LROWrites == 0 || o.LROMerged == 0 || o.TSOToApp == 0 {
			t.Errorf("kbridge wrote %d LRO packets in GSO frames (%d merged with others) and handed %d super-frames to the app; want all above 0",
				o.LROWrites, o.LROMerged, o.TSOToApp)
		}
		// The app's port verifies receive checksums as a NIC does:
		// kbridge trusts those and checks none of them again.
		if o.CsumTrusted == 0 || o.BadCsum != 0 {
			t.Errorf("kbridge trusted %d packets' checksums and found %d bad; want some trusted and none bad", o.CsumTrusted, o.BadCsum)
		}
		c := appOffloadCounters(t)
		if c["gro"] == 0 || c["gso"] == 0 || c["gso_refused"] != 0 || c["rx_csum_bad"] != 0 {
			t.Errorf("the app's counters: %v; want gro and gso above 0, gso_refused and rx_csum_bad 0", c)
		}
		t.Logf("kbridge: lro_writes %d, lro_merged %d, merged_writes %d, coalesce %d packets in %d writes, tso_to_app %d, coalesce_csum_trusted %d; the app: %v",
			o.LROWrites, o.LROMerged, o.MergedWrites, o.CoalescePackets, o.CoalesceWrites, o.TSOToApp, o.CsumTrusted, c)
	})
	t.Run("stats and clean stop", func(t *testing.T) { ringStop(t, r.Root) })
}

// appOffloadCounters asks the reference app for its counters (SIGUSR1) and
// returns the --sw-offload ones of its last stats line.
func appOffloadCounters(t *testing.T) map[string]uint64 {
	t.Helper()
	app := harness.PidOf(t, "refapp")
	re := regexp.MustCompile(` (gro|gro_segments|gso|gso_segments|gso_refused|rx_csum_bad)=(\d+)`)
	for i := 0; i < 100; i++ {
		_ = syscall.Kill(app, syscall.SIGUSR1)
		time.Sleep(50 * time.Millisecond)
		b, _ := os.ReadFile(filepath.Join(harness.RunDir, "refapp.log"))
		lines := regexp.MustCompile(`(?m)^kbridge-refapp: stats .*$`).FindAllString(string(b), -1)
		if len(lines) == 0 {
			continue
		}
		out := map[string]uint64{}
		for _, m := range re.FindAllStringSubmatch(lines[len(lines)-1], -1) {
			out[m[1]], _ = strconv.ParseUint(m[2], 10, 64)
		}
		if len(out) == 6 {
			return out
		}
	}
	t.Fatal("the app printed no --sw-offload counters on SIGUSR1")
	return nil
}

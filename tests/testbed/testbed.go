// Package testbed runs the namespace test bed of README.md from Go: each
// mode of the bed (ring, vhost, xdp and the ring bed's variants) is brought
// up with up.sh, checked as a user would (ping both ways, TCP both ways and
// NFS over kb0, the mode's own checks, a clean stop that leaks nothing) and
// torn down with down.sh, leaving nothing behind. The test packages of the
// modes (tests/e2e, tests/vhost, tests/xdp) give Test their modes.
package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/harness"
)

// Status reads kbridge's counters from its control socket.
func Status(t *testing.T) daemon.Status {
	t.Helper()
	st, err := daemon.ReadStatus(filepath.Join(harness.RunDir, "kbridge.sock"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func Sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	return harness.Sh(t, nil, name, args...)
}

func InDUT(t *testing.T, args ...string) string {
	t.Helper()
	return In(t, "kbt-dut", args...)
}

// In runs a client command in namespace ns, pinned to the clients' CPU.
func In(t *testing.T, ns string, args ...string) string {
	t.Helper()
	return harness.In(t, nil, ns, args...)
}

// Mode is one variant of the bed (up.sh's KBT_MODE) that Test runs its
// checks on.
type Mode struct {
	Name  string   // KBT_MODE, unless mode says
	Mode  string   // KBT_MODE when it is not name
	Env   []string // more of up.sh's variables
	Bins  []string // under the repository root, built by make build
	Tools []string // on $PATH
	App   string   // the DPDK app's name in /run/kbt (NAME.pid, NAME.log)
	// links are the interfaces only this mode makes, that down.sh must
	// remove with the bed's own.
	Links []string
	// logs are the mode's own logs in /run/kbt, shown when it fails.
	Logs []string
	// recorded reads, right after up.sh, what the mode's bed recorded and
	// its checks and leftovers need.
	Recorded func(t *testing.T, r *Run)
	// checks runs the mode's own subtests, after the shared ones, and
	// stops what the mode started, checking that it stopped cleanly.
	Checks func(t *testing.T, r *Run)
	// leftovers checks, after down.sh, what only this mode could leave.
	Leftovers func(t *testing.T, r *Run)
}

// Run is one bed brought up, as its mode's checks see it.
type Run struct {
	Root   string
	Procs  map[string]int // the bed's processes, read before down.sh removes their records
	Pins   []string       // mode xdp: "PATH MAP_ID" of the maps kbridge pinned
	Object string         // mode xdp: the object file kbridge wrote for the app
}

// Names are the bed's modes (up.sh's KBT_MODE and its variants), in
// whichever test package runs each.
var Names = []string{"ring", "jumbo", "ports", "offload", "static", "vhost", "xdp"}

// selected is modes, or those of them KBT_MODE names (one, or a
// comma-separated list: a DPDK root runs ring, jumbo, ports and offload,
// since XDP mode does not depend on the DPDK version). A name of
// another package's mode selects nothing here; a name no package knows
// fails t.
func selected(t *testing.T, modes []Mode) []Mode {
	want := os.Getenv("KBT_MODE")
	if want == "" {
		return modes
	}
	var out []Mode
	for _, name := range strings.Split(want, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(Names, name) {
			t.Fatalf("KBT_MODE=%s: the bed's modes are %s", want, strings.Join(Names, ", "))
		}
		for _, m := range modes {
			if m.Name == name {
				out = append(out, m)
			}
		}
	}
	return out
}

// Test brings the bed up in each of modes (those KBT_MODE names, when set)
// in turn, each a subtest of t named after its mode, runs the mode's checks
// and tears the bed down. It is the body of each package's TestTestbed.
func Test(t *testing.T, modes ...Mode) {
	if testing.Short() {
		t.Skip("the test bed is skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("the test bed needs root (namespaces, DPDK, TAP): run it as root (make test)")
	}
	root := harness.RepoRoot(t)
	if modes = selected(t, modes); len(modes) == 0 {
		t.Skipf("KBT_MODE=%s names none of this package's modes", os.Getenv("KBT_MODE"))
	}
	for _, m := range modes {
		for _, bin := range m.Bins {
			if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
				t.Fatalf("%s missing: run make build (make test does)", bin)
			}
		}
		for _, tool := range m.Tools {
			if _, err := exec.LookPath(tool); err != nil {
				t.Fatalf("%s missing (KBT_MODE=%s): run make deps", tool, m.Name)
			}
		}
	}
	// Someone else's bed is waited for, never torn down; up.sh and down.sh
	// below run under this claim (harness.LockedEnv).
	start := time.Now()
	harness.ClaimBed(t, root)
	if w := time.Since(start); w > time.Second {
		t.Logf("waited %v for the test bed", w.Round(time.Second))
	}
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) { testBed(t, root, m) })
	}
}

// testBed brings the bed up in mode m, runs every check on it, stops kbridge
// and tears the bed down.
func testBed(t *testing.T, root string, m Mode) {
	mode := m.Name
	if m.Mode != "" {
		mode = m.Mode
	}
	env := append(append(append([]string(nil), harness.LockedEnv...), "KBT_MODE="+mode), m.Env...)
	r := &Run{Root: root}
	t.Cleanup(func() {
		if t.Failed() {
			for _, log := range append([]string{"kbridge.log", m.App + ".log"}, m.Logs...) {
				b, _ := os.ReadFile(filepath.Join(harness.RunDir, log))
				t.Logf("%s:\n%s", log, b)
			}
		}
		if r.Procs == nil {
			r.Procs = harness.Procs()
		}
		harness.Sh(t, env, "bash", filepath.Join(root, "tests/testbed/down.sh"))
		harness.CheckNothingLeft(t, m.Links...)
		for name, pid := range r.Procs {
			if harness.Alive(pid) {
				t.Errorf("%s (pid %d) still runs after down.sh", name, pid)
			}
		}
		if m.Leftovers != nil {
			m.Leftovers(t, r)
		}
	})
	start := time.Now()
	out := harness.Sh(t, env, "bash", filepath.Join(root, "tests/testbed/up.sh"))
	if !strings.Contains(out, "testbed up") {
		t.Fatalf("KBT_MODE=%s up.sh did not say 'testbed up':\n%s", m.Name, out)
	}
	r.Procs = harness.Procs()
	if m.Recorded != nil {
		m.Recorded(t, r)
	}
	t.Logf("KBT_MODE=%s testbed up in %v; processes %v", m.Name, time.Since(start).Round(time.Millisecond), r.Procs)
	harness.BedTraffic(t)
	m.Checks(t, r)
}

// TapChecks are the checks of the modes whose kbridge runs the TAP path
// (ring, vhost): metrics and stats move, the offloads hold, the mode's own
// checks, then the counters and stop.
func TapChecks(t *testing.T, r *Run, checks func(t *testing.T, root string), stop func(t *testing.T, root string)) {
	root := r.Root
	t.Run("metrics and stats are live", func(t *testing.T) {
		scrape := func() string {
			return Sh(t, "ip", "netns", "exec", "kbt-dut", "curl", "-sf", "http://127.0.0.1:9478/metrics")
		}
		value := func(body, name string) float64 {
			m := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("metric %s missing", name)
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			return v
		}
		const pk = `kbridge_packets_total{direction="to_kernel",queue="0"}`
		before := value(scrape(), pk)
		InDUT(t, "ping", "-c", "5", "-i", "0.05", harness.PeerIP)
		after := value(scrape(), pk)
		if after < before+5 {
			t.Errorf("%s went from %v to %v over 5 pings", pk, before, after)
		}
		out := Sh(t, filepath.Join(root, "bin/kbridge"), "stats", "--socket", filepath.Join(harness.RunDir, "kbridge.sock"))
		if !strings.Contains(out, `"to_kernel_packets"`) {
			t.Errorf("kbridge stats:\n%s", out)
		}
		t.Logf("to_kernel packets %v -> %v", before, after)
	})
	t.Run("offloads", testOffloads)
	if checks != nil {
		checks(t, root)
	}
	t.Run("stats and clean stop", func(t *testing.T) {
		st, err := daemon.ReadStatus(filepath.Join(harness.RunDir, "kbridge.sock"))
		if err != nil {
			t.Fatal(err)
		}
		q := st.Queues[0]
		kicks := "none counted (mode vhost: the app keeps no counters)"
		if q.App != nil {
			kicks = fmt.Sprint(q.App.Kicks)
		}
		t.Logf("kbridge: to_kernel %d pkts, from_kernel %d pkts, drops %v, parks %d, wakeups %d, kicks %s",
			q.ToKernelPackets, q.FromKernelPackets, q.Drops, q.Parks, q.Wakeups, kicks)
		if q.ToKernelPackets == 0 || q.FromKernelPackets == 0 {
			t.Errorf("no traffic counted: %+v", q)
		}
		stop(t, root)
	})
}

// StopKbridge sends SIGTERM to kbridge, waits for it to exit and returns its log.
func StopKbridge(t *testing.T) string {
	t.Helper()
	harness.StopPID(t, "kbridge", harness.PidOf(t, "kbridge"), 10*time.Second)
	log, _ := os.ReadFile(filepath.Join(harness.RunDir, "kbridge.log"))
	if !strings.Contains(string(log), "msg=stopped") {
		t.Errorf("kbridge did not log a clean stop:\n%s", log)
	}
	if out := Sh(t, "ip", "-n", "kbt-dut", "link"); strings.Contains(out, "kb0") {
		t.Errorf("kb0 still exists after kbridge stopped:\n%s", out)
	}
	return string(log)
}

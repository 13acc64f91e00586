// Package e2e brings the whole test bed of tests/testbed/README.md up (namespaces, the
// NFS, sockperf and iperf3 servers, the DPDK app and kbridge) and checks what a
// user would: ping both ways, TCP both ways and NFS over kb0, a clean stop that
// leaks nothing, and a tear-down that leaves nothing behind. It does so for each
// mode of the bed in bedModes: ring (the reference app and kbridge's rings),
// vhost (an unmodified dpdk-testpmd whose virtio-user port has kbridge as its
// vhost-user backend) and xdp (kbridge's XDP path with loader pmd, the reference
// app on net_af_xdp); jumbo (the ring bed at MTU 9000) and ports (the ring bed
// with a second port and a second kbridge, an instance) and offload (the ring
// bed with an app port that does LRO and TSO). KBT_MODE=ring, vhost, xdp,
// jumbo, ports or offload runs one of them only.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/harness"
)

const (
	peerIP      = harness.PeerIP
	dutIP       = harness.DUTIP
	runDir      = harness.RunDir
	treeEntries = harness.TreeEntries
)

// status reads kbridge's counters from its control socket.
func status(t *testing.T) daemon.Status {
	t.Helper()
	st, err := daemon.ReadStatus(filepath.Join(runDir, "kbridge.sock"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var (
	repoRoot = harness.RepoRoot
	pidOf    = harness.PidOf
	alive    = harness.Alive
)

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	return harness.Sh(t, nil, name, args...)
}

func inDUT(t *testing.T, args ...string) string {
	t.Helper()
	return in(t, "kbt-dut", args...)
}

// in runs a client command in namespace ns, pinned to the clients' CPU.
func in(t *testing.T, ns string, args ...string) string {
	t.Helper()
	return harness.In(t, nil, ns, args...)
}

// bedMode is one variant of the bed (up.sh's KBT_MODE) that TestTestbed runs
// its checks on.
type bedMode struct {
	name  string   // KBT_MODE, unless mode says
	mode  string   // KBT_MODE when it is not name
	env   []string // more of up.sh's variables
	bins  []string // under the repository root, built by make build
	tools []string // on $PATH
	app   string   // the DPDK app's name in /run/kbt (NAME.pid, NAME.log)
	// links are the interfaces only this mode makes, that down.sh must
	// remove with the bed's own.
	links []string
	// logs are the mode's own logs in /run/kbt, shown when it fails.
	logs []string
	// recorded reads, right after up.sh, what the mode's bed recorded and
	// its checks and leftovers need.
	recorded func(t *testing.T, r *bedRun)
	// checks runs the mode's own subtests, after the shared ones, and
	// stops what the mode started, checking that it stopped cleanly.
	checks func(t *testing.T, r *bedRun)
	// leftovers checks, after down.sh, what only this mode could leave.
	leftovers func(t *testing.T, r *bedRun)
}

// bedRun is one bed brought up, as its mode's checks see it.
type bedRun struct {
	root   string
	procs  map[string]int // the bed's processes, read before down.sh removes their records
	pins   []string       // mode xdp: "PATH MAP_ID" of the maps kbridge pinned
	object string         // mode xdp: the object file kbridge wrote for the app
}

var bedModes = []bedMode{
	{name: "ring", bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, app: "refapp",
		checks: func(t *testing.T, r *bedRun) { tapChecks(t, r, mtuChecks, ringStop) }},
	// The ring bed at MTU 9000 (KBT_JUMBO=1): the shared checks above run
	// on jumbo frames, then jumboChecks.
	{name: "jumbo", mode: "ring", env: []string{"KBT_JUMBO=1"}, bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, app: "refapp",
		checks: func(t *testing.T, r *bedRun) { jumboChecks(t); ringStop(t, r.root) }},
	// The ring bed with two ports (KBT_PORTS=2): the shared checks through
	// kb0, then portsChecks through both, a kbridge instance serving kb1.
	{name: "ports", mode: "ring", env: []string{"KBT_PORTS=2"}, bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, app: "refapp",
		links: []string{"kbt-wire2", "kbt-nic2", "kb1"}, logs: []string{"kbridge-kb1.log"},
		checks: func(t *testing.T, r *bedRun) { portsChecks(t, r) }},
	// The ring bed whose app port does LRO and TSO in software
	// (KBT_SW_OFFLOAD=1): the shared checks cross kbridge's LRO and TSO
	// paths, then nicOffloadChecks.
	{name: "offload", mode: "ring", env: []string{"KBT_SW_OFFLOAD=1"}, bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, app: "refapp",
		checks: nicOffloadChecks},
	{name: "vhost", bins: []string{"bin/kbridge"}, tools: []string{"dpdk-testpmd", "stdbuf"}, app: vhostApp,
		checks: func(t *testing.T, r *bedRun) { tapChecks(t, r, vhostChecks, vhostStop) }, leftovers: vhostLeftovers},
	{name: "xdp", bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, app: "refapp", links: []string{"kb0-x"},
		tools:    []string{"bpftool", "nsenter", "iperf3", "nfs-ls", "nfs-cat", "ganesha.nfsd"},
		recorded: xdpRecorded, checks: xdpChecks, leftovers: xdpLeftovers},
}

// selectedModes is bedModes, or those KBT_MODE names (one, or a
// comma-separated list: the DPDK 24.11 root runs ring,vhost, since XDP mode
// does not depend on the DPDK version).
func selectedModes(t *testing.T) []bedMode {
	want := os.Getenv("KBT_MODE")
	if want == "" {
		return bedModes
	}
	var modes []bedMode
	for _, name := range strings.Split(want, ",") {
		found := false
		for _, m := range bedModes {
			if m.name == strings.TrimSpace(name) {
				modes, found = append(modes, m), true
			}
		}
		if !found {
			t.Fatalf("KBT_MODE=%s: this test knows ring, vhost, xdp, jumbo, ports and offload", want)
		}
	}
	return modes
}

func TestTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("the test bed is skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("the test bed needs root (namespaces, DPDK, TAP): run it as root (make test)")
	}
	root := repoRoot(t)
	modes := selectedModes(t)
	for _, m := range modes {
		for _, bin := range m.bins {
			if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
				t.Fatalf("%s missing: run make build (make test does)", bin)
			}
		}
		for _, tool := range m.tools {
			if _, err := exec.LookPath(tool); err != nil {
				t.Fatalf("%s missing (KBT_MODE=%s): run make deps", tool, m.name)
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
		t.Run(m.name, func(t *testing.T) { testBed(t, root, m) })
	}
}

// testBed brings the bed up in mode m, runs every check on it, stops kbridge
// and tears the bed down.
func testBed(t *testing.T, root string, m bedMode) {
	mode := m.name
	if m.mode != "" {
		mode = m.mode
	}
	env := append(append(append([]string(nil), harness.LockedEnv...), "KBT_MODE="+mode), m.env...)
	r := &bedRun{root: root}
	t.Cleanup(func() {
		if t.Failed() {
			for _, log := range append([]string{"kbridge.log", m.app + ".log"}, m.logs...) {
				b, _ := os.ReadFile(filepath.Join(runDir, log))
				t.Logf("%s:\n%s", log, b)
			}
		}
		if r.procs == nil {
			r.procs = harness.Procs()
		}
		harness.Sh(t, env, "bash", filepath.Join(root, "tests/testbed/down.sh"))
		harness.CheckNothingLeft(t, m.links...)
		for name, pid := range r.procs {
			if alive(pid) {
				t.Errorf("%s (pid %d) still runs after down.sh", name, pid)
			}
		}
		if m.leftovers != nil {
			m.leftovers(t, r)
		}
	})
	start := time.Now()
	out := harness.Sh(t, env, "bash", filepath.Join(root, "tests/testbed/up.sh"))
	if !strings.Contains(out, "testbed up") {
		t.Fatalf("KBT_MODE=%s up.sh did not say 'testbed up':\n%s", m.name, out)
	}
	r.procs = harness.Procs()
	if m.recorded != nil {
		m.recorded(t, r)
	}
	t.Logf("KBT_MODE=%s testbed up in %v; processes %v", m.name, time.Since(start).Round(time.Millisecond), r.procs)
	harness.BedTraffic(t)
	m.checks(t, r)
}

// tapChecks are the checks of the modes whose kbridge runs the TAP path
// (ring, vhost): metrics and stats move, the offloads hold, the mode's own
// checks, then the counters and stop.
func tapChecks(t *testing.T, r *bedRun, checks func(t *testing.T, root string), stop func(t *testing.T, root string)) {
	root := r.root
	t.Run("metrics and stats are live", func(t *testing.T) {
		scrape := func() string {
			return sh(t, "ip", "netns", "exec", "kbt-dut", "curl", "-sf", "http://127.0.0.1:9478/metrics")
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
		inDUT(t, "ping", "-c", "5", "-i", "0.05", peerIP)
		after := value(scrape(), pk)
		if after < before+5 {
			t.Errorf("%s went from %v to %v over 5 pings", pk, before, after)
		}
		out := sh(t, filepath.Join(root, "bin/kbridge"), "stats", "--socket", filepath.Join(runDir, "kbridge.sock"))
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
		st, err := daemon.ReadStatus(filepath.Join(runDir, "kbridge.sock"))
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

// stopKbridge sends SIGTERM to kbridge, waits for it to exit and returns its log.
func stopKbridge(t *testing.T) string {
	t.Helper()
	harness.StopPID(t, "kbridge", pidOf(t, "kbridge"), 10*time.Second)
	log, _ := os.ReadFile(filepath.Join(runDir, "kbridge.log"))
	if !strings.Contains(string(log), "msg=stopped") {
		t.Errorf("kbridge did not log a clean stop:\n%s", log)
	}
	if out := sh(t, "ip", "-n", "kbt-dut", "link"); strings.Contains(out, "kb0") {
		t.Errorf("kb0 still exists after kbridge stopped:\n%s", out)
	}
	return string(log)
}

// ringStop stops kbridge, then asks the reference app for its pool: every
// mbuf is free again but those waiting in the rings.
func ringStop(t *testing.T, root string) {
	stopKbridge(t)
	app := pidOf(t, "refapp")
	re := regexp.MustCompile(`in_rings=(\d+) pool_in_use=(\d+)`)
	var m []string
	for i := 0; i < 100 && m == nil; i++ {
		_ = syscall.Kill(app, syscall.SIGUSR1)
		time.Sleep(50 * time.Millisecond)
		b, _ := os.ReadFile(filepath.Join(runDir, "refapp.log"))
		all := re.FindAllStringSubmatch(string(b), -1)
		if len(all) > 0 {
			m = all[len(all)-1]
		}
	}
	if m == nil {
		t.Fatal("the app printed no counters on SIGUSR1")
	}
	if m[1] != m[2] {
		t.Errorf("mbuf leak: the app's pool has %s mbufs in use but only %s wait in the rings", m[2], m[1])
	}
}

// ifMTU reads an interface's MTU in namespace ns.
func ifMTU(t *testing.T, ns, ifname string) string {
	return strings.TrimSpace(sh(t, "ip", "netns", "exec", ns, "cat", "/sys/class/net/"+ifname+"/mtu"))
}

// waitFor polls cond for up to 5 s and returns how long it took.
func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%s: not after 5 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// pingDF pings with the don't-fragment bit and a payload of size bytes,
// from kbt-dut to the peer and back, and wants no loss.
func pingDF(t *testing.T, size int) {
	t.Helper()
	for _, c := range []struct{ ns, ip string }{{"kbt-dut", peerIP}, {"kbt-peer", dutIP}} {
		out := in(t, c.ns, "ping", "-M", "do", "-s", fmt.Sprint(size), "-c", "5", "-i", "0.1", "-W", "2", c.ip)
		if !strings.Contains(out, " 0% packet loss") {
			t.Errorf("ping -M do -s %d from %s to %s:\n%s", size, c.ns, c.ip, out)
		}
	}
}

// mtuChecks changes kb0's MTU live the way an operator would (ip link),
// which kbridge hands to the app as a request: the app sets its port's
// MTU (net_af_packet sets kbt-nic's), frames of the new size cross both
// ways, and back to 1500 the same way. (Down, not up: net_af_packet's
// ethdev refuses an MTU over 1500; the jumbo bed configures 9000.)
func mtuChecks(t *testing.T, root string) {
	t.Run("mtu changed live", func(t *testing.T) {
		for _, mtu := range []string{"1400", "1500"} {
			sh(t, "ip", "-n", "kbt-dut", "link", "set", "kb0", "mtu", mtu)
			took := waitFor(t, "kbt-nic at "+mtu+", the app's answer", func() bool {
				return ifMTU(t, "kbt-dut", "kbt-nic") == mtu && ifMTU(t, "kbt-dut", "kb0") == mtu
			})
			t.Logf("kb0 mtu %s: the app set its port's in %v", mtu, took.Round(time.Millisecond))
			if mtu == "1400" {
				pingDF(t, 1400-28)
			}
		}
		pingDF(t, 1500-28)
	})
}

// jumboChecks, on the bed at MTU 9000: ping with 9000-byte packets both
// ways, unfragmented, and not a frame dropped as oversize through all the
// shared checks (iperf3 both ways and NFS at 9000).
func jumboChecks(t *testing.T) {
	t.Run("jumbo frames", func(t *testing.T) {
		for _, l := range [][2]string{{"kbt-dut", "kb0"}, {"kbt-dut", "kbt-nic"}, {"kbt-peer", "kbt-wire"}} {
			if got := ifMTU(t, l[0], l[1]); got != "9000" {
				t.Fatalf("%s's MTU is %s on the jumbo bed", l[1], got)
			}
		}
		pingDF(t, 9000-28)
		if d := status(t).Queues[0].Drops["oversize"]; d != 0 {
			t.Errorf("%d frames dropped as oversize at MTU 9000", d)
		}
	})
}

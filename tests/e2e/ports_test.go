package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/harness"
	"github.com/kbridge/kbridge/tests/testbed"
)

// The bed's second port (up.sh KBT_PORTS=2): kbt-nic2 bridged to kb1 by a
// second kbridge, run as instance kb1.
const (
	peer2IP   = "198.18.2.1"
	dut2IP    = "198.18.2.2" // kb1 in kbt-dut
	kb1Socket = harness.RunDir + "/kbridge-kb1.sock"
)

// inAt runs a client command in namespace ns, as in does, but reports
// its error instead of failing the test: it runs in goroutines.
func inAt(ns string, args ...string) (string, error) {
	out, err := harness.Command(nil, "ip", append([]string{"netns", "exec", ns, "taskset", "-c", harness.ClientCPU}, args...)...).CombinedOutput()
	return string(out), err
}

// portsChecks, on the bed with two ports: the second port's kbridge is an
// instance with its own interface and socket, and traffic crosses both
// ports at once (iperf3 through each, then an NFS listing through each).
// It stops both kbridges and finds the app's pool whole.
func portsChecks(t *testing.T, r *testbed.Run) {
	t.Run("second port", func(t *testing.T) {
		for _, c := range []struct{ ns, ip string }{{"kbt-dut", peer2IP}, {"kbt-peer", dut2IP}} {
			out := testbed.In(t, c.ns, "ping", "-c", "5", "-i", "0.1", "-W", "2", c.ip)
			if !strings.Contains(out, " 0% packet loss") {
				t.Errorf("ping from %s to %s through kb1:\n%s", c.ns, c.ip, out)
			}
		}
		st, err := daemon.ReadStatus(kb1Socket)
		if err != nil {
			t.Fatal(err)
		}
		if st.Port != "kb1" || st.Interface != "kb1" || !st.Carrier {
			t.Errorf("instance kb1's status: port %q interface %q carrier %v, want kb1, kb1, on", st.Port, st.Interface, st.Carrier)
		}
		// The pings above went through kb1, not kb0.
		route := testbed.In(t, "kbt-dut", "ip", "route", "get", peer2IP)
		if !strings.Contains(route, "dev kb1") {
			t.Errorf("%s is not routed through kb1: %s", peer2IP, route)
		}
	})
	t.Run("both ports at once", func(t *testing.T) {
		type result struct {
			what, out string
			err       error
			took      time.Duration
		}
		run := func(jobs map[string][]string) map[string]result {
			var wg sync.WaitGroup
			var mu sync.Mutex
			res := map[string]result{}
			for what, args := range jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					out, err := inAt("kbt-dut", args...)
					mu.Lock()
					res[what] = result{what, out, err, time.Since(start)}
					mu.Unlock()
				}()
			}
			wg.Wait()
			return res
		}
		harness.WaitIperf3Server(t)
		for what, r := range run(map[string][]string{
			"kb0": {"iperf3", "-c", harness.PeerIP, "-p", "5201", "-t", "3", "-J"},
			"kb1": {"iperf3", "-c", peer2IP, "-p", "5202", "-t", "3", "-J"},
		}) {
			if r.err != nil {
				t.Errorf("iperf3 through %s: %v\n%s", what, r.err, r.out)
				continue
			}
			res, err := harness.ParseIperf3([]byte(r.out))
			if err != nil {
				t.Errorf("iperf3 through %s: %v", what, err)
				continue
			}
			if res.End.SumReceived.Bytes < 1<<20 {
				t.Errorf("iperf3 through %s moved %.0f bytes", what, res.End.SumReceived.Bytes)
			}
			t.Logf("iperf3 through %s, both at once: %.0f Mbit/s", what, res.End.SumReceived.BitsPerSecond/1e6)
		}
		for what, r := range run(map[string][]string{
			"kb0": {"nfs-ls", "-R", "nfs://" + harness.PeerIP + "/export?version=4"},
			"kb1": {"nfs-ls", "-R", "nfs://" + peer2IP + "/export?version=4"},
		}) {
			if r.err != nil {
				t.Errorf("nfs-ls -R through %s: %v\n%s", what, r.err, r.out)
				continue
			}
			if n := len(strings.Split(strings.TrimSpace(r.out), "\n")); n != harness.TreeEntries {
				t.Errorf("nfs-ls -R through %s listed %d entries, want %d", what, n, harness.TreeEntries)
			}
			t.Logf("nfs-ls -R through %s, both at once: %v", what, r.took.Round(time.Millisecond))
		}
		for _, sock := range []string{filepath.Join(harness.RunDir, "kbridge.sock"), kb1Socket} {
			st, err := daemon.ReadStatus(sock)
			if err != nil {
				t.Fatal(err)
			}
			q := st.Queues[0]
			if q.ToKernelPackets == 0 || q.FromKernelPackets == 0 {
				t.Errorf("%s counted no traffic: %+v", st.Interface, q)
			}
			t.Logf("%s: to_kernel %d pkts, from_kernel %d pkts, drops %v", st.Interface, q.ToKernelPackets, q.FromKernelPackets, q.Drops)
		}
	})
	t.Run("stats and clean stop", func(t *testing.T) {
		harness.StopPID(t, "kbridge-kb1", harness.PidOf(t, "kbridge-kb1"), 10*time.Second)
		log, _ := os.ReadFile(filepath.Join(harness.RunDir, "kbridge-kb1.log"))
		if !strings.Contains(string(log), "msg=stopped") || !strings.Contains(string(log), "instance=kb1") {
			t.Errorf("kbridge (instance kb1) did not log a clean stop under its instance:\n%s", log)
		}
		if out := testbed.Sh(t, "ip", "-n", "kbt-dut", "link"); strings.Contains(out, "kb1:") {
			t.Errorf("kb1 still exists after its kbridge stopped:\n%s", out)
		}
		// kb0 and its kbridge are untouched by the other's stop.
		out := testbed.In(t, "kbt-dut", "ping", "-c", "3", "-i", "0.1", "-W", "2", harness.PeerIP)
		if !strings.Contains(out, " 0% packet loss") {
			t.Errorf("kb0 after kb1's kbridge stopped:\n%s", out)
		}
		testbed.StopKbridge(t)
		poolWhole(t)
	})
}

// poolWhole asks the reference app for its counters, one line per port,
// and wants every mbuf of its shared pool free but those in the rings.
func poolWhole(t *testing.T) {
	t.Helper()
	app := harness.PidOf(t, "refapp")
	re := regexp.MustCompile(`in_rings=(\d+) pool_in_use=(\d+) port=(\S+)`)
	var inRings, inUse, mismatches int
	for i := 0; i < 100; i++ {
		before, _ := os.ReadFile(filepath.Join(harness.RunDir, "refapp.log"))
		_ = syscall.Kill(app, syscall.SIGUSR1)
		time.Sleep(50 * time.Millisecond)
		b, _ := os.ReadFile(filepath.Join(harness.RunDir, "refapp.log"))
		if len(b) <= len(before) {
			continue
		}
		// One dump: a line per port; the pool is the app's, shared, and
		// read last on the last line.
		last := map[string]int{}
		for _, m := range re.FindAllStringSubmatch(string(b[len(before):]), -1) {
			last[m[3]], _ = strconv.Atoi(m[1])
			inUse, _ = strconv.Atoi(m[2])
		}
		if len(last) < 2 {
			continue
		}
		inRings = 0
		for _, n := range last {
			inRings += n
		}
		if inRings != inUse && mismatches < 5 {
			// A frame from the wire may reach a ring between two lines:
			// ask again before calling it a leak.
			mismatches++
			continue
		}
		if inRings != inUse {
			t.Errorf("mbuf leak: the app's pool has %d mbufs in use but only %d wait in the rings of both ports", inUse, inRings)
		}
		t.Logf("the app's pool: %d in use, %d in the rings of both ports", inUse, inRings)
		return
	}
	t.Fatal("the app printed no counters of both ports on SIGUSR1")
}

// Package e2e brings the whole test bed of tests/testbed/README.md up (namespaces, the
// NFS, sockperf and iperf3 servers, the reference DPDK app and kbridge) and
// checks what a user would: ping, TCP both ways and NFS over kb0, a clean
// stop that leaks no mbuf, and a tear-down that leaves nothing behind.
package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/bedtest"
)

const (
	peerIP      = bedtest.PeerIP
	runDir      = bedtest.RunDir
	treeEntries = bedtest.TreeEntries
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
	repoRoot         = bedtest.RepoRoot
	pidOf            = bedtest.PidOf
	alive            = bedtest.Alive
	checkNothingLeft = func(t *testing.T) { bedtest.CheckNothingLeft(t) }
)

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	return bedtest.Sh(t, nil, name, args...)
}

func inDUT(t *testing.T, args ...string) string {
	t.Helper()
	return bedtest.In(t, nil, "kbt-dut", args...)
}

func TestTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("the test bed is skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("the test bed needs root (namespaces, DPDK, TAP): run it as root (make test)")
	}
	root := repoRoot(t)
	for _, bin := range []string{"bin/kbridge", "bin/kbridge-refapp"} {
		if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
			t.Fatalf("%s missing: run make build (make test does)", bin)
		}
	}
	down := func() { sh(t, "bash", filepath.Join(root, "tests/testbed/down.sh")) }
	t.Cleanup(func() {
		if t.Failed() {
			for _, log := range []string{"kbridge.log", "refapp.log"} {
				b, _ := os.ReadFile(filepath.Join(runDir, log))
				t.Logf("%s:\n%s", log, b)
			}
		}
		down()
		checkNothingLeft(t)
	})
	start := time.Now()
	out := sh(t, "bash", filepath.Join(root, "tests/testbed/up.sh"))
	if !strings.Contains(out, "testbed up") {
		t.Fatalf("up.sh did not say 'testbed up':\n%s", out)
	}
	t.Logf("testbed up in %v", time.Since(start).Round(time.Millisecond))

	t.Run("ping", func(t *testing.T) {
		out := inDUT(t, "ping", "-c", "10", "-i", "0.1", "-W", "2", peerIP)
		if !strings.Contains(out, " 0% packet loss") {
			t.Errorf("ping through kb0:\n%s", out)
		}
	})
	for _, dir := range []struct{ name, flag string }{{"tcp to peer", ""}, {"tcp from peer", "-R"}} {
		t.Run(dir.name, func(t *testing.T) {
			args := []string{"iperf3", "-c", peerIP, "-p", "5201", "-t", "3", "-J"}
			if dir.flag != "" {
				args = append(args, dir.flag)
			}
			var res struct {
				End struct {
					SumReceived struct {
						Bytes         float64 `json:"bytes"`
						BitsPerSecond float64 `json:"bits_per_second"`
					} `json:"sum_received"`
				} `json:"end"`
			}
			if err := json.Unmarshal([]byte(inDUT(t, args...)), &res); err != nil {
				t.Fatal(err)
			}
			if res.End.SumReceived.Bytes < 1<<20 {
				t.Errorf("iperf3 %s moved %.0f bytes", dir.flag, res.End.SumReceived.Bytes)
			}
			t.Logf("iperf3 %s: %.0f Mbit/s", dir.flag, res.End.SumReceived.BitsPerSecond/1e6)
		})
	}
	t.Run("nfs listing", func(t *testing.T) {
		start := time.Now()
		out := inDUT(t, "nfs-ls", "-R", "nfs://"+peerIP+"/export?version=4")
		n := len(strings.Split(strings.TrimSpace(out), "\n"))
		if n != treeEntries {
			t.Errorf("nfs-ls -R listed %d entries, want %d", n, treeEntries)
		}
		t.Logf("nfs-ls -R: %d entries in %v", n, time.Since(start).Round(time.Millisecond))
	})
	t.Run("nfs big file hash", func(t *testing.T) {
		want, err := os.ReadFile("/var/lib/kbt/big.bin.sha256")
		if err != nil {
			t.Fatal(err)
		}
		out := sh(t, "bash", "-c", "ip netns exec kbt-dut taskset -c 0 nfs-cat 'nfs://"+peerIP+"/export/big.bin?version=4' | sha256sum")
		if got := strings.Fields(out)[0]; got != strings.TrimSpace(string(want)) {
			t.Errorf("big.bin over NFS hashes to %s, want %s", got, want)
		}
	})
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
	t.Run("stats and clean stop", func(t *testing.T) {
		st, err := daemon.ReadStatus(filepath.Join(runDir, "kbridge.sock"))
		if err != nil {
			t.Fatal(err)
		}
		q := st.Queues[0]
		t.Logf("kbridge: to_kernel %d pkts, from_kernel %d pkts, drops %v, parks %d, wakeups %d, kicks %d",
			q.ToKernelPackets, q.FromKernelPackets, q.Drops, q.Parks, q.Wakeups, q.App.Kicks)
		if q.ToKernelPackets == 0 || q.FromKernelPackets == 0 {
			t.Errorf("no traffic counted: %+v", q)
		}
		// Stop kbridge by its PID, then ask the app for its pool: every
		// mbuf is free again but those waiting in the rings.
		kb := pidOf(t, "kbridge")
		if err := syscall.Kill(kb, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for alive(kb) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(kb) {
			t.Fatal("kbridge did not stop on SIGTERM")
		}
		log, _ := os.ReadFile(filepath.Join(runDir, "kbridge.log"))
		if !strings.Contains(string(log), "msg=stopped") {
			t.Errorf("kbridge did not log a clean stop:\n%s", log)
		}
		if out := sh(t, "ip", "-n", "kbt-dut", "link"); strings.Contains(out, "kb0") {
			t.Errorf("kb0 still exists after kbridge stopped:\n%s", out)
		}
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
	})
}

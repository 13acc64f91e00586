package harness

// The bed's workloads as more than one test package runs them through the
// forwarder in kbt-dut: ping, iperf3 and NFS.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// DUTIP is kb0's address in kbt-dut.
const DUTIP = "198.18.0.2"

// PingBothWays pings the peer from kbt-dut and kb0's address from the
// peer, and wants no loss.
func PingBothWays(t *testing.T) {
	t.Helper()
	for _, c := range []struct{ ns, ip string }{{"kbt-dut", PeerIP}, {"kbt-peer", DUTIP}} {
		out := In(t, nil, c.ns, "ping", "-c", "10", "-i", "0.1", "-W", "2", c.ip)
		if !strings.Contains(out, " 0% packet loss") {
			t.Errorf("ping from %s to %s:\n%s", c.ns, c.ip, out)
		}
	}
}

// BedTraffic runs what a user of the bed checks through the forwarder, each
// a subtest: ping both ways, iperf3 both ways, nfs-ls -R of the whole tree
// and big.bin's hash over NFS.
func BedTraffic(t *testing.T) {
	t.Run("ping both ways", PingBothWays)
	for _, dir := range []struct{ name, flag string }{{"tcp to peer", ""}, {"tcp from peer", "-R"}} {
		t.Run(dir.name, func(t *testing.T) {
			args := []string{"iperf3", "-c", PeerIP, "-p", "5201", "-t", "3", "-J"}
			if dir.flag != "" {
				args = append(args, dir.flag)
			}
			WaitIperf3Server(t)
			res, err := ParseIperf3([]byte(In(t, nil, "kbt-dut", args...)))
			if err != nil {
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
		out := In(t, nil, "kbt-dut", "nfs-ls", "-R", "nfs://"+PeerIP+"/export?version=4")
		n := len(strings.Split(strings.TrimSpace(out), "\n"))
		if n != TreeEntries {
			t.Errorf("nfs-ls -R listed %d entries, want %d", n, TreeEntries)
		}
		t.Logf("nfs-ls -R: %d entries in %v", n, time.Since(start).Round(time.Millisecond))
	})
	t.Run("nfs big file hash", func(t *testing.T) {
		start := time.Now()
		if got, want := BigFileHash(t), BigFileWant(t); got != want {
			t.Errorf("big.bin over NFS hashes to %s, want %s", got, want)
		}
		t.Logf("nfs-cat big.bin (256 MiB) in %v", time.Since(start).Round(time.Millisecond))
	})
}

// WaitIperf3Server waits until the peer's iperf3 server is idle: between
// two tests it closes its listener and opens it again, and a client that
// connects meanwhile is refused or reset (seen in mode vhost, where the
// last test takes longer to close). Idle is the "Server listening" banner
// as the last thing it logged.
func WaitIperf3Server(t *testing.T) {
	t.Helper()
	idle := func() bool {
		b, _ := os.ReadFile(filepath.Join(RunDir, "iperf3.log"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "-") {
				return strings.HasPrefix(l, "Server listening")
			}
		}
		return false
	}
	WaitUntil(t, "the peer's iperf3 server to be idle", 10*time.Second, idle)
}

// BigFileHash reads big.bin over NFS from kbt-dut and returns its sha256.
func BigFileHash(t *testing.T) string {
	t.Helper()
	out := Sh(t, nil, "bash", "-o", "pipefail", "-c", "ip netns exec kbt-dut taskset -c "+ClientCPU+
		" nfs-cat 'nfs://"+PeerIP+"/export/big.bin?version=4' | sha256sum")
	return strings.Fields(out)[0]
}

// BigFileWant is the sha256 up.sh recorded when it generated big.bin.
func BigFileWant(t *testing.T) string {
	t.Helper()
	want, err := os.ReadFile("/var/lib/kbt/big.bin.sha256")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(want))
}

package harness

// The bed's workloads as more than one test package runs them: the peer's
// iperf3 server, and big.bin read over NFS.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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

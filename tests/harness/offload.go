package harness

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TSO returns what ethtool says of the TSO of interface ifname in
// namespace ns: "on" or "off" (its tcp-segmentation-offload line). A
// missing interface or line fails t; more is what to show with it (a
// kbridge's log, say).
func TSO(t testing.TB, ns, ifname string, more ...any) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "ethtool", "-k", ifname).CombinedOutput()
	if err != nil {
		t.Fatalf("ethtool -k %s: %v: %s%s", ifname, err, out, extra(more))
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "tcp-segmentation-offload:") {
			return strings.Fields(l)[1]
		}
	}
	t.Fatalf("no tcp-segmentation-offload line:\n%s", out)
	return ""
}

// WaitTSO waits up to timeout for ifname's TSO to be want ("on", "off")
// and returns what it is then.
func WaitTSO(t testing.TB, ns, ifname, want string, timeout time.Duration, more ...any) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := TSO(t, ns, ifname, more...)
	for got != want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		got = TSO(t, ns, ifname, more...)
	}
	return got
}

func extra(more []any) string {
	var b strings.Builder
	for _, m := range more {
		fmt.Fprintf(&b, "\n%v", m)
	}
	return b.String()
}

package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// holderScript forks argv[1:] and never waits for it: killed, the child
// stays a zombie until the holder goes (a parent or an init that reaps
// late, as in many containers).
const holderScript = `
import os, sys, time
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
print("holder: child pid", pid, flush=True)
time.sleep(600)
`

// A kbridge killed with kill -9 under a parent that does not reap it is a
// zombie: its pid lives (kill(pid, 0) succeeds) but it holds nothing. The
// next kbridge takes the port over from it instead of refusing ("served by
// kbridge pid N: stop it first", exit 1, for as long as the parent lives),
// and the app's kbridge_port_free does not wait for it either.
func TestZombieOwnerIsDead(t *testing.T) {
	p := newPort(t)
	dir := t.TempDir()
	c := dpdkbed.Config{Prefix: prefix, Port: p.name, Ifname: fmt.Sprintf("kbftz%d", os.Getpid()%1000),
		Sock: filepath.Join(dir, "kbridge.sock"), DPDK: "  wait: 2s\n", Iface: "  mtu: 1500\n"}
	cfg := filepath.Join(dir, "kbridge.yaml")
	c.Write(t, cfg)
	pid := zombieOwner(t, cfg)
	if got := p.port.OwnerPID(); got != pid {
		t.Fatalf("owner pid %d, want the zombie %d", got, pid)
	}

	next := newKbridge(t, p)
	next.ready()
	if !waitLogCount(next.Log.String, "taking the port over from a kbridge that is gone", 1) ||
		!strings.Contains(next.Log.String(), fmt.Sprintf("previous_pid=%d", pid)) {
		t.Errorf("the new kbridge did not say it took the port over from zombie pid %d:\n%s", pid, next.Log)
	}
	if got := p.port.OwnerPID(); got == pid {
		t.Errorf("owner pid still the zombie's %d", got)
	}
	next.send(4)
	waitUntil(t, "the new kbridge to move frames", 5*time.Second, func() bool {
		return len(dpdkbed.OnlyTest(p.port.Collect(0, 64))) > 0
	})
	next.Stop(true)

	// The app frees a port whose owner is a zombie: kbridge.h counts it
	// as gone (before, it waited KBRIDGE_FREE_WAIT_MS and said so).
	p2 := newPort(t)
	c.Port, c.Ifname, c.Sock = p2.name, c.Ifname+"b", filepath.Join(dir, "kbridge2.sock")
	c.Write(t, cfg)
	zombieOwner(t, cfg)
	t.Logf("kbridge_port_free with a zombie owner took %v", p2.free().Round(time.Millisecond))
}

// zombieOwner starts kbridge on cfg under a holder that never reaps it,
// waits until it serves, kills it with SIGKILL and returns its pid once it
// is a zombie.
func zombieOwner(t *testing.T, cfg string) int {
	t.Helper()
	holder := harness.Start(t, "holder", "ip", "netns", "exec", nsName, "python3", "-c", holderScript, kbridgeBin, "run", "--config", cfg)
	holder.WaitLog("bridge running", 20*time.Second)
	m := regexp.MustCompile(`holder: child pid (\d+)`).FindStringSubmatch(holder.Log.String())
	if m == nil {
		t.Fatalf("the holder did not say its child's pid:\n%s", holder.Log)
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, fmt.Sprintf("kbridge pid %d a zombie", pid), 5*time.Second, func() bool {
		return procState(pid) == "Z"
	})
	return pid
}

// procState is field 3 of /proc/PID/stat ("" when pid is gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

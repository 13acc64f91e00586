package vhost

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/harness"
	"github.com/kbridge/kbridge/tests/testbed"
)

// TestTestbed brings the test bed up in its vhost mode (an unmodified
// dpdk-testpmd whose virtio-user port has kbridge as its vhost-user
// backend; tests/testbed's Test) and runs the shared checks through kb0,
// then vhostChecks, and a clean stop with no leaked mbuf.
func TestTestbed(t *testing.T) {
	testbed.Test(t, testbed.Mode{Name: "vhost", Bins: []string{"bin/kbridge"}, Tools: []string{"dpdk-testpmd", "stdbuf"}, App: vhostApp,
		Checks:    func(t *testing.T, r *testbed.Run) { testbed.TapChecks(t, r, vhostChecks, vhostStop) },
		Leftovers: vhostLeftovers})
}

// The vhost bed (KBT_MODE=vhost, tests/testbed/README.md): its app is
// dpdk-testpmd, recorded as testpmd-vhost, with DPDK file prefix kbt-vhost.
const (
	vhostApp    = "testpmd-vhost"
	vhostPrefix = "kbt-vhost"
)

var reFeatures = regexp.MustCompile(`msg="vhost-user frontend connected".* features=(\S+)`)

// vhostFeatures returns the features of the last "frontend connected" line
// of kbridge's log (testpmd restarts its port once to turn offloads on).
func vhostFeatures(log string) []string {
	all := reFeatures.FindAllStringSubmatch(log, -1)
	if len(all) == 0 {
		return nil
	}
	return strings.Split(all[len(all)-1][1], ",")
}

// vhostSocket is the vhost-user socket the bed recorded.
func vhostSocket(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(harness.RunDir, "vhost-socket"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// vhostChecks: what kbridge and testpmd's virtio-user port negotiated, as
// kbridge logs it and as `kbridge stats` shows it.
func vhostChecks(t *testing.T, root string) {
	t.Run("negotiated features", func(t *testing.T) {
		log, err := os.ReadFile(filepath.Join(harness.RunDir, "kbridge.log"))
		if err != nil {
			t.Fatal(err)
		}
		logged := vhostFeatures(string(log))
		if logged == nil {
			t.Fatalf("kbridge logged no negotiated features:\n%s", log)
		}
		raw, err := daemon.ReadStatusRaw(filepath.Join(harness.RunDir, "kbridge.sock"))
		if err != nil {
			t.Fatal(err)
		}
		var st daemon.VhostStatus
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		t.Logf("negotiated (kbridge's log): %s; kbridge stats: mode %s, connected %v, connects %d, disconnects %d",
			strings.Join(logged, ","), st.Mode, st.Connected, st.Connects, st.Disconnects)
		if st.Mode != "vhost" || !st.Connected || !slices.Equal(st.Features, logged) {
			t.Errorf("kbridge stats: mode %q, connected %v, features %v; want vhost, connected, the logged %v",
				st.Mode, st.Connected, st.Features, logged)
		}
		if _, set := os.LookupEnv("KBT_VHOST_OFFLOADS"); set {
			t.Logf("KBT_VHOST_OFFLOADS is set: the default offloads are not asserted")
			return
		}
		// The bed's default: testpmd turns on TCP/UDP checksum and TSO for
		// what it sends on the port (VIRTIO_NET_F_CSUM, HOST_TSO4/6) and no
		// receive offload: it forwards to net_af_packet, which could send
		// neither a partial checksum nor a super-frame (README.md).
		for _, f := range []string{"CSUM", "HOST_TSO4", "HOST_TSO6", "MRG_RXBUF", "VERSION_1"} {
			if !slices.Contains(logged, f) {
				t.Errorf("%s not negotiated: %v", f, logged)
			}
		}
		for _, f := range []string{"GUEST_CSUM", "GUEST_TSO4", "GUEST_TSO6", "RING_PACKED"} {
			if slices.Contains(logged, f) {
				t.Errorf("%s negotiated, but the bed does not ask for it: %v", f, logged)
			}
		}
		tp, _ := os.ReadFile(filepath.Join(harness.RunDir, vhostApp+".log"))
		if strings.Contains(string(tp), "Fail to configure") {
			t.Errorf("testpmd failed to configure a port:\n%s", tp)
		}
		for _, o := range []string{"TCP_CKSUM", "UDP_CKSUM", "TCP_TSO"} {
			if !strings.Contains(string(tp), o) {
				t.Errorf("testpmd's log does not show %s configured on port 1:\n%s", o, tp)
			}
		}
	})
}

// vhostStop stops kbridge: it must remove its socket and kb0 and free every
// mbuf of its pool, while the app (testpmd) runs on without its backend.
func vhostStop(t *testing.T, root string) {
	sock := vhostSocket(t)
	app := harness.PidOf(t, vhostApp)
	log := testbed.StopKbridge(t)
	if !strings.Contains(log, "pool_in_use=0") {
		t.Errorf("mbufs of kbridge's pool still in use after stop:\n%s", log)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the vhost-user socket %s is still there after kbridge stopped (%v)", sock, err)
	}
	time.Sleep(200 * time.Millisecond)
	if !harness.Alive(app) {
		b, _ := os.ReadFile(filepath.Join(harness.RunDir, vhostApp+".log"))
		t.Errorf("testpmd (pid %d) died with its vhost-user backend:\n%s", app, b)
	}
}

// vhostLeftovers: after down.sh, no socket, no testpmd and no DPDK runtime
// files of its prefix.
func vhostLeftovers(t *testing.T, _ *testbed.Run) {
	for _, p := range []string{"/run/kbt/kb0.sock", "/var/run/dpdk/" + vhostPrefix, filepath.Join(harness.RunDir, "vhost-socket")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after down.sh (%v)", p, err)
		}
	}
	if m, _ := filepath.Glob("/dev/hugepages/" + vhostPrefix + "map_*"); len(m) > 0 {
		t.Errorf("hugepage files left after down.sh: %v", m)
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "dpdk-testpmd") && strings.Contains(string(b), vhostPrefix) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil && harness.Alive(pid) {
				t.Errorf("testpmd of the vhost bed still runs: pid %d", pid)
			}
		}
	}
}

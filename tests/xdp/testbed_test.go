package xdp

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
	"github.com/kbridge/kbridge/tests/testbed"
)

// TestTestbed brings the test bed up in its xdp mode (kbridge's XDP path
// with loader pmd, the reference app on net_af_xdp; tests/testbed's Test)
// and runs the shared traffic checks, then xdpChecks.
func TestTestbed(t *testing.T) {
	testbed.Test(t, testbed.Mode{Name: "xdp", Bins: []string{"bin/kbridge", "bin/kbridge-refapp"}, App: "refapp", Links: []string{"kb0-x"},
		Tools:    []string{"bpftool", "nsenter", "iperf3", "nfs-ls", "nfs-cat", "ganesha.nfsd"},
		Recorded: xdpRecorded, Checks: xdpChecks, Leftovers: xdpLeftovers})
}

// The XDP bed (KBT_MODE=xdp, tests/testbed/README.md): kbridge in mode xdp
// with loader pmd, and the reference DPDK app on kbt-nic through net_af_xdp
// with kbridge's object. Ping, TCP and NFS (the shared checks) reach kb0
// through the XDP redirect both ways; its own checks: placement and
// program, fast-path UDP reaches the app and not the kernel, kbridge's
// counters move, and the orderly stop leaves no program, pin, veth or
// process behind.
const (
	fastPort = 4789 // the fast-path rule of kbridge-xdp.yaml, the refapp's --own-udp-port
	nic      = "kbt-nic"
)

type xdpStatus struct {
	Mode       string `json:"mode"`
	AttachMode string `json:"attach_mode"`
	Actions    map[string]struct {
		Packets uint64 `json:"packets"`
		Bytes   uint64 `json:"bytes"`
	} `json:"actions"`
}

// xdpRecorded reads the pins and the object file the bed recorded, before
// the tear-down removes the records.
func xdpRecorded(t *testing.T, r *testbed.Run) {
	if b, err := os.ReadFile(filepath.Join(harness.RunDir, "xdp-pins")); err == nil {
		r.Pins = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	if b, err := os.ReadFile(filepath.Join(harness.RunDir, "xdp-object")); err == nil {
		r.Object = strings.TrimSpace(string(b))
	}
	if len(r.Pins) != 3 {
		t.Errorf("the bed recorded pins %q, want xsks_map, steer_config and stats", r.Pins)
	}
}

// xdpChecks are mode xdp's own checks, ending with its orderly stop.
func xdpChecks(t *testing.T, r *testbed.Run) {
	kbridge := filepath.Join(r.Root, "bin/kbridge")
	sock := filepath.Join(harness.RunDir, "kbridge.sock")
	pins, object := r.Pins, r.Object
	kbPID, appPID := harness.PidOf(t, "kbridge"), harness.PidOf(t, "refapp")

	status := func(t *testing.T) xdpStatus {
		t.Helper()
		var s xdpStatus
		if err := json.Unmarshal([]byte(testbed.Sh(t, kbridge, "stats", "--socket", sock)), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	counter := func(s xdpStatus, action string) uint64 { return s.Actions[action].Packets }

	t.Run("placement and programs", func(t *testing.T) {
		ncpu := runtime.NumCPU()
		if ncpu < 2 {
			t.Skip("one CPU: nothing is pinned")
		}
		app := strconv.Itoa(ncpu - 1)
		others := "0"
		if ncpu > 2 {
			others = fmt.Sprintf("0-%d", ncpu-2)
		}
		for _, c := range []struct {
			pid  int
			want string
		}{{appPID, app}, {kbPID, others}} {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.pid))
			m := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)`).FindSubmatch(b)
			if m == nil || string(m[1]) != c.want {
				t.Errorf("pid %d runs on CPUs %q, want %s (the placement of tests/testbed/README.md)", c.pid, m, c.want)
			}
		}
		link := testbed.Sh(t, "ip", "-n", "kbt-dut", "-d", "link", "show", nic)
		if !strings.Contains(link, "prog/xdp") {
			t.Fatalf("no XDP program on %s:\n%s", nic, link)
		}
		id := regexp.MustCompile(`prog/xdp id (\d+)`).FindStringSubmatch(link)
		if id == nil {
			t.Fatalf("no program id in:\n%s", link)
		}
		if p := testbed.Sh(t, "bpftool", "prog", "show", "id", id[1]); !strings.Contains(p, "kbridge_steer") {
			t.Errorf("the program on %s is not kbridge_steer:\n%s", nic, p)
		}
		if s := status(t); s.Mode != "xdp" {
			t.Errorf("kbridge stats: mode %q, want xdp", s.Mode)
		}
	})

	t.Run("fast path reaches the app, not the kernel", func(t *testing.T) {
		const n = 200
		rx := func() uint64 {
			v, err := strconv.ParseUint(strings.TrimSpace(testbed.Sh(t, "ip", "netns", "exec", "kbt-dut",
				"cat", "/sys/class/net/kb0/statistics/rx_packets")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		udp := func() string { // the kernel's UDP counters in kbt-dut
			return testbed.Sh(t, "ip", "netns", "exec", "kbt-dut", "nstat", "-asz", "UdpInDatagrams", "UdpNoPorts", "UdpInErrors")
		}
		udpRE := regexp.MustCompile(`(?m)^(Udp\w+)\s+(\d+)`)
		udpSum := func(s string) (sum uint64) {
			for _, m := range udpRE.FindAllStringSubmatch(s, -1) {
				v, _ := strconv.ParseUint(m[2], 10, 64)
				sum += v
			}
			return sum
		}
		own0 := appOwn(t, appPID)
		s0 := status(t)
		// ARP for kb0 is fresh from the pings; make sure, so that no
		// ARP exchange falls into the window below.
		testbed.In(t, "kbt-peer", "ping", "-c", "1", "-W", "2", harness.DUTIP)
		rx0, udp0 := rx(), udpSum(udp())
		// n datagrams from the remote host to kb0's address, port 4789.
		testbed.In(t, "kbt-peer", "bash", "-c", fmt.Sprintf(
			"for i in $(seq %d); do echo fast-path-$i >/dev/udp/%s/%d; done", n, harness.DUTIP, fastPort))
		var own1 uint64
		deadline := time.Now().Add(5 * time.Second)
		for own1 = appOwn(t, appPID); own1 < own0+n && time.Now().Before(deadline); own1 = appOwn(t, appPID) {
			time.Sleep(50 * time.Millisecond)
		}
		rx1, udp1 := rx(), udpSum(udp())
		s1 := status(t)
		t.Logf("refapp own %d -> %d; kb0 rx_packets %d -> %d; kernel UDP counters %d -> %d; fast_path %d -> %d",
			own0, own1, rx0, rx1, udp0, udp1, counter(s0, "fast_path"), counter(s1, "fast_path"))
		if own1 < own0+n {
			t.Errorf("the app's own= counter rose by %d, want %d", own1-own0, n)
		}
		if rx1 != rx0 {
			t.Errorf("kb0 received %d packets while only fast-path UDP was sent: the kernel saw fast-path traffic", rx1-rx0)
		}
		if udp1 != udp0 {
			t.Errorf("the kernel's UDP counters in kbt-dut moved by %d", udp1-udp0)
		}
		if d := counter(s1, "fast_path") - counter(s0, "fast_path"); d < n {
			t.Errorf("kbridge's fast_path counter rose by %d, want >= %d", d, n)
		}
		if d := counter(s1, "xsk_miss") - counter(s0, "xsk_miss"); d != 0 {
			t.Errorf("xsk_miss rose by %d: the app's AF_XDP socket was not in xsks_map", d)
		}
	})

	t.Run("counters move", func(t *testing.T) {
		metric := func(action string) float64 {
			body := testbed.Sh(t, "ip", "netns", "exec", "kbt-dut", "curl", "-sf", "http://127.0.0.1:9478/metrics")
			m := regexp.MustCompile(`(?m)^kbridge_xdp_packets_total\{action="` + action + `"\} (\S+)$`).FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("kbridge_xdp_packets_total{action=%q} missing from /metrics", action)
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			return v
		}
		s0, e0, r0 := status(t), metric("exception"), metric("returned")
		testbed.In(t, "kbt-dut", "ping", "-c", "5", "-i", "0.05", "-W", "2", harness.PeerIP)
		s1, e1, r1 := status(t), metric("exception"), metric("returned")
		for _, a := range []string{"exception", "returned"} {
			if d := counter(s1, a) - counter(s0, a); d < 5 {
				t.Errorf("kbridge stats: %s rose by %d over 5 pings", a, d)
			}
		}
		if e1 < e0+5 || r1 < r0+5 {
			t.Errorf("metrics: exception %v -> %v, returned %v -> %v over 5 pings", e0, e1, r0, r1)
		}
		for _, a := range []string{"aborted", "drop", "pass"} {
			if v := counter(s1, a); v != 0 {
				t.Errorf("kbridge stats: %s = %d, want 0", a, v)
			}
		}
		t.Logf("kbridge stats after the run: %+v", s1.Actions)
	})

	// The orderly stop: the app first (its program leaves the NIC), then
	// kbridge, which then removes the pins, the veth and the object. (While
	// the app runs, a stopping kbridge leaves them to the app's program, so
	// that a restart keeps the exception path: tests/xdp covers that.)
	t.Run("clean stop", func(t *testing.T) {
		harness.StopPID(t, "the DPDK app", appPID, 10*time.Second)
		if link := testbed.Sh(t, "ip", "-n", "kbt-dut", "link", "show", nic); strings.Contains(link, "prog/xdp") {
			t.Errorf("the app left its XDP program on %s:\n%s", nic, link)
		}
		harness.StopPID(t, "kbridge", kbPID, 10*time.Second)
		log, _ := os.ReadFile(filepath.Join(harness.RunDir, "kbridge.log"))
		if !strings.Contains(string(log), "xdp path detached") {
			t.Errorf("kbridge did not log a clean detach:\n%s", log)
		}
		if out := testbed.Sh(t, "ip", "-n", "kbt-dut", "link"); strings.Contains(out, "kb0") {
			t.Errorf("kb0 or kb0-x still exists after the app and kbridge stopped:\n%s", out)
		}
		for _, p := range pins {
			if f := strings.Fields(p); len(f) == 2 {
				if _, err := os.Stat(f[0]); err == nil {
					t.Errorf("pin %s still exists after the app and kbridge stopped", f[0])
				}
			}
		}
		if _, err := os.Stat(object); object != "" && err == nil {
			t.Errorf("object file %s still exists after the app and kbridge stopped", object)
		}
	})
}

// appOwn asks the reference app for its counters (SIGUSR1) and returns the
// own= count of the newest line it printed after the signal.
func appOwn(t *testing.T, pid int) uint64 {
	t.Helper()
	path := filepath.Join(harness.RunDir, "refapp.log")
	re := regexp.MustCompile(`(?m)^kbridge-refapp: stats rx=\d+ own=(\d+)`)
	count := func() (int, string) {
		b, _ := os.ReadFile(path)
		all := re.FindAllStringSubmatch(string(b), -1)
		if len(all) == 0 {
			return 0, ""
		}
		return len(all), all[len(all)-1][1]
	}
	n0, _ := count()
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		t.Fatalf("SIGUSR1 to the app: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n, v := count(); n > n0 {
			own, _ := strconv.ParseUint(v, 10, 64)
			return own
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the app printed no stats line on SIGUSR1")
	return 0
}

// xdpLeftovers: after testbed-down no program's pin or object file of the
// bed remains (namespaces, veths and processes are checked for every mode).
func xdpLeftovers(t *testing.T, r *testbed.Run) {
	pins, object := r.Pins, r.Object
	for _, p := range pins {
		f := strings.Fields(p)
		if len(f) != 2 {
			continue
		}
		// A pin of the same name may belong to someone else by now; only
		// the bed's own map ID counts.
		if out, err := exec.Command("bpftool", "map", "show", "pinned", f[0]).Output(); err == nil &&
			strings.HasPrefix(string(out), f[1]+":") {
			t.Errorf("pin %s (map %s) left after testbed-down", f[0], f[1])
		}
	}
	if object != "" {
		if _, err := os.Stat(object); err == nil {
			t.Errorf("object file %s left after testbed-down", object)
		}
	}
}

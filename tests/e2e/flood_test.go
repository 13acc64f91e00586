package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/harness"
	"github.com/kbridge/kbridge/tests/testbed"
)

// floodBed is the ring bed with the reference app's flood generator
// (tests/refapp/flood.h) driven through spec, a BGP session over kb0 when
// BIRD is there, and an SSH-like session: pingpong.py from the peer to a
// server on kb0's port 22.
type floodBed struct {
	root, spec string
	mac        string // kb0's, the frames' destination as the wire has it
	app        int
	session    *exec.Cmd
	out        *harness.Buffer
	bgp        bool
}

func upFloodBed(t *testing.T) *floodBed {
	harness.NeedRoot(t, "the test bed needs root")
	root := harness.RepoRoot(t)
	for _, b := range []string{"bin/kbridge", "bin/kbridge-refapp"} {
		if _, err := os.Stat(filepath.Join(root, b)); err != nil {
			t.Skipf("%s missing: run make build", b)
		}
	}
	for _, c := range []string{"ganesha.nfsd", "nfs-ls", "sockperf", "iperf3", "python3"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s missing: the test bed needs it (make deps)", c)
		}
	}
	// The flood is the ring bed's (its reference app's generator): under
	// a KBT_MODE list without ring it does not run, and up.sh is told ring
	// whatever the list says.
	if m := os.Getenv("KBT_MODE"); m != "" && !slices.Contains(strings.Split(m, ","), "ring") {
		t.Skipf("KBT_MODE=%s: the flood runs on the ring bed", m)
	}
	harness.ClaimBed(t, root)
	f := &floodBed{root: root, spec: filepath.Join(t.TempDir(), "flood.spec")}
	if err := os.WriteFile(f.spec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bed := append(append([]string{"KBT_FLOOD=" + f.spec}, harness.LockedEnv...), "KBT_MODE=ring")
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range []string{"kbridge.log", "refapp.log"} {
				b, _ := os.ReadFile(filepath.Join(harness.RunDir, l))
				t.Logf("%s:\n%s", l, harness.Tail(string(b), 40))
			}
			if f.out != nil {
				t.Logf("the session's output:\n%s", harness.Tail(f.out.String(), 20))
			}
		}
		harness.Sh(t, harness.LockedEnv, "bash", filepath.Join(root, "tests/testbed/down.sh"))
		harness.CheckNothingLeft(t)
	})
	harness.Sh(t, bed, "bash", filepath.Join(root, "tests/testbed/up.sh"))
	f.app = harness.PidOf(t, "refapp")
	// The peer's frames reach the app addressed to kb0's MAC (kb0 answers
	// its ARP): so are the flood's, or the kernel would drop them as
	// another host's before any socket sees them.
	if err := harness.InNS("kbt-dut", func() error {
		ifi, err := net.InterfaceByName("kb0")
		if err == nil {
			f.mac = ifi.HardwareAddr.String()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("bird"); err == nil {
		testbed.BGPUp(t, root)
		f.bgp = true
	}
	pp := filepath.Join(root, "tests/bench/pingpong.py")
	harness.StartSpec(t, "pingpong-server", harness.Spec{},
		"ip", "netns", "exec", "kbt-dut", "taskset", "-c", harness.ClientCPU, "python3", pp, "server", harness.DUTIP, "22")
	time.Sleep(500 * time.Millisecond)
	f.out = &harness.Buffer{}
	f.session = exec.Command("ip", "netns", "exec", "kbt-peer", "taskset", "-c", harness.ClientCPU,
		"python3", "-u", pp, "session", harness.DUTIP, "22", "200")
	f.session.Stdout, f.session.Stderr = f.out, f.out
	if err := f.session.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.session.Process.Kill()
		_ = f.session.Wait()
	})
	// The session says "connected" once its connection is up and its
	// SIGUSR1 handler set: a signal before then would end it.
	harness.WaitUntil(t, "the session's connection", 30*time.Second, func() bool {
		return strings.Contains(f.out.String(), "connected\n")
	})
	time.Sleep(time.Second)
	f.window(t) // the session's first round trips
	return f
}

// flood has the generator make what spec says ("udp=50000"), "" for none,
// to kb0's MAC.
func (f *floodBed) flood(t *testing.T, spec string) {
	t.Helper()
	if err := os.WriteFile(f.spec, []byte("mac="+f.mac+" "+spec+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(f.app, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
}

var floodLine = regexp.MustCompile(`(?m)^kbridge-refapp: flood (.*)$`)

// made returns the generator's frames made and queued, per kind, so far.
func (f *floodBed) made(t *testing.T) map[string][2]uint64 {
	t.Helper()
	log := filepath.Join(harness.RunDir, "refapp.log")
	count := func() int {
		b, _ := os.ReadFile(log)
		return len(floodLine.FindAll(b, -1))
	}
	n := count()
	if err := syscall.Kill(f.app, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(t, "the app's flood counters", 5*time.Second, func() bool { return count() > n })
	b, _ := os.ReadFile(log)
	all := floodLine.FindAllStringSubmatch(string(b), -1)
	out := map[string][2]uint64{}
	for _, w := range strings.Fields(all[len(all)-1][1]) {
		k, v, _ := strings.Cut(w, "=")
		a, q, ok := strings.Cut(v, "/")
		if !ok {
			continue // the "flood set" line
		}
		made, _ := strconv.ParseUint(a, 10, 64)
		queued, _ := strconv.ParseUint(q, 10, 64)
		out[k] = [2]uint64{made, queued}
	}
	return out
}

// window ends the session's window: its round trips since the last one.
func (f *floodBed) window(t *testing.T) int {
	t.Helper()
	n := strings.Count(f.out.String(), "\n")
	_ = f.session.Process.Signal(syscall.SIGUSR1)
	harness.WaitUntil(t, "the session's window", 5*time.Second, func() bool { return strings.Count(f.out.String(), "\n") > n })
	lines := strings.Split(strings.TrimSpace(f.out.String()), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	got, _ := strconv.Atoi(fields[len(fields)-1])
	return got
}

// classes sums the queues' copp counters: passed + policed per class.
func classes(st daemon.Status) (seen [copp.NumClasses]uint64, policed [copp.NumClasses]uint64) {
	for _, q := range st.Queues {
		if q.CoPP == nil {
			continue
		}
		for c := range seen {
			seen[c] += q.CoPP.Passed[c] + q.CoPP.Policed[c]
			policed[c] += q.CoPP.Policed[c]
		}
	}
	return seen, policed
}

// A short flood from the NIC's side on the ring bed: UDP to a closed port
// and forged BGP (port 179, TTL 64) are classed unwanted and freed in the
// burst core, every frame the app queued counted in that class, while the
// BGP session stays up with none of its frames policed and the SSH-like
// session keeps its round trips. A UDP socket opened on the flooded port
// is served from the next reading of the host's sockets on, and the flood
// is unwanted again once it closes; a packet socket on kb0 without a filter
// (tcpdump's kind) turns the judging off while it is open, and one whose
// filter captures the flood keeps it from being unwanted.
func TestAShortFloodFromTheNICIsFreedWhileTheSessionsLive(t *testing.T) {
	f := upFloodBed(t)
	var bgpBefore map[string]testbed.BGPSide
	if f.bgp {
		bgpBefore = testbed.BGPState(t, f.root)
	}
	const rate, secs = 50000, 3
	for _, kind := range []string{"udp", "bgp"} {
		s0, g0 := testbed.Status(t), f.made(t)
		f.window(t)
		f.flood(t, fmt.Sprintf("%s=%d", kind, rate))
		time.Sleep(secs * time.Second)
		f.flood(t, "")
		time.Sleep(200 * time.Millisecond)
		rtts := f.window(t)
		s1, g1 := testbed.Status(t), f.made(t)
		seen0, pol0 := classes(s0)
		seen1, pol1 := classes(s1)
		queued := g1[kind][1] - g0[kind][1]
		unwanted := seen1[copp.Unwanted] - seen0[copp.Unwanted]
		t.Logf("%s: made %d, queued %d; unwanted %d (policed %d); the session's round trips %d",
			kind, g1[kind][0]-g0[kind][0], queued, unwanted, pol1[copp.Unwanted]-pol0[copp.Unwanted], rtts)
		if queued < rate*secs/2 {
			t.Errorf("%s: the app queued %d frames in %d s at %d/s", kind, queued, secs, rate)
		}
		if unwanted != queued {
			t.Errorf("%s: %d frames classed unwanted, the app queued %d: every one must be counted once", kind, unwanted, queued)
		}
		if p := pol1[copp.Unwanted] - pol0[copp.Unwanted]; p < queued-uint64(copp.DefaultConfig().Unwanted.Burst)-uint64(secs+1)*uint64(copp.DefaultConfig().Unwanted.PPS) {
			t.Errorf("%s: %d of %d unwanted frames freed, want all but the class's burst and rate", kind, p, queued)
		}
		if d := pol1[copp.BGP] - pol0[copp.BGP] + pol1[copp.BFD] - pol0[copp.BFD]; d != 0 {
			t.Errorf("%s: %d BGP or BFD frames policed", kind, d)
		}
		if rtts < 200*secs*8/10 {
			t.Errorf("%s: the session made %d round trips in %d s at 200/s", kind, rtts, secs)
		}
	}
	if f.bgp {
		after := testbed.BGPState(t, f.root)
		if a, b := after["dut"], bgpBefore["dut"]; a.State != "Established" || a.Since != b.Since {
			t.Errorf("the BGP session went from %+v to %+v under the floods", b, a)
		}
	}

	// A UDP socket opened on the flooded port while the flood runs.
	f.flood(t, "udp=20000")
	defer f.flood(t, "")
	time.Sleep(500 * time.Millisecond)
	var conn net.PacketConn
	if err := harness.InNS("kbt-dut", func() (err error) {
		conn, err = net.ListenPacket("udp4", harness.DUTIP+":9")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		n, buf := 0, make([]byte, 2048)
		for {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				got <- n
				return
			}
			n++
		}
	}()
	// Served from the next reading on: within a refresh (100 ms) and its
	// cost; count a second after that.
	time.Sleep(500 * time.Millisecond)
	s0, g0 := testbed.Status(t), f.made(t)
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	n := <-got
	s1, g1 := testbed.Status(t), f.made(t)
	conn.Close()
	seen0, _ := classes(s0)
	seen1, _ := classes(s1)
	queued := g1["udp"][1] - g0["udp"][1]
	t.Logf("a socket on the flooded port: it got %d datagrams in about 1 s, the app queued %d meanwhile, %d unwanted", n, queued, seen1[copp.Unwanted]-seen0[copp.Unwanted])
	if uint64(n) < queued*8/10 {
		t.Errorf("a socket opened on the flooded port got %d of about %d datagrams", n, queued)
	}
	if u := seen1[copp.Unwanted] - seen0[copp.Unwanted]; u > queued/10 {
		t.Errorf("%d of %d frames still unwanted with a socket on their port", u, queued)
	}
	// Closed: unwanted again from the next reading on.
	time.Sleep(500 * time.Millisecond)
	s0 = testbed.Status(t)
	time.Sleep(time.Second)
	s1 = testbed.Status(t)
	seen0, _ = classes(s0)
	seen1, _ = classes(s1)
	if u := seen1[copp.Unwanted] - seen0[copp.Unwanted]; u < 10000 {
		t.Errorf("the socket closed, only %d frames unwanted in 1 s of 20000/s", u)
	}

	// A packet socket on kb0 without a filter (tcpdump with no
	// expression) would capture every frame: the judging is off while it
	// is open. One whose filter takes UDP to port 9 keeps exactly those.
	udpState := func() string {
		st := testbed.Status(t)
		if st.Sockets == nil {
			return ""
		}
		return st.Sockets.UDP
	}
	closePacket := openPacket(t, nil)
	harness.WaitUntil(t, "the judging to turn off under an unfiltered packet socket", 5*time.Second, func() bool {
		return strings.Contains(udpState(), "packet socket")
	})
	closePacket()
	harness.WaitUntil(t, "the judging to come back after it", 5*time.Second, func() bool { return udpState() == "on" })
	closePacket = openPacket(t, udpToPort9)
	defer closePacket()
	harness.WaitUntil(t, "the packet socket's filter in the view", 5*time.Second, func() bool {
		st := testbed.Status(t)
		return st.Sockets != nil && st.Sockets.PacketFilters == 1 && st.Sockets.UDP == "on"
	})
	s0 = testbed.Status(t)
	time.Sleep(time.Second)
	s1 = testbed.Status(t)
	seen0, _ = classes(s0)
	seen1, _ = classes(s1)
	if u := seen1[copp.Unwanted] - seen0[copp.Unwanted]; u > 100 {
		t.Errorf("%d frames to port 9 unwanted in 1 s while a packet socket's filter captures them", u)
	}
	f.flood(t, "")
}

// udpToPort9 is a classic BPF program for IPv4 UDP to port 9 (the
// flood's), as `tcpdump -dd ip and udp dst port 9` gives it.
var udpToPort9 = []unix.SockFilter{
	{Code: 0x28, K: 12}, {Code: 0x15, Jt: 0, Jf: 8, K: 0x800}, {Code: 0x30, K: 23},
	{Code: 0x15, Jt: 0, Jf: 6, K: 17}, {Code: 0x28, K: 20}, {Code: 0x45, Jt: 4, Jf: 0, K: 0x1fff},
	{Code: 0xb1, K: 14}, {Code: 0x48, K: 16}, {Code: 0x15, Jt: 0, Jf: 1, K: 9},
	{Code: 0x06, K: 262144}, {Code: 0x06, K: 0},
}

// openPacket opens a packet socket on kb0 in kbt-dut, for every protocol,
// with prog as its filter (none when nil); the returned function closes it.
func openPacket(t *testing.T, prog []unix.SockFilter) func() {
	t.Helper()
	fd := -1
	err := harness.InNS("kbt-dut", func() error {
		ifi, err := net.InterfaceByName("kb0")
		if err != nil {
			return err
		}
		all := uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(all)); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all, Ifindex: ifi.Index}); err != nil {
			return err
		}
		if prog == nil {
			return nil
		}
		return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		t.Fatal(err)
	}
	return func() { unix.Close(fd) }
}

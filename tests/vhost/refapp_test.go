package vhost

// The reference app as the vhost-mode app: kbridge-refapp --vhost puts a
// net_virtio_user port on kbridge's socket with the offloads a real app asks
// for (TCP LRO, checksums, TSO) and two queue pairs, where testpmd's io
// forwarding can take neither super-frames nor more than one queue. This
// test has namespaces, veth, TAP, socket and DPDK prefix of its own (kbvr-*),
// so it cannot collide with the testpmd tests; still run the package under
// the lock: flock /run/kbvh-test.lock go test -p 1 -count=1 ./tests/vhost/.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

const (
	rDut, rPeer   = "kbvr-dut", "kbvr-peer"
	rNic, rWire   = "kbvr-nic", "kbvr-wire"
	rIfname       = "kbvr0"
	rKbAddr       = "198.18.12.2"
	rPeerAddr     = "198.18.12.1"
	rPrefix       = "kbvr-refapp"
	rVhostQueues  = 2
	rBulkBytes    = 64 << 20
	rIperfStreams = "4"
	rGRORounds    = 3
)

var refappOnce sync.Once
var refappErr error

// refappBin builds bin/kbridge-refapp with the Makefile (a no-op when it is
// current): a stale binary would lack --vhost.
func refappBin(t *testing.T) string {
	t.Helper()
	root := harness.RepoRoot(t)
	refappOnce.Do(func() {
		if out, err := exec.Command("make", "-C", root, "bin/kbridge-refapp").CombinedOutput(); err != nil {
			refappErr = fmt.Errorf("make bin/kbridge-refapp: %v\n%s", err, out)
		}
	})
	if refappErr != nil {
		t.Fatal(refappErr)
	}
	return filepath.Join(root, "bin", "kbridge-refapp")
}

// refBed is kbridge in mode vhost (two queue pairs) and the reference app
// between kbvr-nic and kbridge's socket, in kbvr-dut; the peer in kbvr-peer.
type refBed struct {
	t    *testing.T
	sock string
	ctl  string
	cfg  string
}

func newRefBed(t *testing.T, client bool) *refBed {
	requirements(t)
	harness.Wire{DUT: rDut, Peer: rPeer, NIC: rNic, PeerIf: rWire, PeerAddr: rPeerAddr}.Up(t)

	dir := t.TempDir()
	b := &refBed{t: t, sock: filepath.Join("/run/kbridge", rIfname+".sock"),
		ctl: filepath.Join(dir, "ctl.sock"), cfg: filepath.Join(dir, "kbridge.yaml")}
	_ = os.Remove(b.sock)
	t.Cleanup(func() { _ = os.Remove(b.sock) }) // the app's, in client mode
	vhostConfig{ifname: rIfname, mac: "02:6b:76:72:00:02", addr: rKbAddr, ctl: b.ctl, sock: b.sock,
		queues: rVhostQueues, client: client}.write(t, b.cfg)
	return b
}

func (b *refBed) kbridge() *harness.Proc {
	b.t.Helper()
	return startKbridge(b.t, rDut, b.cfg)
}

// refapp starts the app on CPU 1 (its lcore), as the bed places it, with a
// pool large enough for the virtio port's rings full of super-frames; extra
// goes after its own options (--vhost-no-gro).
func (b *refBed) refapp(server bool, extra ...string) *harness.Proc {
	b.t.Helper()
	_ = exec.Command("rm", "-rf", "/var/run/dpdk/"+rPrefix).Run()
	args := []string{"ip", "netns", "exec", rDut, "taskset", "-c", "1", "stdbuf", "-oL", "-eL",
		refappBin(b.t), "-l", "1", "--file-prefix", rPrefix, "--proc-type", "primary",
		"--no-pci", "--single-file-segments", "-m", "256", "--vdev", "net_af_packet0,iface=" + rNic,
		"--", "--pool-size", "16383", "--vhost", b.sock, "--vhost-queues", strconv.Itoa(rVhostQueues)}
	if server {
		args = append(args, "--vhost-server")
	}
	args = append(args, extra...)
	p := harness.Start(b.t, "kbridge-refapp", args...)
	b.t.Cleanup(func() {
		_ = exec.Command("rm", "-rf", "/var/run/dpdk/"+rPrefix).Run()
		// A primary leaves its hugepage file for secondaries to map; gone
		// from the directory, its pages are freed when the app exits.
		files, _ := filepath.Glob("/dev/hugepages/" + rPrefix + "map_*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	})
	return p
}

// refStatus is the part of kbridge's status this test reads.
type refStatus struct {
	PoolInUse   int      `json:"pool_in_use"`
	Connected   bool     `json:"connected"`
	Features    []string `json:"features"`
	Connects    uint64   `json:"connects"`
	Disconnects uint64   `json:"disconnects"`
	Queues      []struct {
		ToKernel   uint64            `json:"to_kernel_packets"`
		FromKernel uint64            `json:"from_kernel_packets"`
		Drops      map[string]uint64 `json:"drops"`
		Offload    map[string]uint64 `json:"offload"`
	} `json:"queues"`
}

// offload adds up offload counter k over the queues.
func (s refStatus) offload(k string) uint64 {
	var n uint64
	for _, q := range s.Queues {
		n += q.Offload[k]
	}
	return n
}

// drops adds up drop counter k over the queues.
func (s refStatus) drops(k string) uint64 {
	var n uint64
	for _, q := range s.Queues {
		n += q.Drops[k]
	}
	return n
}

func (b *refBed) stats() refStatus {
	b.t.Helper()
	var s refStatus
	harness.KbridgeStats(b.t, b.ctl, &s)
	return s
}

var appStats = regexp.MustCompile(`(?m)^kbridge-refapp: stats (.*)$`)

// appCounters asks the app for its counters (SIGUSR1) and returns the
// key=value pairs of the stats line it prints.
func appCounters(t *testing.T, app *harness.Proc) map[string]string {
	t.Helper()
	before := len(appStats.FindAllString(app.Log.String(), -1))
	if err := app.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		all := appStats.FindAllStringSubmatch(app.Log.String(), -1)
		if len(all) > before {
			return parseKV(all[len(all)-1][1])
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app printed no stats:\n%s", app.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func parseKV(line string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

func num(t *testing.T, kv map[string]string, k string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(kv[k], 10, 64)
	if err != nil {
		t.Fatalf("app counter %s=%q: %v", k, kv[k], err)
	}
	return n
}

var sumReceiver = regexp.MustCompile(`\[SUM\].*?([\d.]+ [KMG]?bits/sec)\s+receiver`)

var bitRate = regexp.MustCompile(`^([\d.]+) ([KMG]?)bits/sec$`)

// gbits converts an iperf3 rate ("1.23 Gbits/sec") to Gbit/s.
func gbits(t *testing.T, r string) float64 {
	t.Helper()
	m := bitRate.FindStringSubmatch(r)
	if m == nil {
		t.Fatalf("iperf3 rate %q", r)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v * map[string]float64{"": 1e-9, "K": 1e-6, "M": 1e-3, "G": 1}[m[2]]
}

// span formats the range of vs, in Gbit/s.
func span(vs []float64) string {
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmt.Sprintf("%.2f-%.2f Gbit/s (%d rounds)", lo, hi, len(vs))
}

// iperfP runs a 3 s transfer of rIperfStreams TCP streams from client's
// namespace to srvAddr in server's and returns the receivers' sum.
func iperfP(t *testing.T, server, client, srvAddr string, port int) string {
	t.Helper()
	r, _ := iperfRetr(t, server, client, srvAddr, port)
	return r
}

var sumRetr = regexp.MustCompile(`\[SUM\].*?bits/sec\s+(\d+)\s+sender`)

// iperfRetr is iperfP that also returns the senders' retransmissions.
func iperfRetr(t *testing.T, server, client, srvAddr string, port int) (string, string) {
	t.Helper()
	p := strconv.Itoa(port)
	srv := harness.Start(t, "iperf3 server", "ip", "netns", "exec", server, "taskset", "-c", "0",
		"iperf3", "-s", "-1", "--forceflush", "-B", srvAddr, "-p", p)
	srv.WaitLog("Server listening", 5*time.Second)
	out := harness.Run(t, "ip", "netns", "exec", client, "taskset", "-c", "0", "iperf3", "-c", srvAddr, "-p", p,
		"-t", "3", "-P", rIperfStreams)
	m := sumReceiver.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("iperf3 gave no [SUM] receiver line:\n%s", out)
	}
	retr := "?"
	if r := sumRetr.FindStringSubmatch(out); r != nil {
		retr = r[1]
	}
	return m[1], retr
}

// kernelDrops reads namespace ns's counters of TCP segments its kernel
// dropped or found out of order (nstat, absolute, history untouched).
func kernelDrops(t *testing.T, ns string) map[string]uint64 {
	t.Helper()
	out := harness.Run(t, "ip", "netns", "exec", ns, "nstat", "-asz", "IpInDiscards", "IpInHdrErrors", "IpExtInCsumErrors",
		"TcpInCsumErrors", "TcpInErrs", "TcpExtTCPBacklogDrop", "TcpExtTCPRcvQDrop", "TcpExtTCPOFODrop",
		"TcpExtTCPOFOQueue", "TcpExtTCPZeroWindowDrop", "TcpExtPAWSEstab", "TcpExtTCPRcvCoalesce")
	m := map[string]uint64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 {
			if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				m[f[0]] = n
			}
		}
	}
	return m
}

// delta formats the counters that grew from a to b.
func delta(a, b map[string]uint64) string {
	var parts []string
	for k, v := range b {
		if v != a[k] {
			parts = append(parts, fmt.Sprintf("%s+%d", k, v-a[k]))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestVhostRefapp: kbridge serves two queue pairs, the reference app's
// virtio-user port connects with LRO, checksum and TSO offloads on. The
// kernel's TSO super-frames reach the app whole and the app cuts them for
// its NIC; the other way the app merges the NIC's TCP frames (librte_gro)
// and sends them as TSO packets, which kbridge writes to its TAP as one GSO
// frame each (lro_writes, the kernel taking them: no write error); both
// queue pairs carry traffic both ways; the app's GRO is measured on and off;
// a restarted app is taken back; everything stops clean.
func TestVhostRefapp(t *testing.T) {
	b := newRefBed(t, false)
	kb := b.kbridge()
	app := b.refapp(false)
	app.WaitLog("kbridge-refapp: ready", 30*time.Second)
	kb.WaitLog("vhost-user frontend connected", 10*time.Second)
	if !strings.Contains(app.Log.String(), "TCP_LRO=on") || !strings.Contains(app.Log.String(), "TCP_TSO=on") ||
		!strings.Contains(app.Log.String(), " gro=on ") {
		t.Errorf("the app's virtio port did not enable LRO, TSO and GRO:\n%s", app.Log)
	}

	t.Run("ping both ways", func(t *testing.T) {
		ping(t, rPeer, rKbAddr)
		ping(t, rDut, rPeerAddr)
	})
	t.Run("iperf3 -P 4 both ways", func(t *testing.T) {
		up := iperfP(t, rDut, rPeer, rKbAddr, 5411)     // peer -> app -> kbridge -> TAP
		down := iperfP(t, rPeer, rDut, rPeerAddr, 5412) // TAP -> kbridge -> app (GSO) -> peer
		t.Logf("iperf3 -P %s: peer->%s %s, %s->peer %s", rIperfStreams, rIfname, up, rIfname, down)
	})
	t.Run("bulk TCP, hash checked", func(t *testing.T) {
		d1 := harness.BulkTCP(t, rDut, rPeer, rPeerAddr, 5413, rBulkBytes)
		d2 := harness.BulkTCP(t, rPeer, rDut, rKbAddr, 5414, rBulkBytes)
		t.Logf("%d MiB %s->peer in %v, peer->%s in %v", rBulkBytes>>20, rIfname, d1.Round(time.Millisecond),
			rIfname, d2.Round(time.Millisecond))
	})

	s := b.stats()
	t.Logf("kbridge: features %v, connects %d", s.Features, s.Connects)
	for _, f := range []string{"GUEST_TSO4", "HOST_TSO4", "GUEST_CSUM", "CSUM", "MQ", "MRG_RXBUF"} {
		if !has(s.Features, f) {
			t.Errorf("feature %s not negotiated: %v", f, s.Features)
		}
	}
	if !s.Connected || len(s.Queues) != rVhostQueues {
		t.Fatalf("status: connected %v, %d queues", s.Connected, len(s.Queues))
	}
	var tso uint64
	for i, q := range s.Queues {
		t.Logf("kbridge queue %d: to_kernel %d from_kernel %d tso_to_app %d drops %v", i, q.ToKernel,
			q.FromKernel, q.Offload["tso_to_app"], q.Drops)
		if q.ToKernel == 0 || q.FromKernel == 0 {
			t.Errorf("queue pair %d did not carry traffic both ways: to_kernel %d, from_kernel %d", i,
				q.ToKernel, q.FromKernel)
		}
		tso += q.Offload["tso_to_app"]
	}
	if tso == 0 {
		t.Errorf("kbridge handed the app no super-frame (tso_to_app 0)")
	}
	// The app's TSO packets (its GRO's merges), each one GSO write the
	// kernel took: a refused one would count as a write error or, where
	// the kernel refuses GSO writes of some shape, as a fallback.
	t.Logf("kbridge: lro_writes %d merged_writes %d fallbacks %d", s.offload("lro_writes"),
		s.offload("merged_writes"), s.offload("fallbacks"))
	if s.offload("lro_writes") == 0 {
		t.Errorf("kbridge wrote no TSO packet of the app as a GSO frame (lro_writes 0)")
	}
	for _, d := range []string{"bad_vnet_header", "tap_write_error", "malformed", "too_many_segments", "oversize"} {
		if n := s.drops(d); n != 0 {
			t.Errorf("kbridge dropped %d packets as %s", n, d)
		}
	}
	if n := s.offload("fallbacks"); n != 0 {
		t.Errorf("the kernel refused %d of kbridge's GSO writes (fallbacks)", n)
	}
	line := kb.Log.String()
	if i := strings.LastIndex(line, "vhost-user frontend connected"); i < 0 ||
		!strings.Contains(line[i:], "kernel_tso4=true") || !strings.Contains(line[i:], "app_tso=true") {
		t.Errorf("kbridge's log does not show the offloads negotiated:\n%s", line)
	}

	c := appCounters(t, app)
	t.Logf("app: %v", c)
	lro, segs := num(t, c, "lro"), num(t, c, "segments")
	if lro == 0 || segs <= lro {
		t.Errorf("the app cut no super-frame: lro=%d segments=%d", lro, segs)
	}
	if n := num(t, c, "seg_failed"); n != 0 {
		t.Errorf("the app could not cut %d super-frames", n)
	}
	if gro, gsegs := num(t, c, "gro"), num(t, c, "gro_segments"); gro == 0 || gsegs <= gro {
		t.Errorf("the app's GRO merged nothing: gro=%d gro_segments=%d", gro, gsegs)
	}
	if n := num(t, c, "tso_refused"); n != 0 {
		t.Errorf("the virtio port's tx_prepare refused %d of the app's TSO packets", n)
	}
	for q := range rVhostQueues {
		to, from, _ := strings.Cut(c[fmt.Sprintf("q%d", q)], "/")
		if to == "0" || from == "0" || from == "" {
			t.Errorf("app queue %d: %s packets to kbridge, %s from it", q, to, from)
		}
	}

	// The app restarted with its GRO off and on, in turns: the figures of
	// one run side by side. Off, kbridge merges the app's MTU frames
	// itself (merged_writes) and sees no TSO packet (lro_writes).
	t.Run("app GRO on and off, peer to kbridge", func(t *testing.T) {
		rates := map[bool][]float64{}
		for round := range rGRORounds {
			for _, on := range []bool{false, true} {
				app.Stop(true)
				if !strings.Contains(app.Log.String(), "kbridge-refapp: stopped pool_in_use=0") {
					t.Errorf("the app's pool is not whole after stop:\n%s", app.Log)
				}
				var extra []string
				if !on {
					extra = []string{"--vhost-no-gro"}
				}
				app = b.refapp(false, extra...)
				app.WaitLog("kbridge-refapp: ready", 30*time.Second)
				if want := map[bool]string{true: " gro=on ", false: " gro=off "}[on]; !strings.Contains(app.Log.String(), want) {
					t.Fatalf("the app's ready line lacks%q:\n%s", want, app.Log)
				}
				ping(t, rPeer, rKbAddr)
				before, kbefore := b.stats(), kernelDrops(t, rDut)
				r, retr := iperfRetr(t, rDut, rPeer, rKbAddr, 5420+2*round+map[bool]int{false: 0, true: 1}[on])
				after, kafter := b.stats(), kernelDrops(t, rDut)
				c := appCounters(t, app)
				lro := after.offload("lro_writes") - before.offload("lro_writes")
				merged := after.offload("merged_writes") - before.offload("merged_writes")
				t.Logf("round %d, GRO on %v: peer->%s %s, %s retransmitted; app gro=%s gro_segments=%s "+
					"to_kernel_dropped=%s nic_missed=%s; kbridge lro_writes +%d merged_writes +%d; %s's kernel: %s",
					round, on, rIfname, r, retr, c["gro"], c["gro_segments"], c["to_kernel_dropped"], c["nic_missed"],
					lro, merged, rDut, delta(kbefore, kafter))
				if on && (num(t, c, "gro") == 0 || lro == 0) {
					t.Errorf("round %d: GRO on, but app gro=%s and kbridge lro_writes +%d", round, c["gro"], lro)
				}
				if !on && (num(t, c, "gro") != 0 || lro != 0) {
					t.Errorf("round %d: GRO off, but app gro=%s and kbridge lro_writes +%d", round, c["gro"], lro)
				}
				rates[on] = append(rates[on], gbits(t, r))
			}
		}
		if s := b.stats(); s.drops("bad_vnet_header")+s.drops("tap_write_error")+s.offload("fallbacks") != 0 {
			t.Errorf("kbridge: bad_vnet_header %d, tap_write_error %d, fallbacks %d", s.drops("bad_vnet_header"),
				s.drops("tap_write_error"), s.offload("fallbacks"))
		}
		t.Logf("iperf3 -P %s peer->%s: app GRO on %s, off %s", rIperfStreams, rIfname, span(rates[true]),
			span(rates[false]))
	})

	t.Run("app restart: kbridge takes the next frontend", func(t *testing.T) {
		before := b.stats().Connects
		app.Stop(true)
		app = b.refapp(false)
		app.WaitLog("kbridge-refapp: ready", 30*time.Second)
		ping(t, rPeer, rKbAddr)
		ping(t, rDut, rPeerAddr)
		if s := b.stats(); !s.Connected || s.Connects <= before {
			t.Errorf("after the app's restart: connected %v, connects %d (before %d)", s.Connected,
				s.Connects, before)
		}
	})

	// The app first: its pool must be whole once its ports are closed.
	app.Stop(true)
	if !strings.Contains(app.Log.String(), "kbridge-refapp: stopped pool_in_use=0") {
		t.Errorf("the app's pool is not whole after stop:\n%s", app.Log)
	}
	kb.Stop(true)
	if !strings.Contains(kb.Log.String(), "pool_in_use=0") {
		t.Errorf("kbridge's mbufs still in use after stop:\n%s", kb.Log)
	}
	if _, err := os.Stat(b.sock); !os.IsNotExist(err) {
		t.Errorf("socket %s still there after stop (%v)", b.sock, err)
	}
	if gone, out := harness.LinkGone(rDut, rIfname); !gone {
		t.Errorf("%s still there after stop: %s", rIfname, out)
	}
}

// TestVhostRefappServer: the app's port is the server (--vhost-server,
// server=1) and kbridge the client; kbridge restarted under the running app
// reconnects, with both queue pairs, each time.
func TestVhostRefappServer(t *testing.T) {
	b := newRefBed(t, true)
	app := b.refapp(true)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the app's log:\n%s", app.Log)
		}
	})
	app.WaitLog("waiting for kbridge", 30*time.Second)
	// The line comes before virtio-user binds the socket: kbridge, the
	// client, fails to start if nothing is there yet.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(b.sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app did not create %s:\n%s", b.sock, app.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 2 {
		kb := b.kbridge()
		app.WaitLog("kbridge-refapp: ready", 30*time.Second) // once: the port stays up
		for deadline := time.Now().Add(15 * time.Second); !b.stats().Connected; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				out, _ := exec.Command(harness.Kbridge(t), "stats", "--socket", b.ctl).CombinedOutput()
				t.Fatalf("run %d: kbridge not connected after 15 s: %s\n%s", i, out, kb.Log)
			}
		}
		ping(t, rDut, rPeerAddr)
		ping(t, rPeer, rKbAddr)
		s := b.stats()
		if !s.Connected || !has(s.Features, "MQ") || !has(s.Features, "GUEST_TSO4") || len(s.Queues) != rVhostQueues {
			t.Errorf("run %d: %+v", i, s)
		}
		kb.Stop(true)
		if !strings.Contains(kb.Log.String(), "pool_in_use=0") {
			t.Errorf("run %d: kbridge's mbufs still in use after stop:\n%s", i, kb.Log)
		}
		if _, err := os.Stat(b.sock); err != nil {
			t.Errorf("run %d: kbridge removed the socket of the app, the server: %v", i, err)
		}
	}
	app.Stop(true)
	if !strings.Contains(app.Log.String(), "kbridge-refapp: stopped pool_in_use=0") {
		t.Errorf("the app's pool is not whole after stop:\n%s", app.Log)
	}
}

package testbed

import (
	"fmt"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tap/vnet/vnettest"
	"github.com/kbridge/kbridge/tests/harness"
)

const peerIP6 = "2001:2::1"

var namespaces = []string{"kbt-peer", "kbt-dut", "kbt-direct"}

// csumErrors reads the kernel's checksum error counters of namespace ns.
func csumErrors(t *testing.T, ns string) map[string]uint64 {
	t.Helper()
	out := harness.In(t, nil, ns, "nstat", "-az", "TcpInCsumErrors", "UdpInCsumErrors", "Udp6InCsumErrors")
	got := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^(\w+)\s+(\d+)`).FindAllStringSubmatch(out, -1) {
		got[m[1]], _ = strconv.ParseUint(m[2], 10, 64)
	}
	return got
}

func allCsumErrors(t *testing.T) map[string]uint64 {
	all := map[string]uint64{}
	for _, ns := range namespaces {
		for k, v := range csumErrors(t, ns) {
			all[ns+" "+k] = v
		}
	}
	return all
}

// testOffloads checks the offloaded kernel side on the bed: TSO is on, TCP
// both ways over IPv4 and IPv6 and with 8 streams leaves every namespace's
// checksum error counters alone, and a frame corrupted on purpose is caught
// by the kernel (so checksums really are checked, not waved through).
func testOffloads(t *testing.T) {
	t.Run("tso on kb0", func(t *testing.T) {
		out := InDUT(t, "ethtool", "-k", "kb0")
		for _, f := range []string{"tcp-segmentation-offload: on", "tx-checksumming: on"} {
			if !strings.Contains(out, f) {
				t.Errorf("ethtool -k kb0 lacks %q:\n%s", f, out)
			}
		}
	})
	t.Run("no checksum errors under load", func(t *testing.T) {
		before := allCsumErrors(t)
		for _, args := range [][]string{
			{"-c", harness.PeerIP}, {"-c", harness.PeerIP, "-R"},
			{"-6", "-c", peerIP6}, {"-6", "-c", peerIP6, "-R"},
			{"-c", harness.PeerIP, "-P", "8"}, {"-c", harness.PeerIP, "-P", "8", "-R"},
		} {
			cmd := append([]string{"taskset", "-c", "0", "iperf3", "-p", "5201", "-t", "2", "-f", "m"}, args...)
			harness.WaitIperf3Server(t)
			out := InDUT(t, cmd...)
			if !strings.Contains(out, "receiver") {
				t.Errorf("iperf3 %v:\n%s", args, out)
				continue
			}
			t.Logf("iperf3 %s: %s", strings.Join(args, " "), lastReceiver(out))
		}
		after := allCsumErrors(t)
		for k, v := range after {
			if v != before[k] {
				t.Errorf("%s went from %d to %d under iperf3", k, before[k], v)
			}
		}
		st := Status(t)
		o := st.Queues[0].Offload
		t.Logf("offloads: %+v", o)
		if o.MergedWrites == 0 || o.SplitReads == 0 {
			t.Errorf("no merged writes or split reads counted under bulk TCP: %+v", o)
		}
	})
	t.Run("reorder and loss", testReorderLoss)
	t.Run("a corrupted frame is an InCsumError", func(t *testing.T) {
		before := csumErrors(t, "kbt-dut")["TcpInCsumErrors"]
		sendCorruptSYN(t)
		var after uint64
		for range 50 {
			if after = csumErrors(t, "kbt-dut")["TcpInCsumErrors"]; after > before {
				break
			}
		}
		if after <= before {
			t.Errorf("TcpInCsumErrors in kbt-dut stayed at %d after a TCP segment with a bad checksum", after)
		}
	})
}

// testReorderLoss reads big.bin over NFS through a link that reorders and
// loses frames: coalescing must never merge across a gap or reorder data.
func testReorderLoss(t *testing.T) {
	add := harness.Command(nil, "ip", "netns", "exec", "kbt-peer", "tc", "qdisc", "add", "dev", "kbt-wire", "root",
		"netem", "delay", "200us", "reorder", "10%", "50%", "loss", "0.5%")
	if out, err := add.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "unknown") {
			t.Skipf("sch_netem is not available in this kernel: %s", strings.TrimSpace(string(out)))
		}
		t.Fatalf("tc qdisc add netem: %v: %s", err, out)
	}
	defer harness.Command(nil, "ip", "netns", "exec", "kbt-peer", "tc", "qdisc", "del", "dev", "kbt-wire", "root").Run()
	if got, want := harness.BigFileHash(t), harness.BigFileWant(t); got != want {
		t.Errorf("big.bin over a reordering, lossy link hashes to %s, want %s", got, want)
	}
}

func lastReceiver(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "receiver") && (strings.Contains(l, "[SUM]") || !strings.Contains(out, "[SUM]")) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return "?"
}

// sendCorruptSYN sends, from the peer's kbt-wire, a TCP SYN to kb0's iperf3
// port whose checksum is wrong. It crosses the app and kbridge like any frame.
func sendCorruptSYN(t *testing.T) {
	t.Helper()
	mac, err := net.ParseMAC(strings.TrimSpace(InDUT(t, "cat", "/sys/class/net/kb0/address")))
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	peer, err := netns.GetFromName("kbt-peer")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if err := netns.Set(peer); err != nil {
		t.Fatal(err)
	}
	defer netns.Set(orig)
	ifc, err := net.InterfaceByName("kbt-wire")
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flow := vnettest.Flow{SrcPort: 40999, DstPort: 5201, Ack: 0, Window: 1024, Bad: true}
	copy(flow.DstMAC[:], mac)
	copy(flow.SrcMAC[:], ifc.HardwareAddr)
	copy(flow.SrcIP[:], net.ParseIP(harness.PeerIP).To4())
	copy(flow.DstIP[:], net.ParseIP("198.18.0.2").To4())
	f := flow.Segment(12345, 1, 0, vnettest.SYN)
	addr := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
	copy(addr.Addr[:], mac)
	if err := unix.Sendto(fd, f, 0, addr); err != nil {
		t.Fatal(fmt.Errorf("send the corrupted SYN: %w", err))
	}
}

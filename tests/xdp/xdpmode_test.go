// Package xdp runs `kbridge run` with mode: xdp on a veth "NIC" in a
// namespace: exception traffic reaches kb0 through the redirect, fast-path
// traffic does not, and stopping leaves no program, pin or veth behind.
package xdp

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

const (
	dut, remote = "kbq-dut", "kbq-rem"
	kbAddr      = "198.19.50.2"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

func TestKbridgeRunModeXDP(t *testing.T) {
	harness.NeedRoot(t, "mode xdp needs root (namespaces, XDP)")
	// The veth facts of docs/XDP.md ("What Attach does"): the remote end
	// needs NAPI for redirected frames, and TCP needs its tx checksum
	// offload off.
	harness.Wire{DUT: dut, Peer: remote, NIC: "kbq-nic", PeerIf: "kbq-wire", PeerAddr: "198.19.50.1", GRO: true}.Up(t)
	dir := t.TempDir()
	bin := harness.Kbridge(t)
	cfg := filepath.Join(dir, "kbridge.yaml")
	sock := filepath.Join(dir, "kbridge.sock")
	write := func(rule string) {
		y := "mode: xdp\ninterface:\n  name: kb0\n  addresses: [" + kbAddr + "/24]\nxdp:\n  nic: kbq-nic\n" +
			"  pin_path: /sys/fs/bpf/kbq\n  xsk_fallback: drop\n  fast_path:\n    - " + rule + "\nstats:\n  socket: " + sock + "\n  metrics: \"\"\n"
		if err := harness.WriteAtomic(cfg, y); err != nil {
			t.Fatal(err)
		}
	}
	write("{proto: udp, port: 4789}")
	kb := harness.Start(t, "kbridge", "ip", "netns", "exec", dut, bin, "run", "--config", cfg)
	log := kb.Log
	stop := func() { kb.Stop(true) }
	t.Cleanup(stop)

	type status struct {
		AttachMode string `json:"attach_mode"`
		Actions    map[string]struct{ Packets uint64 }
	}
	read := func() status {
		var s status
		harness.KbridgeStats(t, sock, &s)
		return s
	}
	kb.WaitReady(t, "come up", 15*time.Second, func() bool { return harness.KbridgeAnswers(t, sock) })

	t.Run("ping reaches kb0 through the redirect", func(t *testing.T) {
		out := harness.Run(t, "ip", "netns", "exec", remote, "ping", "-c", "5", "-i", "0.1", "-W", "2", kbAddr)
		if !strings.Contains(out, " 0% packet loss") {
			t.Errorf("ping:\n%s", out)
		}
	})
	t.Run("tcp both ways", func(t *testing.T) {
		srv := harness.Start(t, "iperf3 server", "ip", "netns", "exec", dut, "iperf3", "-s", "-1", "-B", kbAddr, "-p", "5299")
		defer srv.Kill()
		time.Sleep(300 * time.Millisecond)
		out := harness.Run(t, "ip", "netns", "exec", remote, "iperf3", "-c", kbAddr, "-p", "5299", "-t", "2", "--bidir")
		if !strings.Contains(out, "receiver") {
			t.Errorf("iperf3:\n%s", out)
		}
	})
	t.Run("fast-path udp does not reach the kernel", func(t *testing.T) {
		before := read().Actions
		// The kernel's UDP counters, not kb0's rx_packets: an ARP exchange
		// for the datagrams' first send is exception traffic and may
		// rightly reach kb0 meanwhile.
		udp := func() string {
			out := harness.Run(t, "ip", "netns", "exec", dut, "nstat", "-az", "UdpInDatagrams", "UdpNoPorts", "UdpInErrors")
			var vals []string
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) >= 2 && strings.HasPrefix(f[0], "Udp") {
					vals = append(vals, f[0]+"="+f[1])
				}
			}
			return strings.Join(vals, " ")
		}
		udpBefore := udp()
		// nc is not assumed: bash's /dev/udp sends one datagram per echo.
		for i := 0; i < 10; i++ {
			harness.Run(t, "ip", "netns", "exec", remote, "bash", "-c", "echo x > /dev/udp/"+kbAddr+"/4789")
		}
		after := read().Actions
		if got := after["xsk_miss"].Packets - before["xsk_miss"].Packets; got != 10 {
			t.Errorf("xsk_miss went up by %d, want the 10 fast-path datagrams (no AF_XDP socket bound)", got)
		}
		if udpAfter := udp(); udpAfter != udpBefore {
			t.Errorf("the kernel behind kb0 saw fast-path datagrams: %s -> %s", udpBefore, udpAfter)
		}
	})
	t.Run("a bad rule is refused, the old rules stay", func(t *testing.T) {
		write(`{proto: tcp, ports: "70000-80"}`)
		_ = kb.Signal(syscall.SIGHUP)
		kb.WaitCountIn(t, "reload refused", 1, 5*time.Second)
		if !strings.Contains(log.String(), `xdp.fast_path[0].ports: \"70000-80\"`) && !strings.Contains(log.String(), "70000-80") {
			t.Errorf("the refusal does not name the rule:\n%s", log)
		}
	})
	if s := read(); s.Actions["exception"].Packets == 0 || s.Actions["returned"].Packets == 0 {
		t.Errorf("counters did not move: %+v", s.Actions)
	}
	stop()
	if gone, out := harness.LinkGone(dut, "kb0"); !gone {
		t.Errorf("kb0 left behind: %s", out)
	}
	if out := harness.Run(t, "ip", "-n", dut, "-d", "link", "show", "kbq-nic"); strings.Contains(out, "xdp") || strings.Contains(out, "PROMISC") {
		t.Errorf("program or promiscuous flag left on the NIC:\n%s", out)
	}
	if _, err := os.Stat("/sys/fs/bpf/kbq"); err == nil {
		t.Error("pins left in /sys/fs/bpf/kbq")
	}
}

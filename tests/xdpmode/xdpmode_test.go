// Package xdpmode runs `kbridge run` with mode: xdp on a veth "NIC" in a
// namespace: exception traffic reaches kb0 through the redirect, fast-path
// traffic does not, and stopping leaves no program, pin or veth behind.
package xdpmode

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	dut, remote = "kbq-dut", "kbq-rem"
	kbAddr      = "198.19.50.2"
)

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func setup(t *testing.T) {
	for _, ns := range []string{dut, remote} {
		_ = exec.Command("ip", "netns", "del", ns).Run() // a crashed run's leftovers
	}
	t.Cleanup(func() {
		for _, ns := range []string{dut, remote} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	run(t, "ip", "netns", "add", dut)
	run(t, "ip", "netns", "add", remote)
	run(t, "ip", "link", "add", "kbq-nic", "netns", dut, "type", "veth", "peer", "name", "kbq-wire", "netns", remote)
	run(t, "ip", "-n", remote, "addr", "add", "198.19.50.1/24", "dev", "kbq-wire")
	for _, c := range [][]string{{remote, "kbq-wire"}, {dut, "kbq-nic"}, {dut, "lo"}, {remote, "lo"}} {
		run(t, "ip", "-n", c[0], "link", "set", c[1], "up")
	}
	// The veth facts of docs/XDP.md ("What Attach does"): the remote end
	// needs NAPI for redirected frames, and TCP needs its tx checksum
	// offload off.
	run(t, "ip", "netns", "exec", remote, "ethtool", "-K", "kbq-wire", "gro", "on", "tx", "off")
}

func TestKbridgeRunModeXDP(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("mode xdp needs root (namespaces, XDP): run it as root (make test)")
	}
	setup(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "kbridge")
	run(t, "go", "build", "-o", bin, "github.com/kbridge/kbridge/cmd/kbridge")
	cfg := filepath.Join(dir, "kbridge.yaml")
	sock := filepath.Join(dir, "kbridge.sock")
	write := func(rule string) {
		y := "mode: xdp\ninterface:\n  name: kb0\n  addresses: [" + kbAddr + "/24]\nxdp:\n  nic: kbq-nic\n" +
			"  pin_path: /sys/fs/bpf/kbq\n  xsk_fallback: drop\n  fast_path:\n    - " + rule + "\nstats:\n  socket: " + sock + "\n  metrics: \"\"\n"
		if err := os.WriteFile(cfg+".new", []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg+".new", cfg); err != nil {
			t.Fatal(err)
		}
	}
	write("{proto: udp, port: 4789}")
	var log bytes.Buffer
	cmd := exec.Command("ip", "netns", "exec", dut, bin, "run", "--config", cfg)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("kbridge exited with %v\n%s", err, &log)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("kbridge ignored SIGTERM")
		}
	}
	t.Cleanup(stop)

	type status struct {
		AttachMode string `json:"attach_mode"`
		Actions    map[string]struct{ Packets uint64 }
	}
	read := func() status {
		var s status
		out, err := exec.Command(bin, "stats", "--socket", sock).Output()
		if err == nil {
			err = json.Unmarshal(out, &s)
		}
		if err != nil {
			t.Fatalf("kbridge stats: %v\n%s", err, &log)
		}
		return s
	}
	deadline := time.Now().Add(15 * time.Second)
	for exec.Command(bin, "stats", "--socket", sock).Run() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("kbridge did not come up:\n%s", &log)
		}
		time.Sleep(50 * time.Millisecond)
	}

	t.Run("ping reaches kb0 through the redirect", func(t *testing.T) {
		out := run(t, "ip", "netns", "exec", remote, "ping", "-c", "5", "-i", "0.1", "-W", "2", kbAddr)
		if !strings.Contains(out, " 0% packet loss") {
			t.Errorf("ping:\n%s", out)
		}
	})
	t.Run("tcp both ways", func(t *testing.T) {
		srv := exec.Command("ip", "netns", "exec", dut, "iperf3", "-s", "-1", "-B", kbAddr, "-p", "5299")
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
		time.Sleep(300 * time.Millisecond)
		out := run(t, "ip", "netns", "exec", remote, "iperf3", "-c", kbAddr, "-p", "5299", "-t", "2", "--bidir")
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
			out := run(t, "ip", "netns", "exec", dut, "nstat", "-az", "UdpInDatagrams", "UdpNoPorts", "UdpInErrors")
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
			run(t, "ip", "netns", "exec", remote, "bash", "-c", "echo x > /dev/udp/"+kbAddr+"/4789")
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
		_ = cmd.Process.Signal(syscall.SIGHUP)
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(log.String(), "reload refused") {
			if time.Now().After(deadline) {
				t.Fatalf("no refusal in the log:\n%s", &log)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(log.String(), `xdp.fast_path[0].ports: \"70000-80\"`) && !strings.Contains(log.String(), "70000-80") {
			t.Errorf("the refusal does not name the rule:\n%s", &log)
		}
	})
	if s := read(); s.Actions["exception"].Packets == 0 || s.Actions["returned"].Packets == 0 {
		t.Errorf("counters did not move: %+v", s.Actions)
	}
	stop()
	if out, _ := exec.Command("ip", "-n", dut, "link", "show", "kb0").CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("kb0 left behind: %s", out)
	}
	if out := run(t, "ip", "-n", dut, "-d", "link", "show", "kbq-nic"); strings.Contains(out, "xdp") || strings.Contains(out, "PROMISC") {
		t.Errorf("program or promiscuous flag left on the NIC:\n%s", out)
	}
	if _, err := os.Stat("/sys/fs/bpf/kbq"); err == nil {
		t.Error("pins left in /sys/fs/bpf/kbq")
	}
}

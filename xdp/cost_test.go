package xdp

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// TestXDPCost measures what XDP costs kernel-bound TCP on the veth bed, all
// variants side by side in one run (docs/XDP.md quotes the output):
//
//	KBX_XDP_COST=1 go test ./xdp/ -run TestXDPCost -v -count=1
//
// iperf3 client (kbx-remote) and server (kbx-dut) are both pinned to CPU 0;
// KBX_XDP_COST_SECS and KBX_XDP_COST_ROUNDS change the 10 s x 5 rounds.
// CPU 1 is the DPDK app's in the project bed. It is a measurement, not a
// check: it asserts nothing about the figures.
func TestXDPCost(t *testing.T) {
	if os.Getenv("KBX_XDP_COST") == "" {
		t.Skip("measurement; set KBX_XDP_COST=1 to run")
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("needs iperf3")
	}
	secs, rounds := envInt("KBX_XDP_COST_SECS", 10), envInt("KBX_XDP_COST_ROUNDS", 5)

	type variant struct {
		name  string
		setup func(t *testing.T) (server string, undo func())
	}
	nicAddr := func(t *testing.T) func() {
		sh(t, "ip", "-n", nsDUT, "addr", "add", kb0IP+"/24", "dev", nicName)
		return func() { sh(t, "ip", "-n", nsDUT, "addr", "del", kb0IP+"/24", "dev", nicName) }
	}
	variants := []variant{
		{"no program, peer tx csum+TSO on", func(t *testing.T) (string, func()) {
			sh(t, "ip", "netns", "exec", nsRemote, "ethtool", "-K", wireName, "tx", "on")
			undo := nicAddr(t)
			return kb0IP, func() {
				undo()
				sh(t, "ip", "netns", "exec", nsRemote, "ethtool", "-K", wireName, "tx", "off")
			}
		}},
		{"no program", func(t *testing.T) (string, func()) { return kb0IP, nicAddr(t) }},
		{"XDP_PASS native on the NIC", func(t *testing.T) (string, func()) {
			objs := loadUnpinned(t)
			nic, err := linkIn(nsDUT, nicName)
			if err != nil {
				t.Fatal(err)
			}
			var l link.Link
			// The ifindex means kbx-nic only inside kbx-dut.
			err = inNS(nsDUT, func() (err error) {
				l, err = link.AttachXDP(link.XDPOptions{Program: objs.KbridgePass, Interface: nic.Attrs().Index, Flags: link.XDPDriverMode})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			undo := nicAddr(t)
			return kb0IP, func() { undo(); l.Close() }
		}},
		{"kbridge_steer native -> kb0", func(t *testing.T) (string, func()) {
			p := attachBed(t, bedConfig())
			return kb0IP, func() { p.Close() }
		}},
		{"(experiment) steer native, return by TC, kb0 TSO on", func(t *testing.T) (string, func()) {
			// Not what Attach does: swap kbridge_return (XDP on kb0-x) for a
			// TC egress program on kb0 that redirects the skb to the NIC. The
			// skb keeps its GSO and checksum state, so kb0 may keep TSO and
			// tx checksum offload.
			p := attachBed(t, bedConfig())
			p.returnLink.Close()
			l := attachTCReturn(t, p.nicIndex)
			sh(t, "ip", "netns", "exec", nsDUT, "ethtool", "-K", "kb0", "tx", "on", "tso", "on")
			return kb0IP, func() { l.Close(); p.Close() }
		}},
		{"kbridge_steer generic -> kb0", func(t *testing.T) (string, func()) {
			cfg := bedConfig()
			cfg.Mode = ModeGeneric
			p := attachBed(t, cfg)
			return kb0IP, func() { p.Close() }
		}},
	}

	newBed(t)
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average before: %s", strings.TrimSpace(string(load)))
	up, down := map[string][]float64{}, map[string][]float64{}
	for r := range rounds {
		for _, v := range variants {
			server, undo := v.setup(t)
			time.Sleep(500 * time.Millisecond) // let ARP/NAPI settle
			u := iperf(t, server, secs, false)
			d := iperf(t, server, secs, true)
			undo()
			up[v.name] = append(up[v.name], u)
			down[v.name] = append(down[v.name], d)
			t.Logf("round %d %-52s to DUT %6.2f Gbit/s, from DUT %6.2f Gbit/s", r+1, v.name, u, d)
		}
	}
	load, _ = os.ReadFile("/proc/loadavg")
	t.Logf("load average after: %s", strings.TrimSpace(string(load)))
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d interleaved rounds of %d s per direction; Gbit/s, median (min-max)\n\n", rounds, secs)
	fmt.Fprintf(&b, "| variant | to DUT (kernel receives) | from DUT (kernel sends) |\n|---|---|---|\n")
	for _, v := range variants {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", v.name, spread(up[v.name]), spread(down[v.name]))
	}
	t.Log(b.String())
}

// spread formats "median (min-max)".
func spread(x []float64) string {
	s := slices.Clone(x)
	slices.Sort(s)
	return fmt.Sprintf("%.2f (%.2f-%.2f)", s[len(s)/2], s[0], s[len(s)-1])
}

// attachTCReturn attaches "return bpf_redirect(nic, 0)" at kb0's egress.
func attachTCReturn(t *testing.T, nicIndex int) link.Link {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SchedCLS,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R1, int32(nicIndex)),
			asm.Mov.Imm(asm.R2, 0),
			asm.FnRedirect.Call(),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	kb0, err := linkIn(nsDUT, "kb0")
	if err != nil {
		t.Fatal(err)
	}
	var l link.Link
	if err := inNS(nsDUT, func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Interface: kb0.Attrs().Index, Program: prog, Attach: ebpf.AttachTCXEgress})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// iperf runs one iperf3 test from kbx-remote to the server in kbx-dut and
// returns the received rate in Gbit/s. reverse: the DUT sends.
func iperf(t *testing.T, server string, secs int, reverse bool) float64 {
	t.Helper()
	srv := exec.Command("ip", "netns", "exec", nsDUT, "taskset", "-c", "0", "iperf3", "-s", "-1", "-B", server, "-p", "5299")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Kill() // by PID; normally it has exited after one test (-1)
		srv.Wait()
	}()
	time.Sleep(300 * time.Millisecond)
	args := []string{"netns", "exec", nsRemote, "taskset", "-c", "0", "iperf3", "-c", server, "-p", "5299",
		"-t", fmt.Sprint(secs), "-J"}
	if reverse {
		args = append(args, "-R")
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		t.Fatalf("iperf3: %v\n%s", err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("iperf3 output: %v", err)
	}
	return res.End.SumReceived.BitsPerSecond / 1e9
}

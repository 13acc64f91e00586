package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/daemon"
)

func TestRenderRates(t *testing.T) {
	bounds := []uint64{1000, 2000, 4000, 8000}
	q := func(pkts, drops uint64, hist []uint64) daemon.Queue {
		return daemon.Queue{Snapshot: bridge.Snapshot{Queue: 0, Mode: "adaptive",
			ToKernelPackets: pkts, ToKernelBytes: pkts * 1000, FromKernelPackets: pkts / 2,
			Drops: map[string]uint64{"runt": drops, "oversize": 0}, Residence: hist}}
	}
	prev := daemon.Status{Port: "kb0", Interface: "kb0", ResidenceBoundsNs: bounds,
		Queues: []daemon.Queue{q(1000, 1, []uint64{0, 0, 0, 0})}}
	cur := daemon.Status{Port: "kb0", Interface: "kb0", ResidenceBoundsNs: bounds,
		Queues: []daemon.Queue{q(3000, 3, []uint64{10, 80, 9, 1})}}
	var out bytes.Buffer
	renderRates(&out, prev, cur, 2*time.Second)
	s := out.String()
	// 2000 packets in 2 s; 2000*1000*8 bits / 2 s = 8 Mbit/s; 2 drops / 2 s.
	for _, want := range []string{" 1000 ", "8.0", "<2µs", "<4µs", "runt=3"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestQuantile(t *testing.T) {
	bounds := []uint64{1000, 2000, 4000}
	if got := quantile([]uint64{0, 0, 0}, bounds, 0.5); got != "-" {
		t.Errorf("empty: %q", got)
	}
	if got := quantile([]uint64{1, 0, 99}, bounds, 0.5); got != ">2µs" {
		t.Errorf("open-ended last bucket: %q", got)
	}
	if got := quantile([]uint64{99, 1, 0}, bounds, 0.99); got != "<1µs" {
		t.Errorf("p99: %q", got)
	}
}

func TestWatchShowsEachClassesRatesAndNamesThoseBeingPolicedNow(t *testing.T) {
	q := func(passed, policed uint64) daemon.Queue {
		c := &copp.Snapshot{}
		c.Passed[copp.Control], c.Passed[copp.Default] = passed, passed
		c.Policed[copp.Default], c.Policed[copp.Neighbor] = policed, 7
		c.ToKernelRoom[copp.Default], c.FromKernelRoom[copp.Default] = policed/10, policed/100
		c.Unwanted[copp.UnwantedSYN] = policed * 2
		return daemon.Queue{Snapshot: bridge.Snapshot{Drops: map[string]uint64{}}, CoPP: c}
	}
	prev := daemon.Status{Queues: []daemon.Queue{q(100, 1000)}}
	cur := daemon.Status{Queues: []daemon.Queue{q(300, 5000)},
		Sockets: &daemon.Sockets{TCP: "on", UDP: "a raw socket of UDP (/proc/net/raw, inode 7)", TCPPorts: 3}}
	var out bytes.Buffer
	renderRates(&out, prev, cur, 2*time.Second)
	s := out.String()
	for _, want := range []string{"control 100/0/0/0", "default 100/2000/200/20", "neighbor 0/0/0/0", "policing now: default\n",
		"unwanted/s (no socket for them): udp 0 tcp_syn 4000 tcp 0", "sockets: tcp on; udp a raw socket of UDP"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

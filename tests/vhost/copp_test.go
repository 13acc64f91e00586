package vhost

import (
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/copp/copptest"
	"github.com/kbridge/kbridge/tests/harness"
	vu "github.com/kbridge/kbridge/vhost/vhostusertest"
)

// sendAll sends each frame from f's TX vring and waits until kbridge has
// taken it (the used index moved) before the next: one buffer slot.
func sendAll(t *testing.T, f *vu.Frontend, frames [][]byte) {
	t.Helper()
	used := f.Used(1)
	for _, fr := range frames {
		if err := f.SendFrame(fr); err != nil {
			t.Fatal(err)
		}
		used++
		deadline := time.Now().Add(3 * time.Second)
		for f.Used(1) != used {
			if time.Now().After(deadline) {
				t.Fatalf("kbridge did not take frame %d from the TX vring", used)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// In mode vhost the classifier and policers run in kbridge's dequeue from
// the app's TX vring: a flood of UDP datagrams to kb0's address beyond the
// default class's burst is freed there, never reaching the socket, while
// the ARP and BGP frames among it all pass; the stats name the class being
// policed.
func TestVhostPolicesAFloodWhileControlFramesPass(t *testing.T) {
	b := newBed(t, false)
	cfg, err := os.ReadFile(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, "copp:\n  default: {pps: 1, burst: 20}\n"...)
	if err := os.WriteFile(b.cfg, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	kb := b.kbridge()
	udp := listenUDP(t, dut)
	f := dial(t, b.sock)
	if _, err := f.Up(); err != nil {
		t.Fatal(err)
	}
	kb.WaitCountIn(t, "vhost-user frontend connected", 1, 10*time.Second)
	// The socket opened after kbridge started: until a reading of the
	// host's sockets begun after it is published, its datagrams are
	// class unwanted (policed at its own rate), not default. Two
	// readings on, one began after it.
	readings := func() uint64 {
		var st struct {
			Sockets *struct {
				Readings uint64 `json:"readings"`
			} `json:"sockets"`
		}
		harness.KbridgeStats(t, b.ctl, &st)
		if st.Sockets == nil {
			return 0
		}
		return st.Sockets.Readings
	}
	r0 := readings()
	harness.WaitUntil(t, "two readings of the host's sockets", 10*time.Second, func() bool { return readings() >= r0+2 })

	const flood, each = 200, 10
	var frames [][]byte
	for i := range flood {
		frames = append(frames, udpFrame("flood"))
		if i%(flood/each) == 0 {
			frames = append(frames, copptest.ARP(), copptest.BGP())
		}
	}
	sendAll(t, f, frames)
	var s struct {
		Queues []struct {
			CoPP *copp.Snapshot `json:"copp"`
		} `json:"queues"`
	}
	harness.KbridgeStats(t, b.ctl, &s)
	if len(s.Queues) != 1 || s.Queues[0].CoPP == nil {
		t.Fatalf("no copp counters in the stats: %+v", s)
	}
	c := s.Queues[0].CoPP
	if c.Passed[copp.BGP] != each || c.Passed[copp.Neighbor] != each || c.Policed[copp.BGP]+c.Policed[copp.Neighbor] != 0 {
		t.Errorf("copp counters %+v: want %d bgp and %d neighbor frames passed, none policed", *c, each, each)
	}
	if c.Passed[copp.Default]+c.Policed[copp.Default] != flood || c.Policed[copp.Default] < flood-21 {
		t.Errorf("default passed %d, policed %d of %d", c.Passed[copp.Default], c.Policed[copp.Default], flood)
	}
	if !slices.Contains(c.Policing, "default") {
		t.Errorf("stats name %q as being policed now, want default", c.Policing)
	}
	if got := len(received(udp, time.Second)); got < 20 || got > 21 {
		t.Errorf("the socket got %d of %d datagrams, want the burst of 20 (and at most a token more)", got, flood)
	}
	f.Close()
	kb.WaitCountIn(t, "vhost-user frontend gone", 1, 10*time.Second)
	kb.Stop(true)
}

// sockReadings are the stats' counters of the view of the host's sockets.
type sockReadings struct {
	Readings uint64 `json:"readings"`
	Walks    uint64 `json:"walks"`
	Idle     uint64 `json:"idle"`
}

func sockStats(t *testing.T, ctl string) sockReadings {
	t.Helper()
	var st struct {
		Sockets *sockReadings `json:"sockets"`
	}
	harness.KbridgeStats(t, ctl, &st)
	if st.Sockets == nil {
		t.Fatal("no sockets in the stats")
	}
	return *st.Sockets
}

// An idle kbridge reads the host's sockets once a second, not every
// copp.unwanted.refresh, and walks their TCP connections (the kernel's
// whole hash table) only when a frame asks for it: a segment to a port no
// socket holds, which a connection opened since the last walk would
// explain. While frames flow it reads every refresh again.
func TestVhostReadsTheHostsSocketsOnlyAsFramesAsk(t *testing.T) {
	b := newBed(t, false)
	kb := b.kbridge()
	f := dial(t, b.sock)
	if _, err := f.Up(); err != nil {
		t.Fatal(err)
	}
	kb.WaitCountIn(t, "vhost-user frontend connected", 1, 10*time.Second)
	harness.WaitUntil(t, "a first reading", 10*time.Second, func() bool { return sockStats(t, b.ctl).Readings > 0 })

	idle := 3 * time.Second
	s0 := sockStats(t, b.ctl)
	time.Sleep(idle)
	s1 := sockStats(t, b.ctl)
	t.Logf("idle for %v: %d readings, %d walks, %d refreshes skipped", idle, s1.Readings-s0.Readings, s1.Walks-s0.Walks, s1.Idle-s0.Idle)
	// Ten refreshes a second by default: 30 if every one read.
	if n := s1.Readings - s0.Readings; n > 6 {
		t.Errorf("%d readings in %v with no frame: want about one a second", n, idle)
	}
	if s1.Idle-s0.Idle < 10 {
		t.Errorf("%d refreshes skipped in %v with no frame", s1.Idle-s0.Idle, idle)
	}
	if n := s1.Walks - s0.Walks; n > 1 {
		t.Errorf("%d walks of the TCP connections in %v with no frame asking", n, idle)
	}

	// A segment (ACK) to a port no socket holds on kbridge's address.
	kbIP := netip.MustParseAddr(kbAddr)
	ack := copptest.Ethernet(nil, nil, 0x0800, copptest.To(copptest.IPv4(6, copptest.Src4, 0, copptest.TCP(443, 50000, 0x10)), kbIP))
	sendAll(t, f, [][]byte{ack})
	harness.WaitUntil(t, "a walk asked for by a segment to a closed port", 5*time.Second, func() bool {
		return sockStats(t, b.ctl).Walks > s1.Walks
	})

	// Frames every 20 ms for two seconds: a reading every refresh.
	s2 := sockStats(t, b.ctl)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		sendAll(t, f, [][]byte{udpFrame("tick")})
	}
	s3 := sockStats(t, b.ctl)
	t.Logf("frames for 2s: %d readings, %d refreshes skipped", s3.Readings-s2.Readings, s3.Idle-s2.Idle)
	if n := s3.Readings - s2.Readings; n < 8 {
		t.Errorf("%d readings in 2 s of frames: want one a refresh (100ms)", n)
	}
	f.Close()
	kb.WaitCountIn(t, "vhost-user frontend gone", 1, 10*time.Second)
	kb.Stop(true)
}

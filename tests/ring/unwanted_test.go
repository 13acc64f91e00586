package ring

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/copp/copptest"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/sockview"
	"github.com/kbridge/kbridge/tap/vnet"
)

// The test host: 198.18.0.1 (copptest's IPv4 destination), with UDP port 53
// and TCP port 22 open; frames come from its peer 198.18.0.2.
var unwantedHost = netip.MustParseAddr("198.18.0.1")

func udpToHost(dport uint16) []byte {
	return copptest.Ethernet(nil, nil, 0x0800, copptest.IPv4(17, copptest.Src4, 0, copptest.Ports(5000, dport)))
}

func publishHost(t *testing.T, udp ...uint16) {
	t.Helper()
	v := sockview.View{TCP: []uint16{22}, UDP: udp, Local: []netip.Prefix{netip.PrefixFrom(unwantedHost, 32)}}
	if err := ring.PublishSockView(v, ring.SockViewFilter{TCP: true, UDP: true}, ring.MonotonicNow()+time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ring.WithdrawSockView)
}

// In the burst core, frames no socket wants are classed unwanted and policed
// by that class's bucket, before a TAP write, while frames to an open port
// among them all pass; the counters say why each was unwanted.
func TestFramesNoSocketWantsArePolicedInTheBurstCore(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 1024})
	c := copp.DefaultConfig()
	c.Unwanted.Rate = copp.Rate{PPS: 1, Burst: 50}
	w, peer := coppWorker(t, b, c)
	publishHost(t, 53)

	const flood, each = 600, 20
	got := floodThrough(t, b, w, peer, udpToHost(9), flood, each, udpToHost(53))
	var s copp.Snapshot
	if !w.CoPP(&s) {
		t.Fatal("no CoPP counters")
	}
	if p := s.Passed[copp.Unwanted]; p < 50 || p > 52 || s.Policed[copp.Unwanted] != flood-p {
		t.Errorf("unwanted passed %d and policed %d of %d, want the burst of 50 through", p, s.Policed[copp.Unwanted], flood)
	}
	if s.Passed[copp.Default] != each || s.Unwanted[copp.UnwantedUDP] != flood {
		t.Errorf("default passed %d, want the %d to the open port; unwanted by reason %v", s.Passed[copp.Default], each, s.Unwanted)
	}
	if want := int(s.Passed[copp.Unwanted] + s.Passed[copp.Default]); got != want {
		t.Errorf("the kernel side got %d frames, the policers passed %d", got, want)
	}
}

// A port the host sends from through the TAP is wanted from that frame
// on: the reply to an outbound query is never unwanted, though no reading
// of the sockets has its socket yet.
func TestTheReplyToWhatTheHostSentIsNeverUnwanted(t *testing.T) {
	b := newBed(t, bedOpts{noStart: true, ringSize: 1024})
	c := copp.DefaultConfig()
	c.Unwanted.Rate = copp.Rate{PPS: 1, Burst: 1}
	w, peer := coppWorker(t, b, c)
	publishHost(t, 53)
	// The host's query from port 40000, as the kernel writes it to the TAP.
	query := copptest.Ethernet(nil, nil, 0x0800,
		copptest.From(copptest.To(copptest.IPv4(17, copptest.Src4, 0, copptest.Ports(40000, 53)), netip.MustParseAddr("198.18.0.9")), unwantedHost))
	if _, err := unix.Writev(peer, [][]byte{make([]byte, vnet.HdrLen), query}); err != nil {
		t.Fatal(err)
	}
	for w.FromKernel() > 0 {
	}
	b.Port.Collect(0, 8)
	replies := floodThrough(t, b, w, peer, udpToHost(40000), 100, 1)
	var s copp.Snapshot
	w.CoPP(&s)
	if replies != 100 || s.Passed[copp.Unwanted]+s.Policed[copp.Unwanted] != 0 {
		t.Errorf("%d of 100 replies to the host's port reached the kernel; unwanted passed %d, policed %d",
			replies, s.Passed[copp.Unwanted], s.Policed[copp.Unwanted])
	}
}

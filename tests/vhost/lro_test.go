package vhost

import (
	"strings"
	"testing"
	"time"

	vu "github.com/kbridge/kbridge/vhost/vhostusertest"
)

// librte_vhost flags a frame RX_LRO for any gso_type a
// frontend claims that matches its L4 (UDP for GSO_UDP), and an LRO flag
// used to lift the MTU rule: a 9000-byte UDP frame reached the 1500-MTU
// TAP. Only a TCP super-frame, written as GSO or cut into MTU frames, may
// exceed the MTU now; anything else is dropped as oversize and counted.
func TestVhostFrontendLROClaimHeldToTheMTU(t *testing.T) {
	b := newBed(t, false)
	kb := b.kbridge()
	udp := listenUDP(t, dut)
	f := dial(t, b.sock)
	features, err := f.UpWith(vu.FeatureCsum | vu.FeatureHostTSO4)
	if err != nil {
		t.Fatal(err)
	}
	if features&(vu.FeatureCsum|vu.FeatureHostTSO4) != vu.FeatureCsum|vu.FeatureHostTSO4 {
		t.Fatalf("kbridge did not offer CSUM and HOST_TSO4 (features %#x)", features)
	}
	kb.WaitLog("vhost-user frontend connected", 10*time.Second)
	oversize := func() uint64 { return b.stats().Queues[0].Drops["oversize"] }

	// Positive control: a frame under the MTU with no claim arrives.
	if err := f.SendFrameHdr(vu.NetHdr{}, udpFrame("under the MTU")); err != nil {
		t.Fatal(err)
	}
	if got := received(udp, 3*time.Second); len(got) != 1 || got[0] != "under the MTU" {
		t.Fatalf("the positive control did not arrive: %q\n%s", got, kb.Log)
	}

	jumbo := strings.Repeat("j", 9000-14-20-8)
	for _, c := range []struct {
		name string
		hdr  vu.NetHdr
	}{
		{"GSO_UDP claimed for a UDP frame (librte_vhost flags it LRO)", vu.NetHdr{GSOType: 3, GSOSize: 1472, HdrLen: 42}},
		{"GSO_TCPV4 claimed for a UDP frame", vu.NetHdr{GSOType: 1, GSOSize: 1448, HdrLen: 54}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := oversize()
			if err := f.SendFrameHdr(c.hdr, udpFrame(jumbo)); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for oversize() == before && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if got := oversize(); got != before+1 {
				t.Errorf("oversize %d -> %d, want +1", before, got)
			}
			if got := received(udp, time.Second); len(got) != 0 {
				t.Errorf("a 9000-byte UDP frame reached the 1500-MTU TAP (%d datagrams)", len(got))
			}
		})
	}

	// The device still serves.
	if err := f.SendFrameHdr(vu.NetHdr{}, udpFrame("still served")); err != nil {
		t.Fatal(err)
	}
	if got := received(udp, 3*time.Second); len(got) != 1 || got[0] != "still served" {
		t.Fatalf("after the jumbo frames: %q\n%s", got, kb.Log)
	}
	f.Close()
	kb.Stop(true)
}

package vhost

import (
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// Once the kernel refuses a GSO write, kbridge stops
// merging on that queue and writes frame by frame. Before, every later LRO
// or TSO packet of the app (over the MTU by nature) was then dropped as
// oversize: in mode vhost with HOST_TSO, bulk TCP to kb0 stopped. Now they
// are cut into MTU frames in software (split_writes).
//
// This kernel takes every GSO write kbridge makes, so the refusal comes from
// a kbridge built with -tags kbridge_testhook (tap/testhook.go), whose
// KBRIDGE_TEST_REFUSE_GSO=1 fails each GSO writev with EINVAL as such a
// kernel does. Everything else is real: the reference app's virtio-user
// port with its GRO merging the peer's frames into TSO packets, librte_vhost,
// the TAP and the kernel's TCP.
func TestVhostBulkTCPAfterRefusedGSOWrite(t *testing.T) {
	bin, err := harness.BuildKbridgeTestHook()
	if err != nil {
		t.Fatal(err)
	}
	b := newRefBed(t, false)
	kb := harness.StartSpec(t, "kbridge", harness.Spec{Env: []string{"KBRIDGE_TEST_REFUSE_GSO=1"}},
		"ip", "netns", "exec", rDut, bin, "run", "--config", b.cfg)
	kb.WaitLog("bridge running", 20*time.Second)
	app := b.refapp(false)
	app.WaitLog("kbridge-refapp: ready", 30*time.Second)
	kb.WaitLog("vhost-user frontend connected", 10*time.Second)
	ping(t, rPeer, rKbAddr)

	// The peer's bulk TCP reaches kb0 whole: the app's TSO packets, refused
	// as GSO writes, cut by kbridge.
	d := harness.BulkTCP(t, rPeer, rDut, rKbAddr, 5421, rBulkBytes)
	up := iperfP(t, rDut, rPeer, rKbAddr, 5422)
	t.Logf("after the refusal: %d MiB peer->%s in %v (hash checked); iperf3 -P %s peer->%s %s",
		rBulkBytes>>20, rIfname, d.Round(time.Millisecond), rIperfStreams, rIfname, up)

	s := b.stats()
	t.Logf("kbridge: fallbacks %d split_writes %d split_write_frames %d lro_writes %d merged_writes %d drops oversize %d tap_write_error %d",
		s.offload("fallbacks"), s.offload("split_writes"), s.offload("split_write_frames"), s.offload("lro_writes"),
		s.offload("merged_writes"), s.drops("oversize"), s.drops("tap_write_error"))
	if s.offload("fallbacks") == 0 || !strings.Contains(kb.Log.String(), "the kernel refused a coalesced write") {
		t.Fatalf("no GSO write was refused (fallbacks 0): the hook did not act, the test tested nothing\n%s", kb.Log)
	}
	if s.offload("lro_writes") != 0 {
		t.Errorf("lro_writes %d: a GSO write went through the hook", s.offload("lro_writes"))
	}
	if n, f := s.offload("split_writes"), s.offload("split_write_frames"); n == 0 || f <= n {
		t.Errorf("the app's TSO packets were not cut in software: split_writes %d, split_write_frames %d", n, f)
	}
	for _, k := range []string{"oversize", "tap_write_error", "bad_vnet_header", "malformed"} {
		if n := s.drops(k); n != 0 {
			t.Errorf("kbridge dropped %d packets as %s", n, k)
		}
	}
	kb.Stop(true)
}

package app

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// refused starts a kbridge on p and wants it to exit non-zero, before it
// claims the port, saying every one of want.
func refused(t *testing.T, p *dpdkbed.Port, want ...string) {
	t.Helper()
	k := env.NewKbridge(t, p)
	if !k.ExitedWithin(15 * time.Second) {
		t.Fatalf("kbridge serves the port:\n%s", k.Log)
	}
	out := k.Log.String()
	for _, w := range want {
		if k.ExitCode() <= 0 || !strings.Contains(out, w) {
			t.Errorf("exit %v, want a non-zero exit saying %q:\n%s", k.Err(), w, out)
		}
	}
	if got := p.Port.OwnerPID(); got != 0 {
		t.Errorf("a refused kbridge left owner pid %d", got)
	}
}

// trafficBothWays moves frames through kbridge each way, byte for byte:
// app to kernel (a burst the worker writes and gives back) and kernel to
// app (frames copied into mbufs the worker took).
func trafficBothWays(t *testing.T, p *dpdkbed.Port, k *dpdkbed.Kbridge) {
	t.Helper()
	if q, err := p.Port.Inject(0, dpdkbed.Frames(64), ringtest.InjectOpts{}); err != nil || q != 64 {
		t.Fatalf("inject: queued %d: %v", q, err)
	}
	harness.WaitUntil(t, "kbridge to move the app's frames", 5*time.Second, func() bool {
		return k.Status().ToKernelPackets >= 64
	})
	const n = 64
	k.SendSized(n, 1500)
	var got [][]byte
	harness.WaitUntil(t, fmt.Sprintf("%d frames of the kernel in the app's ring", n), 5*time.Second, func() bool {
		got = append(got, dpdkbed.OnlyTest(p.Port.Collect(0, 64))...)
		return len(got) >= n
	})
	for i, f := range got {
		if want := dpdkbed.TestFrame(1500, uint32(i)); !bytes.Equal(f, want) {
			t.Errorf("frame %d from the kernel: %d bytes, not the %d sent", i, len(f), len(want))
		}
	}
}

// kbridge never calls the app pool's mempool handlers (kbridge.h version
// 7): the pool's handler here exists in the app alone, at an index
// kbridge's handler table does not have, so a kbridge that allocated or
// freed through it would crash or refuse. It serves the port both ways,
// and the pool is whole. An app of version 6, whose mbufs kbridge
// allocates itself, is refused on that pool, naming the index.
func TestKbridgeNeverCallsTheAppsPool(t *testing.T) {
	foreign := func(n string) (*ringtest.Pool, error) { return ringtest.NewForeignPool(n, 2047) }
	t.Run("version 7: served", func(t *testing.T) {
		p := env.NewPortPool(t, foreign)
		k := env.NewKbridge(t, p)
		k.Ready()
		if out := k.Log.String(); !strings.Contains(out, `pool_handler=kbt_primary_only`) ||
			!strings.Contains(out, `mbufs="the app's, on its fresh and spent rings"`) {
			t.Errorf("kbridge did not say the app allocates, with its handler:\n%s", out)
		}
		trafficBothWays(t, p, k)
		k.Stop(true)
		p.Port.Reap(0)
		if u := p.Pool.InUse(); u != 0 {
			t.Errorf("%d mbufs in use once kbridge stopped, want 0", u)
		}
		p.Free()
		p.Pool.Audit()
	})
	t.Run("version 6: refused, naming the handler", func(t *testing.T) {
		p := env.NewPortPool(t, foreign)
		p.Port.SetCtl(6, -1, -1)
		t.Cleanup(func() { p.Port.SetCtl(7, -1, -1) })
		refused(t, p, "the app's mempool handler is not kbridge's",
			"uses mempool handler "+fmt.Sprint(ringtest.OpsIndex("kbt_primary_only"))+", and kbridge has handlers 0 to",
			"rebuild the app with kbridge.h version 7")
	})
}

// An app of kbridge.h version 6 or older has its mbufs allocated and freed
// by kbridge through the pool's handler index, which each process resolves
// in its own table. A statically linked app orders that table otherwise
// (Debian's 22.11: ring_mp_mc is 6 there, ring_mt_rts in a shared
// process), and kbridge corrupted the pool. Played here by a pool whose
// index names ring_mt_rts while its ring is multi-producer and
// multi-consumer: refused before the claim, naming the index, kbridge's
// handler there, what the ring says and what to do. With its own index
// the same app is served.
func TestVersion6PoolHandlerChecked(t *testing.T) {
	p := env.NewPort(t)
	p.Port.SetCtl(6, -1, -1)
	t.Cleanup(func() { p.Port.SetCtl(7, -1, -1) })
	rts := ringtest.OpsIndex("ring_mt_rts")
	if rts < 0 {
		t.Fatal("no ring_mt_rts handler in this DPDK")
	}
	old := p.Pool.SetOpsIndex(rts)
	refused(t, p, "the app's mempool handler is not kbridge's",
		fmt.Sprintf("uses mempool handler %d, which is ring_mt_rts in kbridge, but its ring MP_%s is multi-producer, multi-consumer (ring_mp_mc's)", rts, p.Pool.Name()),
		"rebuild the app with kbridge.h version 7")
	p.Pool.SetOpsIndex(old)

	k := env.NewKbridge(t, p)
	k.Ready()
	if out := k.Log.String(); !strings.Contains(out, "pool_handler=ring_mp_mc") {
		t.Errorf("kbridge did not name its handler of the app's pool:\n%s", out)
	}
	trafficBothWays(t, p, k)
	k.Stop(true)
}

// kbridge and the app share mbufs and rings without sharing code: a DPDK
// of the same version built with other options lays them out otherwise
// (enable_iova_as_pa=false moves rte_mbuf's next). The app records its
// layout (version 7) and kbridge refuses one that differs, naming the
// first item with both values.
func TestLayoutMismatchRefused(t *testing.T) {
	p := env.NewPort(t)
	next := p.Port.Layout(ringtest.LayoutNext)
	p.Port.SetLayout(ringtest.LayoutNext, next-8)
	t.Cleanup(func() { p.Port.SetLayout(ringtest.LayoutNext, next) })
	refused(t, p, "the app's mbuf and ring layout is not kbridge's",
		fmt.Sprintf("offsetof(struct rte_mbuf, next) is %d in the app's build, %d in kbridge's", next-8, next))
}

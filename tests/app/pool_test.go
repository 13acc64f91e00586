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

// The app's mempool is checked at attach: kbridge copies kernel-to-app
// frames into it, so a pool that is no pktmbuf pool, or whose mbufs hold
// less than 128 bytes after the headroom, is refused with a message that
// names the pool, its data room and what is needed. Under the headroom the
// room arithmetic underflowed (frames copied over the neighbouring
// objects); at it, every chunk was 0 bytes and a copy looped until the pool
// was empty. A pool just big enough serves: frames of the MTU arrive whole
// as chains of 128-byte mbufs.
func TestAppPoolChecked(t *testing.T) {
	refused := []struct {
		name string
		pool func(string) (*ringtest.Pool, error)
		want string
	}{
		{"not a pktmbuf pool", func(n string) (*ringtest.Pool, error) { return ringtest.NewPlainPool(n, 511) },
			"is not a pktmbuf pool (0 bytes of private data"},
		{"data room 64", func(n string) (*ringtest.Pool, error) { return ringtest.NewPoolRoom(n, 511, 64) },
			"has a data room of 64 bytes: after the 128-byte headroom that leaves -64, kbridge needs at least 128"},
		{"data room 128", func(n string) (*ringtest.Pool, error) { return ringtest.NewPoolRoom(n, 511, 128) },
			"has a data room of 128 bytes: after the 128-byte headroom that leaves 0"},
		{"data room 255", func(n string) (*ringtest.Pool, error) { return ringtest.NewPoolRoom(n, 511, 255) },
			"has a data room of 255 bytes: after the 128-byte headroom that leaves 127"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			p := env.NewPortPool(t, c.pool)
			k := env.NewKbridge(t, p)
			if !k.ExitedWithin(15 * time.Second) {
				t.Fatalf("kbridge serves an unfit pool:\n%s", k.Log)
			}
			out := k.Log.String()
			if k.ExitCode() <= 0 || !strings.Contains(out, "the app's mempool cannot take kbridge's frames") || !strings.Contains(out, c.want) {
				t.Errorf("exit %v, want a non-zero exit saying %q:\n%s", k.Err(), c.want, out)
			}
			if !strings.Contains(out, "mempool kbap_pool") {
				t.Errorf("the refusal does not name the pool:\n%s", out)
			}
			if got := p.Port.OwnerPID(); got != 0 {
				t.Errorf("a refused kbridge left owner pid %d", got)
			}
		})
	}
	t.Run("data room 256: 128-byte chains", func(t *testing.T) {
		p := env.NewPortPool(t, func(n string) (*ringtest.Pool, error) { return ringtest.NewPoolRoom(n, 2047, 256) })
		k := env.NewKbridge(t, p)
		k.Ready()
		const n, size = 16, 1500
		k.SendSized(n, size)
		var got [][]byte
		harness.WaitUntil(t, fmt.Sprintf("%d frames of %d bytes in the app's ring", n, size), 5*time.Second, func() bool {
			got = append(got, dpdkbed.OnlyTest(p.Port.Collect(0, 64))...)
			return len(got) >= n
		})
		for i, f := range got {
			if want := dpdkbed.TestFrame(size, uint32(i)); !bytes.Equal(f, want) {
				t.Errorf("frame %d: %d bytes, not the %d sent", i, len(f), len(want))
			}
		}
		if st := k.Status(); st.Drops["no_mbuf"] != 0 {
			t.Errorf("no_mbuf %d with a pool of 2047 mbufs", st.Drops["no_mbuf"])
		}
		k.Stop(true)
	})
}

package daemon

import (
	"errors"
	"testing"

	"github.com/kbridge/kbridge/config"
)

func TestVhostDataRoom(t *testing.T) {
	for _, tc := range []struct{ mtu, segs, want int }{
		{1500, 16, 4608}, // 64 KiB TSO in 16 segments
		{1500, 64, 2048},
		{9000, 64, 9216}, // a jumbo frame in one mbuf
	} {
		if got := vhostDataRoom(tc.mtu, tc.segs); got != tc.want {
			t.Errorf("vhostDataRoom(%d, %d) = %d, want %d", tc.mtu, tc.segs, got, tc.want)
		}
		if got := vhostDataRoom(tc.mtu, tc.segs); got*tc.segs < 1<<16+18 {
			t.Errorf("vhostDataRoom(%d, %d) = %d: a TSO packet does not fit", tc.mtu, tc.segs, got)
		}
	}
}

// A vhost kbridge hands over only the socket and interface it serves: a
// takeover asked for another is refused before anything stops.
func TestVhostHandsOverOnlyItsSocketAndInterface(t *testing.T) {
	cfg := config.Default()
	cfg.Mode = config.ModeVhost
	d := &Vhost{tapPath: &tapPath{cfg: cfg}}
	for _, ask := range [][2]string{{"/run/other.sock", cfg.Interface.Name}, {cfg.VhostSocket(), "kb9"}} {
		if _, fds, _, err := d.handOver(ask[0], ask[1]); !errors.Is(err, ErrTakeoverRefused) || fds != nil {
			t.Errorf("takeover of %v: err %v, fds %v; want ErrTakeoverRefused, none", ask, err, fds)
		}
	}
	if d.stopping.Load() {
		t.Error("a refused takeover stopped the path")
	}
}

package daemon

import "testing"

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

package daemon

import (
	"net"
	"testing"
)

// The app's MAC is taken only when an interface can have it: a PMD without
// a MAC of its own reports zeros, and a multicast address is refused by the
// kernel.
func TestUsableMAC(t *testing.T) {
	for _, c := range []struct {
		mac  string
		want bool
	}{
		{"02:00:5e:00:53:01", true},
		{"ee:ef:f2:88:3d:7a", true},
		{"00:00:00:00:00:00", false},
		{"01:00:5e:00:00:01", false},
		{"ff:ff:ff:ff:ff:ff", false},
	} {
		mac, _ := net.ParseMAC(c.mac)
		if got := usableMAC(mac); got != c.want {
			t.Errorf("usableMAC(%s) = %v, want %v", c.mac, got, c.want)
		}
	}
}

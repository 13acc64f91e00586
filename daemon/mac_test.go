package daemon

import (
	"net"
	"testing"

	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap"
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

// Each change of the interface maps to the app's request of its kind, with
// its value; a kind with no request is an error.
func TestRequestOfAChange(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:5e:00:53:01")
	for _, c := range []struct {
		in    tap.Change
		typ   ring.RequestType
		value uint32
	}{
		{tap.Change{Kind: tap.ChangeMTU, MTU: 9000}, ring.RequestMTU, 9000},
		{tap.Change{Kind: tap.ChangeLink, On: true}, ring.RequestLink, 1},
		{tap.Change{Kind: tap.ChangeLink}, ring.RequestLink, 0},
		{tap.Change{Kind: tap.ChangeMAC, MAC: mac}, ring.RequestMAC, 0},
		{tap.Change{Kind: tap.ChangePromisc, On: true}, ring.RequestPromisc, 1},
		{tap.Change{Kind: tap.ChangeAllmulti}, ring.RequestAllmulti, 0},
	} {
		r, err := request(c.in)
		if err != nil || r.Type != c.typ || r.Value != c.value || r.MAC.String() != c.in.MAC.String() {
			t.Errorf("request(%+v) = %+v, %v", c.in, r, err)
		}
	}
	if _, err := request(tap.Change{Kind: 99}); err == nil {
		t.Error("a change of no known kind made a request")
	}
}

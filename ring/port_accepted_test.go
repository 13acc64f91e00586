package ring

import (
	"net"
	"testing"
)

func TestAcceptedRoundTripsThroughOneWord(t *testing.T) {
	yes, no := true, false
	mac, _ := net.ParseMAC("02:00:c6:12:00:2a")
	for _, a := range []Accepted{
		{},
		{MAC: mac},
		{Up: &no},
		{Up: &yes, Promisc: &yes},
		{MAC: mac, Up: &no, Promisc: &no, Allmulti: &yes},
	} {
		v := a.encode()
		got := decodeAccepted(v)
		if got.MAC.String() != a.MAC.String() || !sameBool(got.Up, a.Up) ||
			!sameBool(got.Promisc, a.Promisc) || !sameBool(got.Allmulti, a.Allmulti) {
			t.Errorf("%+v encoded as %#x decodes as %+v", a, v, got)
		}
		if got.Any() != (v != 0) {
			t.Errorf("%#x: Any is %v", v, got.Any())
		}
	}
}

func TestAcceptedZeroMeansNothingRecorded(t *testing.T) {
	if a := decodeAccepted(0); a.Any() {
		t.Errorf("a fresh control block reads as %+v", a)
	}
}

func sameBool(a, b *bool) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

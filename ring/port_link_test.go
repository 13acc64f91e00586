package ring

import "testing"

func TestDecodeLink(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		want Link
		ok   bool
	}{
		{0, Link{}, false}, // never reported: the carrier stays as it is
		{100000, Link{}, false},
		{linkReported, Link{}, true}, // down, speed unknown
		{linkReported | linkUp | linkFullDuplex | 10000, Link{Up: true, SpeedMbps: 10000, FullDuplex: true}, true},
		{linkReported | linkUp | 100, Link{Up: true, SpeedMbps: 100}, true},
		{linkReported | 25000, Link{SpeedMbps: 25000}, true},
	} {
		got, ok := decodeLink(c.v)
		if got != c.want || ok != c.ok {
			t.Errorf("decodeLink(%#x) = %+v, %v; want %+v, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

package tapconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/internal/limits"
)

func TestValidateMTUBounds(t *testing.T) {
	for mtu, ok := range map[int]bool{
		limits.MinMTU - 1: false, limits.MinMTU: true, 1500: true, 9000: true,
		limits.MaxMTU: true, limits.MaxMTU + 1: false, 65521: false,
	} {
		c := DefaultConfig()
		c.MTU = mtu
		err := c.Validate("interface")
		if (err == nil) != ok {
			t.Errorf("mtu %d: %v, want ok=%v", mtu, err, ok)
		}
		var fe *conferr.FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Key != "interface.mtu" || fe.Value != mtu) {
			t.Errorf("mtu %d: %#v", mtu, fe)
		}
	}
}

// Every mistake is reported, in the order of the keys, routes' keys in full.
func TestValidateReportsAll(t *testing.T) {
	c := Config{Name: "averyveryverylongname", MTU: 40, MAC: "01:00:5e:00:00:01",
		Addresses: []string{"198.18.0.2/24", "198.18.0.3"},
		Routes:    []Route{{To: "198.18.5.0/24"}, {To: "nowhere", Via: "gw", Src: "198.18.0.2"}},
		TxQueue:   -1}
	err := c.Validate("interface")
	want := []string{
		`interface.name: "averyveryverylongname": not a name the kernel accepts for an interface: 21 bytes, more than 15`,
		`interface.mtu: 40: must be between 68 and 65444`,
		`interface.mac: "01:00:5e:00:00:01": a multicast address cannot be an interface's`,
		`interface.addresses[1]: "198.18.0.3": want an address with prefix length, like 198.18.0.2/24`,
		`interface.routes[1].to: "nowhere": want a CIDR prefix`,
		`interface.routes[1].via: "gw": not an IP address`,
		`interface.txqueuelen: -1: must not be negative`,
	}
	if err == nil || err.Error() != strings.Join(want, "; ") {
		t.Errorf("got  %v\nwant %s", err, strings.Join(want, "; "))
	}
	if !errors.Is(err, conferr.ErrInvalid) {
		t.Error("not a configuration error")
	}
	if err := DefaultConfig().Validate("interface"); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

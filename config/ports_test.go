package config

import (
	"strings"
	"testing"
)

// The port set: port with interface first, then ports[] over the
// interface section (name from the port, addresses and routes their own),
// and a discovered port's template.
func TestPortSpecs(t *testing.T) {
	c, err := load(t, `port: kb0
interface:
  mtu: 9000
  addresses: [198.18.0.2/24]
  offload: true
ports:
  - port: dpdk0.kni
  - port: vlan100
    interface: {name: v100, mtu: 1500, addresses: [198.18.1.2/24]}
`)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := c.PortSpecs()
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 3 || !c.ServesMany() {
		t.Fatalf("specs %+v", specs)
	}
	if s := specs[0]; s.Port != "kb0" || s.Interface.Name != "kb0" || len(s.Interface.Addresses) != 1 {
		t.Errorf("first %+v", s)
	}
	if s := specs[1]; s.Port != "dpdk0.kni" || s.Interface.Name != "dpdk0.kni" || s.Interface.MTU != 9000 ||
		!s.Interface.Offload || len(s.Interface.Addresses) != 0 {
		t.Errorf("second %+v: want the port's name, the section's MTU and offload, no addresses", s)
	}
	if s := specs[2]; s.Interface.Name != "v100" || s.Interface.MTU != 1500 || len(s.Interface.Addresses) != 1 {
		t.Errorf("third %+v", s)
	}
	d := c.DiscoveredSpec("x.kni")
	if d.Interface.Name != "x.kni" || d.Interface.MTU != 9000 || len(d.Interface.Addresses) != 0 || d.Interface.MAC != "" {
		t.Errorf("discovered %+v", d)
	}
	one := c.ForPort(specs[2])
	if one.Port != "vlan100" || one.Interface.Name != "v100" || one.ServesMany() {
		t.Errorf("ForPort: %+v", one)
	}
}

// discover alone serves no port of its own: port may be empty.
func TestDiscoverWithoutPort(t *testing.T) {
	c, err := load(t, "port: \"\"\ndiscover: true\n")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := c.PortSpecs()
	if err != nil || len(specs) != 0 || !c.ServesMany() {
		t.Fatalf("specs %+v, %v", specs, err)
	}
}

func TestBadPortsNameKeyAndValue(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"ports:\n  - port: a/b\n", `ports[0].port: "a/b": not a name the kernel accepts`},
		{"ports:\n  - port: averyverylongport\n", `ports[0].port: "averyverylongport": must be 1 to 15`},
		{"ports:\n  - port: kb0\n", `ports[0].port: "kb0": named twice: port serves it already`},
		{"ports:\n  - port: a\n  - port: a\n", `ports[1].port: "a": named twice: ports[0] serves it already`},
		{"ports:\n  - port: a\n    interface: {name: kb0}\n", `ports[0].interface.name: "kb0": is port's interface too`},
		{"ports:\n  - port: a\n    interface: {mtu: 40}\n", "ports[0].interface.mtu: 40"},
		{"ports:\n  - port: a\n    interface: {mtu: big}\n", "ports[0].interface.mtu"},
		{"ports:\n  - port: a\n    interface: {colour: blue}\n", "ports[0].interface.colour: unknown key"},
		{"ports:\n  - port: a\n    colour: blue\n", "ports[0].colour: unknown key"},
		{"ports:\n  - port: a\n    interface: {addresses: 198.18.0.2/24}\n", "ports[0].interface.addresses: \"198.18.0.2/24\": must be a list"},
		{"ports: kb1\n", `ports: "kb1": must be a list`},
		{"discover: yes please\n", "discover"},
		{"port: \"\"\n", `port: "": must be 1 to 15 characters, the name given to kbridge_port_create() (empty only with discover: true)`},
		{"mode: vhost\ndiscover: true\n", "discover: true: serves several ports of an app in mode ring only"},
	} {
		_, err := load(t, c.yaml)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to mention %q", c.yaml, err, c.want)
		}
	}
}

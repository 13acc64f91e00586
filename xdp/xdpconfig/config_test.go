package xdpconfig

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-viper/mapstructure/v2"
	"go.yaml.in/yaml/v3"

	"github.com/kbridge/kbridge/internal/conferr"
)

func TestValidateAcceptsMinimal(t *testing.T) {
	if err := (Config{NIC: "eth0"}).Validate(); err != nil {
		t.Fatal(err)
	}
	c := Config{NIC: "eth0"}.WithDefaults()
	want := Config{NIC: "eth0", Exception: "kb0", ExceptionPeer: "kb0-x", Mode: ModeAuto, Loader: LoaderKbridge,
		XSKFallback: FallbackException, NAPI: NAPIGRO, PinPath: "/sys/fs/bpf/kbridge/eth0", Logger: c.Logger}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	p := Config{NIC: "eth0", Loader: LoaderPMD}.WithDefaults()
	if p.PinPath != "/sys/fs/bpf" || p.ObjectFile != "/run/kbridge/xdp-eth0.o" {
		t.Errorf("pmd defaults: pin_path %q object_file %q", p.PinPath, p.ObjectFile)
	}
}

func TestValidateAcceptsFullRules(t *testing.T) {
	c := Config{NIC: "eth0", FastPath: []Rule{
		{Proto: "udp", Ports: "4789"},
		{Proto: "TCP", Ports: "5000-5010", Dst: "198.18.0.0/15"},
		{Dst: "198.18.0.2"},
		{Dst: "fe80::/64", Proto: "udp"},
		{DstMAC: "02:00:00:00:00:01"},
		{Proto: "udp"},
	}, MAC: "02:00:00:00:00:02", MTU: 1500, Addresses: []string{"198.18.0.2/24"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Each bad value is refused with a message naming the field and the value.
func TestValidateRefuses(t *testing.T) {
	rule := func(r Rule) Config { return Config{NIC: "eth0", FastPath: []Rule{{Proto: "udp", Ports: "1"}, r}} }
	// Numbers print bare and strings quoted, as in every section of
	// kbridge's configuration.
	cases := []struct {
		cfg  Config
		want string
	}{
		{rule(Rule{Proto: "tcp", Ports: "70000-80"}), `xdp.fast_path[1].ports: "70000-80": port out of range 1-65535`},
		{rule(Rule{Proto: "tcp", Ports: "0"}), `xdp.fast_path[1].ports: "0": port out of range 1-65535`},
		{rule(Rule{Proto: "tcp", Ports: "90-80"}), `xdp.fast_path[1].ports: "90-80": range is reversed: 90 > 80`},
		{rule(Rule{Proto: "tcp", Ports: "http"}), `xdp.fast_path[1].ports: "http": not a port or port range like 5000-5010`},
		{rule(Rule{Ports: "80"}), `xdp.fast_path[1].ports: "80": ports need proto: tcp or udp`},
		{rule(Rule{Port: 80}), `xdp.fast_path[1].port: 80: port needs proto: tcp or udp`},
		{rule(Rule{Proto: "udp", Port: 70000}), `xdp.fast_path[1].port: 70000: port out of range 1-65535`},
		{rule(Rule{Proto: "udp", Port: 80, Ports: "81"}), `xdp.fast_path[1].port: 80: set port or ports, not both`},
		{rule(Rule{Proto: "icmp"}), `xdp.fast_path[1].proto: "icmp": must be tcp or udp`},
		{rule(Rule{Dst: "198.18.0.5/24"}), `xdp.fast_path[1].dst: "198.18.0.5/24": host bits set; did you mean 198.18.0.0/24?`},
		{rule(Rule{Dst: "198.18.0.300"}), `xdp.fast_path[1].dst: "198.18.0.300": not an IPv4 or IPv6 address or prefix`},
		{rule(Rule{DstMAC: "02:00:00:00:00"}), `xdp.fast_path[1].dst_mac: "02:00:00:00:00": not a 48-bit MAC address`},
		{rule(Rule{}), `xdp.fast_path[1]: empty rule would match every frame: set proto, port(s), dst or dst_mac`},
		{Config{}, `xdp.nic: required`},
		{Config{NIC: "a-very-long-nic-name"}, `xdp.nic: "a-very-long-nic-name": not a name the kernel accepts for an interface: 20 bytes, more than 15`},
		{Config{NIC: "eth0", Exception: "eth0"}, `xdp.nic: "eth0": must differ from exception and exception_peer`},
		{Config{NIC: "eth0", Mode: "fast"}, `xdp.mode: "fast": must be one of auto, native, generic`},
		{Config{NIC: "eth0", Loader: "libxdp"}, `xdp.loader: "libxdp": must be one of kbridge, pmd`},
		{Config{NIC: "eth0", XSKFallback: "kernel"}, `xdp.xsk_fallback: "kernel": must be one of exception, drop, pass`},
		{Config{NIC: "eth0", NAPI: "threaded"}, `xdp.napi: "threaded": must be one of gro, xdp`},
		{Config{NIC: "eth0", PinPath: "bpf/kbridge"}, `xdp.pin_path: "bpf/kbridge": must be a clean absolute path on a bpf filesystem`},
		{Config{NIC: "eth0", Loader: LoaderPMD, PinPath: "/sys/fs/bpf/kbridge"}, `xdp.pin_path: "/sys/fs/bpf/kbridge": with loader pmd it must be /sys/fs/bpf: DPDK 22.11's libbpf looks for maps pinned by name only there`},
		{Config{NIC: "eth0", MAC: "01:00:5e:00:00:01"}, `xdp.mac: "01:00:5e:00:00:01": multicast MAC cannot be an interface address`},
		{Config{NIC: "eth0", MTU: 40}, `xdp.mtu: 40: out of range 68-65535 (0 means the NIC's MTU)`},
		{Config{NIC: "eth0", Addresses: []string{"198.18.0.2"}}, `xdp.addresses[0]: "198.18.0.2": not an address with prefix length, e.g. 198.18.0.2/24`},
		{Config{NIC: "eth0", FastPath: make([]Rule, MaxRules+1)}, `xdp.fast_path: "65 rules": at most 64 rules`},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if err == nil {
			t.Errorf("accepted; want %s", c.want)
			continue
		}
		if !errors.Is(err, conferr.ErrInvalid) {
			t.Errorf("%v: not a configuration error", err)
		}
		var fe *conferr.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%v: not a *conferr.FieldError", err)
		} else if !strings.HasPrefix(c.want, fe.Key+": ") {
			t.Errorf("%v: first key %q", err, fe.Key)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("got  %s\nwant %s", err, c.want)
		}
	}
}

// All problems are reported at once, not one per run.
func TestValidateReportsAll(t *testing.T) {
	err := Config{NIC: "eth0", Mode: "x", FastPath: []Rule{{Proto: "sctp"}}}.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	const want = `xdp.mode: "x": must be one of auto, native, generic; xdp.fast_path[0].proto: "sctp": must be tcp or udp`
	if err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// The YAML keys documented in docs/XDP.md decode into Config.
func TestConfigYAML(t *testing.T) {
	const doc = `
nic: ens1f0
exception: kb0
exception_peer: kb0-x
mode: native
loader: kbridge
pin_path: /sys/fs/bpf/kbridge/ens1f0
mac: "02:00:00:00:00:02"
mtu: 1500
addresses: [198.18.0.2/24]
promisc: false
napi: gro
xsk_fallback: drop
fast_path:
  - {proto: udp, port: 4789}
  - {proto: tcp, ports: 5000-5010, dst: 198.18.0.2}
  - {dst_mac: "02:00:00:00:00:42"}
`
	check := func(how string, c Config) {
		t.Helper()
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if c.NIC != "ens1f0" || c.Mode != ModeNative || c.XSKFallback != FallbackDrop || len(c.FastPath) != 3 ||
			c.FastPath[0].Port != 4789 || c.FastPath[1].Ports != "5000-5010" || c.FastPath[1].Dst != "198.18.0.2" ||
			c.FastPath[2].DstMAC == "" || c.MTU != 1500 || c.Addresses[0] != "198.18.0.2/24" {
			t.Errorf("%s: decoded %+v", how, c)
		}
	}

	var c Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	check("yaml", c)

	// kbridge's config package decodes through viper: mapstructure, strict
	// types, unknown keys refused.
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(doc), &raw); err != nil {
		t.Fatal(err)
	}
	var m Config
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{Result: &m, ErrorUnused: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(raw); err != nil {
		t.Fatalf("mapstructure: %v", err)
	}
	check("mapstructure", m)
}

package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/copp"
)

func TestTheCoPPSectionDecodesEveryKey(t *testing.T) {
	c, err := load(t, `
copp:
  enabled: true
  control: {pps: 8000, burst: 4000}
  neighbor: {pps: 0}
  management:
    pps: 100
    burst: 10
    bytes: 1000000
    burst_bytes: 65536
    ports: [22, 830]
    ethertypes: [0x88b5]
    protocols: [47]
    sources: [198.18.0.0/24, "2001:db8::/32"]
  default: {pps: 1000, burst: 2000}
  management_syn: {pps: 50, burst: 20}
  bgp: {pps: 3000, burst: 300}
  bfd: {pps: 2000, burst: 200}
  link: {pps: 100, burst: 10}
  unwanted: {pps: 0, enabled: false, refresh: 250ms}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := copp.Config{
		Enabled:  true,
		Control:  copp.Rate{PPS: 8000, Burst: 4000},
		Neighbor: copp.Rate{Burst: 600},
		Management: copp.ManagementClass{
			Rate:       copp.Rate{PPS: 100, Burst: 10, Bytes: 1_000_000, BurstBytes: 65536},
			Ports:      []int{22, 830},
			Ethertypes: []int{0x88b5},
			Protocols:  []int{47},
			Sources:    []string{"198.18.0.0/24", "2001:db8::/32"},
		},
		Default:       copp.Rate{PPS: 1000, Burst: 2000},
		ManagementSYN: copp.Rate{PPS: 50, Burst: 20},
		BGP:           copp.Rate{PPS: 3000, Burst: 300},
		BFD:           copp.Rate{PPS: 2000, Burst: 200},
		Link:          copp.Rate{PPS: 100, Burst: 10},
		Unwanted:      copp.UnwantedClass{Rate: copp.Rate{Burst: 100}, Refresh: 250 * time.Millisecond},
	}
	if !reflect.DeepEqual(c.CoPP, want) {
		t.Errorf("copp = %+v\nwant %+v", c.CoPP, want)
	}
	for _, k := range []string{"copp.enabled", "copp.control.pps", "copp.management.burst_bytes", "copp.management.sources", "copp.default.bytes", "copp.management_syn.pps",
		"copp.bgp.pps", "copp.bfd.burst", "copp.link.bytes", "copp.unwanted.enabled", "copp.unwanted.refresh", "copp.unwanted.pps"} {
		if !strings.Contains(strings.Join(Keys(), " "), k) {
			t.Errorf("Keys() lacks %s", k)
		}
	}
}

// Out of the box the section is on and polices only what a host's bulk
// traffic never is: the control plane's classes (each its own bucket) and
// neighbour frames at SONiC's rates, SSH as management, the management
// ports' connection openings at 100 a second, frames no socket wants at 100
// a second, management and default unlimited; mode xdp, which does not use
// it, takes the same defaults.
func TestCoPPIsOnByDefaultPolicingOnlyWhatBulkTrafficNeverIs(t *testing.T) {
	c, err := load(t, "")
	if err != nil {
		t.Fatal(err)
	}
	want := copp.Config{
		Enabled:       true,
		Control:       copp.Rate{PPS: 6000, Burst: 6000},
		Neighbor:      copp.Rate{PPS: 600, Burst: 600},
		Management:    copp.ManagementClass{Ports: []int{22}},
		ManagementSYN: copp.Rate{PPS: 100, Burst: 100},
		BGP:           copp.Rate{PPS: 6000, Burst: 6000},
		BFD:           copp.Rate{PPS: 6000, Burst: 6000},
		Link:          copp.Rate{PPS: 6000, Burst: 6000},
		Unwanted:      copp.UnwantedClass{Rate: copp.Rate{PPS: 100, Burst: 100}, Enabled: true, Refresh: 100 * time.Millisecond},
	}
	if !reflect.DeepEqual(c.CoPP, want) {
		t.Errorf("copp = %+v\nwant %+v", c.CoPP, want)
	}
	if _, err := load(t, "mode: xdp\nxdp: {nic: eth0}\n"); err != nil {
		t.Errorf("mode xdp with the copp defaults: %v", err)
	}
}

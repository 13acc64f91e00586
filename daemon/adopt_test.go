package daemon

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kbridge/kbridge/tap"
)

// `kbridge stats` says where an adopted interface came from and the
// backlog its queues delivered, in one line an operator reads.
func TestAdoptedLineSaysWhereFromAndTheBacklog(t *testing.T) {
	at := tap.Adopted{From: 4242, Index: 17}
	for _, tc := range []struct {
		a    Adopted
		want string
	}{
		{Adopted{Adopted: at, How: HowHanded, Backlog: 12, Drained: true},
			"adopted kb0 (ifindex 17) from pid 4242 (handed over); backlog delivered: 12 frames"},
		{Adopted{Adopted: at, How: HowStored, Backlog: 50, Drained: true},
			"adopted kb0 (ifindex 17) from the fd store (last served by pid 4242); backlog delivered: 50 frames"},
		{Adopted{Adopted: at, How: HowPersistent},
			"adopted kb0 (ifindex 17) left persistent by pid 4242; backlog delivered so far: 0 frames"},
	} {
		if got := tc.a.Line("kb0"); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.a.How, got, tc.want)
		}
	}
}

// The adoption reaches Prometheus as an info gauge (how, from which pid)
// and the backlog as a counter; a kbridge that made its interface exports
// neither.
func TestCollectorExportsTheAdoption(t *testing.T) {
	gather := func(st Status) map[string]string {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(newCollector(fakeStatus(st)))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if !strings.Contains(mf.GetName(), "adopt") {
					continue
				}
				key := mf.GetName()
				for _, l := range m.GetLabel() {
					key += fmt.Sprintf(",%s=%s", l.GetName(), l.GetValue())
				}
				got[key] = fmt.Sprint(m.GetGauge().GetValue() + m.GetCounter().GetValue())
			}
		}
		return got
	}
	got := gather(Status{Adopted: &Adopted{Adopted: tap.Adopted{From: 4242}, How: HowStored, Backlog: 50}})
	want := map[string]string{
		"kbridge_interface_adopted,how=fd_store": "1",
		"kbridge_adopted_backlog_frames_total":   "50",
	}
	if !maps.Equal(got, want) {
		t.Errorf("exported %v, want %v", got, want)
	}
	if got := gather(Status{}); len(got) != 0 {
		t.Errorf("a made interface exports %v", got)
	}
}

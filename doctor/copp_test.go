package doctor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/doctor"
	"github.com/kbridge/kbridge/doctor/doctortest"
)

// coppResults runs doctor with reader r (and an empty root, so that the
// other checks find nothing) and returns the copp check's results.
func coppResults(t *testing.T, r doctor.CoPPReader, rates [copp.NumClasses]copp.Rate) []doctor.Result {
	t.Helper()
	opts := doctor.Options{Root: t.TempDir(), CoPPRates: rates, CoPPWindow: 10 * time.Millisecond}
	if r != nil {
		opts.CoPP = r
	}
	var out []doctor.Result
	for _, res := range doctor.Run(context.Background(), opts) {
		if res.Check == doctor.CheckCoPP {
			out = append(out, res)
		}
	}
	return out
}

func TestTheCoPPCheckNamesEachClassWhosePolicedCounterGrewWithItsRateAndKey(t *testing.T) {
	var before, after [copp.NumClasses]uint64
	before[copp.Default], after[copp.Default] = 1000, 1000+2000 // 2000 in 10 ms
	before[copp.ManagementSYN], after[copp.ManagementSYN] = 7, 9
	before[copp.Control], after[copp.Control] = 50, 50
	rates := copp.DefaultConfig().Rates()
	rates[copp.Default] = copp.Rate{PPS: 1000, Burst: 1000}
	got := coppResults(t, &doctortest.FakeCoPP{Readings: [][copp.NumClasses]uint64{before, after}}, rates)
	if len(got) != 2 {
		t.Fatalf("got %d results, want one per class policed (default, management_syn): %+v", len(got), got)
	}
	want := []string{
		"class default is being policed now: 200000 frames/s freed over 10ms, rate 1000 pps (copp.default.pps)",
		"class management_syn is being policed now: 200 frames/s freed over 10ms, rate 100 pps (copp.management_syn.pps)",
	}
	for i, r := range got {
		if r.Status != doctor.Warn || r.Evidence != want[i] || !strings.Contains(r.Fix, "copp."+strings.Fields(want[i])[1]) {
			t.Errorf("result %d: %s %q fix %q, want warn %q", i, r.Status, r.Evidence, r.Fix, want[i])
		}
	}
}

func TestTheCoPPCheckPassesQuietlyWhenNoClassIsPoliced(t *testing.T) {
	var a, b [copp.NumClasses]uint64
	a[copp.Default], b[copp.Default] = 10, 3 // a restart between the readings zeroed it
	got := coppResults(t, &doctortest.FakeCoPP{Readings: [][copp.NumClasses]uint64{a, b}}, copp.DefaultConfig().Rates())
	if len(got) != 1 || got[0].Status != doctor.Pass || got[0].Evidence != "no class policed over 10ms" {
		t.Errorf("got %+v, want one pass saying no class is policed", got)
	}
}

func TestTheCoPPCheckSkipsWithoutAPolicingKbridgeAndWarnsOnOtherErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		r    doctor.CoPPReader
		want doctor.Status
		ev   string
	}{
		{"no reader", nil, doctor.Skip, "no running kbridge"},
		{"no instance", &doctortest.FakeCoPP{Err: fmt.Errorf("%w on /run/kbridge.sock", doctor.ErrNoInstance)}, doctor.Skip, "no kbridge answers on /run/kbridge.sock"},
		{"copp off", &doctortest.FakeCoPP{Err: doctor.ErrCoPPOff}, doctor.Skip, "copp is off"},
		{"bad status", &doctortest.FakeCoPP{Err: errors.New("status: unexpected EOF")}, doctor.Warn, "cannot read the policed counters: status: unexpected EOF"},
	} {
		got := coppResults(t, c.r, copp.DefaultConfig().Rates())
		if len(got) != 1 || got[0].Status != c.want || !strings.Contains(got[0].Evidence, c.ev) {
			t.Errorf("%s: got %+v, want %s with %q", c.name, got, c.want, c.ev)
		}
	}
}

func TestTheCoPPCheckNamesByteRatesAndAClassTheConfigurationLeavesUnlimited(t *testing.T) {
	var a, b [copp.NumClasses]uint64
	b[copp.Management], b[copp.Neighbor] = 1, 1
	rates := copp.DefaultConfig().Rates()
	rates[copp.Neighbor] = copp.Rate{PPS: 600, Burst: 600, Bytes: 100000, BurstBytes: copp.MinBurstBytes}
	got := coppResults(t, &doctortest.FakeCoPP{Readings: [][copp.NumClasses]uint64{a, b}}, rates)
	if len(got) != 2 {
		t.Fatalf("got %+v, want two results", got)
	}
	if ev := got[0].Evidence; !strings.HasSuffix(ev, "rate 600 pps (copp.neighbor.pps), 100000 bytes/s (copp.neighbor.bytes)") {
		t.Errorf("neighbour: %q", ev)
	}
	if ev := got[1].Evidence; !strings.HasSuffix(ev, "rate unlimited in the configuration read (copp.management)") {
		t.Errorf("management: %q", ev)
	}
}

package doctor_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/kbridge/kbridge/doctor"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/render")

// sample covers every status, a wrapped evidence, a wrapped fix, a result
// without fix and a word longer than the evidence column.
var sample = []doctor.Result{
	{Check: doctor.CheckENAWC, Status: doctor.Fail,
		Evidence: "ENA 0000:00:06.0 (device 0xec20, vfio-pci), BAR2 0xfe800000-0xfe8fffff prefetchable; /sys/kernel/debug/x86/pat_memtype_list: PAT: [mem 0x00000000fe800000-0x00000000fe900000] uncached-minus",
		Fix:      "use a vfio-pci built with the ENA WC patch for this exact kernel, or igb_uio wc_activate=1"},
	{Check: doctor.CheckKernelTimer, Status: doctor.Pass, Evidence: "/proc/config.gz: CONFIG_HZ=250; policy mode adaptive"},
	{Check: doctor.CheckCPUIsolation, Status: doctor.Warn, Evidence: "worker CPUs 0: CPU 0 is not isolated",
		Fix: "boot with isolcpus=0 nohz_full=0 rcu_nocbs=0"},
	{Check: doctor.CheckXDP, Status: doctor.Skip, Evidence: "kernel-side interface kb0 does not exist\t(kbridge not running?)"},
	{Check: doctor.CheckHugepages, Status: doctor.Pass,
		Evidence: "/a/very/long/path/that/does/not/fit/in/the/evidence/column/of/the/table/at/all/nr_hugepages=512"},
}

func TestRenderTable(t *testing.T) {
	var b bytes.Buffer
	if err := doctor.Render(&b, sample, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "table.golden", b.Bytes())
}

func TestRenderJSON(t *testing.T) {
	var b bytes.Buffer
	if err := doctor.Render(&b, sample, true); err != nil {
		t.Fatal(err)
	}
	golden(t, "json.golden", b.Bytes())

	// The document reads back into the same results.
	var rep doctor.Report
	if err := json.Unmarshal(b.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(sample) || rep.ExitCode != 1 || rep.Summary["pass"] != 2 || rep.Summary["skip"] != 1 {
		t.Fatalf("round trip: %+v", rep)
	}
	for i := range sample {
		if rep.Results[i] != sample[i] {
			t.Errorf("result %d: %+v, want %+v", i, rep.Results[i], sample[i])
		}
	}
}

func TestRenderEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := doctor.Render(&b, nil, true); err != nil {
		t.Fatal(err)
	}
	var rep doctor.Report
	if err := json.Unmarshal(b.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Results == nil || len(rep.Results) != 0 || rep.ExitCode != 0 {
		t.Errorf("empty report %s", b.String())
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		statuses []doctor.Status
		want     int
	}{
		{nil, 0},
		{[]doctor.Status{doctor.Pass, doctor.Skip}, 0},
		{[]doctor.Status{doctor.Pass, doctor.Warn}, 0},
		{[]doctor.Status{doctor.Warn, doctor.Fail, doctor.Pass}, 1},
	} {
		var rs []doctor.Result
		for _, s := range tc.statuses {
			rs = append(rs, doctor.Result{Check: "x", Status: s})
		}
		if got := doctor.ExitCode(rs); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.statuses, got, tc.want)
		}
	}
}

func TestStatusText(t *testing.T) {
	for _, s := range []doctor.Status{doctor.Pass, doctor.Warn, doctor.Fail, doctor.Skip} {
		b, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back doctor.Status
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%v: round trip %v, %v", s, back, err)
		}
	}
	if _, err := doctor.Status(9).MarshalText(); err == nil {
		t.Error("status 9 marshalled")
	}
	var s doctor.Status
	if err := s.UnmarshalText([]byte("meh")); err == nil {
		t.Error(`"meh" unmarshalled`)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "render", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Render -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs; got:\n%s\nwant:\n%s", name, got, want)
	}
}

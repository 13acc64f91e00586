package vhost

import (
	"slices"
	"testing"
)

func TestFeatureNames(t *testing.T) {
	f := uint64(1<<FeatCSUM | 1<<FeatHostTSO4 | 1<<FeatVersion1 | 1<<40)
	got := FeatureNames(f)
	want := []string{"CSUM", "HOST_TSO4", "VERSION_1", "bit40"}
	if !slices.Equal(got, want) {
		t.Fatalf("FeatureNames = %v, want %v", got, want)
	}
	o := OffloadsOf(f)
	if !o.AppCsum || !o.AppTSO || o.KernelCsum || o.KernelTSO4 || o.Mergeable {
		t.Fatalf("OffloadsOf = %+v", o)
	}
}

func TestEALArgs(t *testing.T) {
	a := EALArgs(EALConfig{CPU: 3, Args: []string{"--log-level=vhost,8"}})
	for _, w := range []string{"--proc-type=primary", "--no-pci", "--lcores=0@3", "--in-memory", "--log-level=vhost,8"} {
		if !slices.Contains(a, w) {
			t.Errorf("EALArgs = %v: no %s", a, w)
		}
	}
	a = EALArgs(EALConfig{Args: []string{"--file-prefix=kbvh"}})
	if slices.Contains(a, "--in-memory") {
		t.Errorf("EALArgs = %v: --in-memory beside an explicit --file-prefix", a)
	}
}

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

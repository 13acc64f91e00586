package ring

import "testing"

// BenchmarkStepCgoCrossing is one cgo call to a C function that returns a
// constant (kb_rte_version): what each crossing into the burst core costs
// before the core does anything. The worker makes one per burst each way,
// two per park (PrepareToPark, Unpark). docs/BENCHMARKS.md says how the
// steps add up.
func BenchmarkStepCgoCrossing(b *testing.B) {
	var v Version
	for b.Loop() {
		v = BuiltWith()
	}
	if v == 0 {
		b.Fatal("no version")
	}
}

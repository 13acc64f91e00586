package ring

import (
	"slices"
	"testing"
)

func TestVhostEALArgs(t *testing.T) {
	a := VhostEALArgs(VhostEALConfig{CPU: 3, Args: []string{"--log-level=vhost,8"}})
	for _, w := range []string{"--proc-type=primary", "--no-pci", "--lcores=0@3", "--in-memory", "--log-level=vhost,8"} {
		if !slices.Contains(a, w) {
			t.Errorf("VhostEALArgs = %v: no %s", a, w)
		}
	}
	a = VhostEALArgs(VhostEALConfig{Args: []string{"--file-prefix=kbvh"}})
	if slices.Contains(a, "--in-memory") {
		t.Errorf("VhostEALArgs = %v: --in-memory beside an explicit --file-prefix", a)
	}
}

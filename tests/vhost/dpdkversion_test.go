package vhost

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

var dpdkVersion struct {
	once         sync.Once
	major, minor int
	err          error
}

// dpdkAtLeast reports whether the DPDK kbridge is built against here (the
// one pkg-config finds, as for the test's go build) is year.month or later:
// some refusals moved from kbridge into librte_vhost (docs/DPDK.md).
func dpdkAtLeast(t *testing.T, year, month int) bool {
	t.Helper()
	dpdkVersion.once.Do(func() {
		out, err := exec.Command("pkg-config", "--modversion", "libdpdk").Output()
		if err == nil {
			_, err = fmt.Sscanf(strings.TrimSpace(string(out)), "%d.%d", &dpdkVersion.major, &dpdkVersion.minor)
		}
		dpdkVersion.err = err
	})
	if dpdkVersion.err != nil {
		t.Fatalf("pkg-config --modversion libdpdk: %v", dpdkVersion.err)
	}
	return dpdkVersion.major > year || dpdkVersion.major == year && dpdkVersion.minor >= month
}

package tap

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tap/taptest"
)

// TestMain lets this test binary, started again, be taptest's attacker.
func TestMain(m *testing.M) {
	taptest.Main()
	os.Exit(m.Run())
}

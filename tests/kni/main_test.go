package kni

import (
	"os"
	"testing"

	"github.com/kbridge/kbridge/tests/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

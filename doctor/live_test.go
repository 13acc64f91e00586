package doctor

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/internal/cpulist"
)

// TestLiveHost runs every check against this machine (Root "/") and
// prints the table. It asserts nothing about the host: it proves the
// checks run against real /proc and /sys without erroring out. Opt in
// with KBRIDGE_DOCTOR_LIVE=1; KBRIDGE_DOCTOR_NIC, _LCORES, _WORKERS,
// _MODE and _INTERVAL shape the options.
func TestLiveHost(t *testing.T) {
	if os.Getenv("KBRIDGE_DOCTOR_LIVE") == "" {
		t.Skip("set KBRIDGE_DOCTOR_LIVE=1 to run doctor against this host")
	}
	opts := Options{
		Root:       "/",
		Interface:  "kb0",
		NIC:        os.Getenv("KBRIDGE_DOCTOR_NIC"),
		AppLcores:  envCPUs(t, "KBRIDGE_DOCTOR_LCORES"),
		WorkerCPUs: envCPUs(t, "KBRIDGE_DOCTOR_WORKERS"),
		PolicyMode: os.Getenv("KBRIDGE_DOCTOR_MODE"),
		// The probe too: this test is opt-in and measures the live host.
		WakeupProbe: DefaultWakeupProbe,
	}
	if v := os.Getenv("KBRIDGE_DOCTOR_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		opts.FixedInterval = d
	}
	res := Run(context.Background(), opts)
	var b strings.Builder
	if err := Render(&b, res, os.Getenv("KBRIDGE_DOCTOR_JSON") != ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("exit code %d\n%s", ExitCode(res), b.String())
	if plan, err := PlanIRQ(opts); err != nil {
		t.Logf("PlanIRQ: %v", err)
	} else {
		t.Logf("PlanIRQ: %v", plan)
	}
}

func envCPUs(t *testing.T, name string) []int {
	v := os.Getenv(name)
	if v == "" {
		return nil
	}
	cpus, err := cpulist.Parse(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return cpus
}

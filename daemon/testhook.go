//go:build kbridge_testhook

package daemon

import (
	"log/slog"
	"os"
	"time"
)

// In a kbridge built with -tags kbridge_testhook (tests only; see
// tests/restart/handover_test.go), KBRIDGE_TEST_HOLD_CONFIRM holds a
// successor between adopting the interface and confirming the takeover,
// for that long (a duration) or forever (anything else), as a slow, hung
// or killed successor would be; KBRIDGE_TEST_CONFIRM_WITHIN (a duration)
// is how long the old kbridge waits for the confirmation. A product build
// has neither.
func init() {
	if v := os.Getenv("KBRIDGE_TEST_HOLD_CONFIRM"); v != "" {
		d, err := time.ParseDuration(v)
		beforeConfirm = func(log *slog.Logger) {
			log.Warn("test hook: holding the takeover before confirming it", "for", v)
			if err != nil || d <= 0 {
				select {}
			}
			time.Sleep(d)
		}
	}
	if d, err := time.ParseDuration(os.Getenv("KBRIDGE_TEST_CONFIRM_WITHIN")); err == nil && d > 0 {
		confirmWithin = d
	}
}

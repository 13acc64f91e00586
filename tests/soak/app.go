package main

// The DPDK app the soak runs kbridge beside: in mode ring the reference app
// (kbridge.h, kbridge a DPDK secondary of it), in mode vhost an unmodified
// dpdk-testpmd whose virtio-user port is kbridge's vhost-user frontend.

import (
	"fmt"
	"os"
	"strings"
)

// appSide is what differs between the modes.
type appSide struct {
	mode string // SOAK_MODE: ring or vhost
	// name is the app's pid and log file under /run/kbt (up.sh's names).
	name string
	// config is the bed's kbridge configuration for the mode.
	config string
	// kbridgeFollows: in mode ring kbridge exits with the app (by design)
	// and is started after it; in mode vhost kbridge serves on, waits for
	// the next frontend, and its own pool spans the app's restart.
	kbridgeFollows bool
	// pool says what the drift column counts.
	pool string
}

var appSides = map[string]appSide{
	"ring": {mode: "ring", name: "refapp", config: "tests/testbed/kbridge.yaml", kbridgeFollows: true,
		pool: "the app's (pool_in_use - in_rings) from SIGUSR1 after a quiet moment, minus the baseline (at the start, and again after the app restart: a new pool)"},
	"vhost": {mode: "vhost", name: "testpmd-vhost", config: "tests/testbed/kbridge-vhost.yaml",
		pool: "kbridge's own mbuf pool (`pool_in_use` of `kbridge stats`; mode vhost copies the app's frames into it) after a quiet moment, minus the baseline taken at the start: kbridge serves on across the app's restart, so one baseline spans the run"},
}

// appSideFor reads SOAK_MODE (default ring).
func appSideFor(mode string) (appSide, error) {
	if mode == "" {
		mode = "ring"
	}
	a, ok := appSides[mode]
	if !ok {
		return appSide{}, fmt.Errorf("SOAK_MODE=%q: must be ring or vhost", mode)
	}
	return a, nil
}

// baseConfig is the bed's configuration for the mode as the soak runs it.
// Mode vhost is made restartable as docs/VHOST.md says: kbridge the
// client (vhost.client: true), testpmd's port the server (up.sh gives it
// server=1 when the configuration says so). With kbridge the server, a
// restarted kbridge would leave testpmd's port down for good.
func (a appSide) baseConfig(root string) (string, error) {
	b, err := os.ReadFile(root + "/" + a.config)
	if err != nil {
		return "", err
	}
	cfg := string(b)
	if a.mode == "vhost" {
		if !strings.Contains(cfg, "  client: false\n") {
			return "", fmt.Errorf("%s: no \"  client: false\" line to make kbridge the vhost-user client", a.config)
		}
		cfg = strings.Replace(cfg, "  client: false\n", "  client: true\n", 1)
	}
	return cfg, nil
}

// poolOwner names the pool the drift counts, for a failure.
func (a appSide) poolOwner() string {
	if a.mode == "vhost" {
		return "kbridge's pool"
	}
	return "the app's pool (beyond the mbufs in the rings)"
}

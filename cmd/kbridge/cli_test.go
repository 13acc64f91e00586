package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/daemon"
)

// The command line follows what users expect of a Go daemon's: --help on
// stdout with exit 0 and double-dash flags shown as such; a word left
// over, an unknown flag or command refused with exit 2 and said why; a
// duration without a unit refused naming the unit; flags after others.
func TestTheCommandLineFollowsConventions(t *testing.T) {
	code, out, stderr := kbridge(t, "run", "--help")
	if code != 0 || stderr != "" || !strings.Contains(out, "--config file") || !strings.Contains(out, "--log-level") {
		t.Errorf("run --help: exit %d, stderr %q\n%s", code, stderr, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "extra", "--config", "x.yaml"}, `kbridge run takes no arguments, got "extra"`},
		{[]string{"version", "-x"}, "unknown shorthand flag: 'x' in -x"},
		{[]string{"version", "extra"}, `kbridge version takes no arguments, got "extra"`},
		{[]string{"stats", "--watch", "--interval", "1"}, `invalid argument "1" for "--interval" flag: a duration needs a unit, e.g. 1s`},
		{[]string{"doctor", "--probe-wakeup", "soon"}, `invalid argument "soon" for "--probe-wakeup" flag: not a duration`},
		{[]string{"bogus"}, `unknown command "bogus" for "kbridge"`},
		{[]string{"run", "--log-level", "loud", "--config", "/nonexistent.yaml"}, `--log-level: unknown log level "loud"`},
		{[]string{"cleanup", "--config", "/nonexistent/kbridge.yaml"}, "no such file or directory"},
	} {
		code, out, stderr := kbridge(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 saying %q", c.args, code, out, stderr, c.want)
		}
	}
}

// kbridge version says its version, the DPDK it was built against and
// its Go, as --version does.
func TestVersionNamesDPDKAndGo(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := kbridge(t, args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 3 || lines[0] != "kbridge "+version || lines[1] != "DPDK "+daemon.DPDKBuiltWith() || !strings.HasPrefix(lines[2], "go1.") {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
	}
}

// Without --config, a missing default file is the defaults, as an empty
// file is: stats finds the default socket (and says nobody answers), as
// run and cleanup start from the defaults.
func TestAMissingDefaultFileIsTheDefaults(t *testing.T) {
	if _, err := os.Stat("/etc/kbridge/kbridge.yaml"); err == nil {
		t.Skip("/etc/kbridge/kbridge.yaml exists here")
	}
	src := configSource{path: new(string), instance: new(string)}
	cfg, missing, err := src.load()
	if err != nil || !missing || cfg.Stats.Socket != "/run/kbridge/kbridge.sock" {
		t.Errorf("load = %v, missing %v, socket %q", err, missing, cfg.Stats.Socket)
	}
	*src.path = filepath.Join(t.TempDir(), "kbridge.yaml")
	if _, _, err := src.load(); err == nil {
		t.Error("a file --config names may be missing")
	}
}

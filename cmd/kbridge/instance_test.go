package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestConfigSourceFileAndDefaults(t *testing.T) {
	for _, c := range []struct {
		args         []string
		file, socket string
	}{
		{nil, "/etc/kbridge/kbridge.yaml", "/run/kbridge/kbridge.sock"},
		{[]string{"--instance", "kb1"}, "/etc/kbridge/kb1.yaml", "/run/kbridge/kb1/control.sock"},
		{[]string{"--instance", "kb1", "--config", "/tmp/x.yaml"}, "/tmp/x.yaml", "/run/kbridge/kb1/control.sock"},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		src := addConfigSource(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		d, err := src.defaults()
		if err != nil {
			t.Fatal(err)
		}
		if src.file() != c.file || d.Stats.Socket != c.socket {
			t.Errorf("%v: file %q socket %q, want %q %q", c.args, src.file(), d.Stats.Socket, c.file, c.socket)
		}
	}
}

func TestInstanceReadsItsFileOverItsDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kb1.yaml")
	if err := os.WriteFile(path, []byte("interface:\n  mtu: 1400\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	src := addConfigSource(fs)
	if err := fs.Parse([]string{"--instance", "kb1", "--config", path}); err != nil {
		t.Fatal(err)
	}
	for _, load := range []func() error{
		func() error {
			c, _, err := src.load()
			if err == nil && (c.Interface.Name != "kb1" || c.Port != "kb1" || c.Interface.MTU != 1400) {
				t.Errorf("load: interface %q port %q mtu %d", c.Interface.Name, c.Port, c.Interface.MTU)
			}
			return err
		},
		func() error { // a reload reads over the same defaults
			c, err := src.loadFile(path)
			if err == nil && c.Interface.Name != "kb1" {
				t.Errorf("reload: interface %q", c.Interface.Name)
			}
			return err
		},
	} {
		if err := load(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStatsRefusesSocketWithInstance(t *testing.T) {
	if code, _, stderr := kbridge(t, "stats", "--socket", "/tmp/x.sock", "--instance", "kb1"); code != 2 || !strings.Contains(stderr, "not both") {
		t.Errorf("stats --socket --instance: exit %d, %q", code, stderr)
	}
	if code, _, stderr := kbridge(t, "run", "--instance", "bad/name"); code != 2 || !strings.Contains(stderr, "invalid instance name") {
		t.Errorf("run --instance bad/name: exit %d, %q", code, stderr)
	}
}

// kbridge runs the command line args as main does and returns its exit
// status and what it printed.
func kbridge(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = execute(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// kbridge run --metrics (a pod's address, known only at start) stands over
// the file's stats.metrics at start and at every reload, and a bad one is
// refused naming it.
func TestMetricsFlagStandsOverTheFileAtStartAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.yaml")
	if err := os.WriteFile(path, []byte("stats:\n  metrics: 0.0.0.0:9478\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	src := addConfigSource(fs)
	if err := fs.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	src = src.withMetrics("10.1.2.3:9478")
	for _, load := range []func() (string, error){
		func() (string, error) { c, _, err := src.load(); return c.Stats.Metrics, err },
		func() (string, error) { c, err := src.loadFile(path); return c.Stats.Metrics, err },
	} {
		if m, err := load(); err != nil || m != "10.1.2.3:9478" {
			t.Errorf("stats.metrics %q (%v), want --metrics' 10.1.2.3:9478", m, err)
		}
	}
	if _, _, err := src.withMetrics("10.1.2.3").load(); err == nil || !strings.Contains(err.Error(), "stats.metrics") {
		t.Errorf("--metrics without a port: %v, want stats.metrics refused", err)
	}
}

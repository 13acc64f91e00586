package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestInstanceDefaultsAreDistinct(t *testing.T) {
	plain, err := DefaultFor("")
	if err != nil {
		t.Fatal(err)
	}
	a, err := DefaultFor("kb1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := DefaultFor("exc-2")
	if err != nil {
		t.Fatal(err)
	}
	if a.Port != "kb1" || a.Interface.Name != "kb1" || a.Stats.Socket != "/run/kbridge/kb1/control.sock" || a.Stats.Metrics != "" {
		t.Errorf("instance kb1: port %q interface %q socket %q metrics %q", a.Port, a.Interface.Name, a.Stats.Socket, a.Stats.Metrics)
	}
	for _, c := range []Config{plain, a, b} {
		if err := c.Validate(); err != nil {
			t.Errorf("defaults of port %s do not validate: %v", c.Port, err)
		}
	}
	// What two kbridges on one host must not share.
	seen := map[string]string{}
	for _, c := range []Config{plain, a, b} {
		c.Mode = ModeVhost
		for _, v := range []string{c.Port, c.Interface.Name, c.Stats.Socket, c.VhostSocket()} {
			if prev, ok := seen[v]; ok && prev != c.Port {
				t.Errorf("%q is a default of both %s and %s", v, prev, c.Port)
			}
			seen[v] = c.Port
		}
	}
	if Path("") != "/etc/kbridge/kbridge.yaml" || Path("kb1") != "/etc/kbridge/kb1.yaml" {
		t.Errorf("paths %q %q", Path(""), Path("kb1"))
	}
}

func TestInstanceNames(t *testing.T) {
	for _, bad := range []string{"", "a/b", "kb 1", "averyverylongname", "a:b", "../x", ".", "..", "kbridge"} {
		if _, err := DefaultFor(bad); (bad == "") == (err != nil) || (bad != "" && !errors.Is(err, ErrInstanceName)) {
			t.Errorf("DefaultFor(%q): %v", bad, err)
		}
	}
	for _, good := range []string{"kb0", "exc_1", "A-9", "fifteen-chars-x", "dpdk0.kni", "bond0.kni", "100.kni", "kb@1"} {
		if err := CheckInstance(good); err != nil {
			t.Errorf("CheckInstance(%q): %v", good, err)
		}
	}
}

func TestLoadForReadsOverTheInstanceDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kb1.yaml")
	if err := os.WriteFile(path, []byte("interface:\n  addresses: [198.18.2.2/24]\nstats:\n  metrics: 127.0.0.1:9479\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFor(path, "kb1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != "kb1" || c.Interface.Name != "kb1" || c.Stats.Socket != "/run/kbridge/kb1/control.sock" ||
		c.Stats.Metrics != "127.0.0.1:9479" || len(c.Interface.Addresses) != 1 {
		t.Errorf("got port %q interface %q socket %q metrics %q addresses %v",
			c.Port, c.Interface.Name, c.Stats.Socket, c.Stats.Metrics, c.Interface.Addresses)
	}
	if _, err := LoadFor(path, "no/such"); !errors.Is(err, ErrInstanceName) {
		t.Errorf("a bad instance name: %v", err)
	}
}

func TestPlainDefaultsInAnInstanceFile(t *testing.T) {
	// A copy of the plain example file: port, interface, socket and metrics as
	// the plain kbridge's.
	c, err := DefaultFor("kb1")
	if err != nil {
		t.Fatal(err)
	}
	c.Port, c.Interface.Name, c.Stats.Socket, c.Stats.Metrics = "kb0", "kb0", "/run/kbridge/kbridge.sock", "127.0.0.1:9478"
	got := strings.Join(PlainDefaults(c, "kb1"), ", ")
	want := `port: "kb0", interface.name: "kb0", stats.socket: "/run/kbridge/kbridge.sock", stats.metrics: "127.0.0.1:9478"`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// The instance kb0: port kb0 is its own default too.
	c0, _ := DefaultFor("kb0")
	if keys := PlainDefaults(c0, "kb0"); len(keys) != 0 {
		t.Errorf("instance kb0's own defaults: %v", keys)
	}
	if keys := PlainDefaults(Default(), ""); keys != nil {
		t.Errorf("plain: %v", keys)
	}
}

func TestControlSocketMustNotBeTheVhostSocket(t *testing.T) {
	_, err := load(t, "mode: vhost\nstats:\n  socket: /run/kbridge/kb0.sock\n")
	if err == nil || !strings.Contains(err.Error(), "stats.socket") || !strings.Contains(err.Error(), "vhost-user socket too") {
		t.Errorf("got %v", err)
	}
}

func TestClashesNameTheOtherFilesThatClaimTheSameInterface(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "interface:\n  name: shared0\n")
	write("b.yaml", "interface:\n  name: shared0\n")
	write("c.yaml", "") // its own defaults: interface c, port c
	write("kbridge.yaml", "port: a\n")
	write("bad name!.yaml", "interface:\n  name: shared0\n")
	write("broken.yaml", "interface: [\n")
	cfg, err := LoadFor(a, "a")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range Clashes(a, cfg) {
		got = append(got, filepath.Base(c.File)+" "+c.Key+"="+c.Val)
	}
	want := []string{"b.yaml interface.name=shared0", "kbridge.yaml port=a"}
	if !slices.Equal(got, want) {
		t.Errorf("Clashes: %q, want %q", got, want)
	}
}

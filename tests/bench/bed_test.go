package main

import (
	"os"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/tests/harness"
)

func TestWithPolicy(t *testing.T) {
	base := `# comment
dpdk:
  file_prefix: kbt
policy:
  mode: adaptive
  spin: 50us

  # indented comment inside the block
stats:
  socket: /run/kbt/kbridge.sock
`
	got := harness.WithPolicy(base, "policy:\n  mode: fixed\n  interval: 1ms\n")
	want := `# comment
dpdk:
  file_prefix: kbt
stats:
  socket: /run/kbt/kbridge.sock
policy:
  mode: fixed
  interval: 1ms
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	// A config without a policy block just gets one.
	if got := harness.WithPolicy("port: kb0\n", "policy:\n  mode: busy\n"); got != "port: kb0\npolicy:\n  mode: busy\n" {
		t.Errorf("got %q", got)
	}
}

func TestSelectForwarders(t *testing.T) {
	all, err := selectForwarders("all")
	if err != nil || len(all) != 17 || all[0].Name != "direct" || all[8].Name != "kbridge-vhost" || all[9].Name != "testpmd" || all[10].Name != "bed-ceiling" {
		t.Fatalf("all: %v %v", all, err)
	}
	// Table order, whatever order the flag lists them in.
	fs, err := selectForwarders("testpmd, kbridge-adaptive,direct")
	if err != nil || names(fs) != "direct,kbridge-adaptive,testpmd" {
		t.Errorf("subset: %q %v", names(fs), err)
	}
	if _, err := selectForwarders("direct,kni-2ms"); err == nil || !strings.Contains(err.Error(), "kni-2ms") {
		t.Errorf("unknown name: %v", err)
	}
	for _, f := range all {
		if f.hasKbridge() && !strings.Contains(f.Policy, "mode: "+f.Mode+"\n") {
			t.Errorf("%s: policy %q does not set mode %s", f.Name, f.Policy, f.Mode)
		}
	}
}

func TestClientCPUs(t *testing.T) {
	t.Setenv("KBT_OTHER_CPUS", "")
	if got := clientCPUs(2); got != "" { // explicitly empty: no pinning, like lib.sh
		t.Errorf("override: %q", got)
	}
}

func TestClientCPUsDefault(t *testing.T) {
	if _, set := os.LookupEnv("KBT_OTHER_CPUS"); set {
		t.Skip("KBT_OTHER_CPUS is set in the environment")
	}
	for n, want := range map[int]string{1: "", 2: "0", 8: "0-6"} {
		if got := clientCPUs(n); got != want {
			t.Errorf("clientCPUs(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPin(t *testing.T) {
	b := &Bed{cpus: "0"}
	if got := strings.Join(b.pin("kbt-dut", "sockperf", "pp"), " "); got != "netns exec kbt-dut taskset -c 0 sockperf pp" {
		t.Errorf("pin: %q", got)
	}
}

func TestWithoutOffload(t *testing.T) {
	got := withoutOffload("dpdk:\n  file_prefix: kbt\ninterface:\n  name: kb0\n")
	if want := "dpdk:\n  file_prefix: kbt\ninterface:\n  offload: false\n  name: kb0\n"; got != want {
		t.Errorf("withoutOffload = %q, want %q", got, want)
	}
}

func TestGroupForwarders(t *testing.T) {
	pick := func(list string) []Forwarder {
		fs, err := selectForwarders(list)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	show := func(gs [][]Forwarder) string {
		var out []string
		for _, g := range gs {
			out = append(out, names(g))
		}
		return strings.Join(out, " | ")
	}
	for list, want := range map[string]string{
		"all": "direct,kbridge-busy,kbridge-adaptive,kbridge-plain,kbridge-interrupt,kbridge-learn,kni-4ms,kni-1ms | kbridge-vhost | testpmd,bed-ceiling | direct-9000,kbridge-9000 | direct-gro,kbridge-nic-offload | kbridge-no-tso | kbridge-kni-api",
		// So is the KNI app's, and its like's, next to it.
		"direct,kbridge-kni-api":                "direct | kbridge-kni-api",
		"kbridge-kni-api,kbridge-no-tso,direct": "direct | kbridge-no-tso | kbridge-kni-api",
		// So is the offload bed.
		"direct,kbridge-nic-offload":     "direct | kbridge-nic-offload",
		"direct-gro,kbridge-nic-offload": "direct-gro,kbridge-nic-offload",
		// The jumbo bed is a bed of its own, its floor with it.
		"direct,kbridge-9000":          "direct | kbridge-9000",
		"direct-9000,kbridge-9000":     "direct-9000,kbridge-9000",
		"kbridge-adaptive,direct-9000": "kbridge-adaptive | direct-9000",
		// No kbridge on the ring bed: direct goes to testpmd's bed, as before, else to the vhost bed.
		"direct,kbridge-vhost":                  "direct,kbridge-vhost",
		"direct,kbridge-vhost,testpmd":          "kbridge-vhost | direct,testpmd",
		"direct,testpmd":                        "direct,testpmd",
		"direct,bed-ceiling":                    "direct | bed-ceiling",
		"kbridge-vhost,bed-ceiling":             "kbridge-vhost | bed-ceiling",
		"direct":                                "direct",
		"direct,kbridge-adaptive,kbridge-vhost": "direct,kbridge-adaptive | kbridge-vhost",
	} {
		if got := show(groupForwarders(pick(list))); got != want {
			t.Errorf("%s: groups %q, want %q", list, got, want)
		}
	}
	for _, f := range pick("all") {
		want := map[string]string{"direct": "kbridge", "kbridge": "kbridge", "vhost": "vhost", "testpmd": "testpmd", "ceiling": "testpmd", "kni": "kni"}[f.Kind]
		if f.MTU != 0 {
			want = "jumbo"
		}
		if f.NICOffload {
			want = "offload"
		}
		if f.NoTSO {
			want = "notso"
		}
		if f.bedKind() != want {
			t.Errorf("%s: bed %q, want %q", f.Name, f.bedKind(), want)
		}
		if f.hasKbridge() != (f.Kind == "kbridge" || f.Kind == "vhost") {
			t.Errorf("%s: hasKbridge %v", f.Name, f.hasKbridge())
		}
	}
}

// The jumbo bed's kbridge configuration, at start and at each policy
// switch, is the bed's with interface.mtu 9000: the real file's line is
// found; the ring bed's keeps its own.
func TestJumboConfig(t *testing.T) {
	base, err := os.ReadFile("../testbed/kbridge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := &Bed{baseCfg: string(base), kind: "jumbo"}
	cfg := b.config("policy:\n  mode: busy\n")
	if !strings.Contains(cfg, "\n  mtu: 9000\n") || strings.Contains(cfg, "mtu: 1500") || !strings.Contains(cfg, "mode: busy") {
		t.Errorf("jumbo configuration:\n%s", cfg)
	}
	b.kind = "kbridge"
	if cfg := b.config("policy:\n  mode: busy\n"); !strings.Contains(cfg, "\n  mtu: 1500\n") {
		t.Errorf("the ring bed's configuration:\n%s", cfg)
	}
}

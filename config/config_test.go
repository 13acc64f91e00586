package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/policy"
)

func load(t *testing.T, yaml string) (Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kbridge.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(path)
}

func TestEmptyFileGivesDefaults(t *testing.T) {
	c, err := load(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("empty file:\n got %+v\nwant %+v", c, Default())
	}
}

func TestFullFile(t *testing.T) {
	c, err := load(t, `
dpdk:
  file_prefix: app1
  eal_args: [--log-level=lib.eal:debug]
port: exc0
interface:
  name: kb7
  mtu: 9000
  mac: "02:00:00:00:00:07"
  addresses: [198.18.0.2/24, "2001:db8::2/64"]
  routes:
    - to: 198.18.5.0/24
      via: 198.18.0.1
  up: true
workers:
  cpus: [0]
  batch: 64
  max_segments: 8
policy:
  mode: fixed
  spin: 20us
  backoff: {min: 5us, max: 80us}
  interval: 1ms
  park_timeout: 50ms
stats:
  socket: /run/kb7.sock
  metrics: ""
`)
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Policy{Mode: policy.Fixed, Spin: 20 * time.Microsecond,
		Backoff:  policy.Backoff{Min: 5 * time.Microsecond, Max: 80 * time.Microsecond},
		Interval: time.Millisecond, ParkTimeout: 50 * time.Millisecond}
	if c.Policy != want {
		t.Errorf("policy = %+v, want %+v", c.Policy, want)
	}
	if c.Interface.MTU != 9000 || c.Interface.Routes[0].Via != "198.18.0.1" || c.Workers.Batch != 64 ||
		c.DPDK.FilePrefix != "app1" || c.Port != "exc0" || c.Stats.Metrics != "" || len(c.Interface.Addresses) != 2 {
		t.Errorf("decoded %+v", c)
	}
}

func TestBadInputNamesKeyAndValue(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"dpdk:\n  fileprefix: x\n", "dpdk.fileprefix"},
		{"colour: blue\n", "colour"},
		{"interface:\n  mtu: 40\n", "interface.mtu: 40"},
		{"interface:\n  mtu: big\n", "interface.mtu"},
		{"interface:\n  mac: 01:00:5e:00:00:01\n", `interface.mac: "01:00:5e:00:00:01"`},
		{"interface:\n  addresses: [198.18.0.2]\n", `interface.addresses[0]: "198.18.0.2"`},
		{"interface:\n  routes: [{to: nowhere}]\n", `interface.routes[0].to: "nowhere"`},
		{"interface:\n  name: averyveryverylongname\n", "interface.name"},
		{"policy:\n  mode: turbo\n", `policy.mode: "turbo"`},
		{"policy:\n  spin: fast\n", "policy.spin"},
		{"policy:\n  backoff: {min: 50us, max: 10us}\n", "policy.backoff.max: 10µs"},
		{"workers:\n  cpus: [4096]\n", "workers.cpus[0]: 4096"},
		{"workers:\n  batch: 0\n", "workers.batch: 0"},
		{"dpdk:\n  eal_args: [--file-prefix=x]\n", "dpdk.eal_args[0]"},
		{"dpdk:\n  file_prefix: a/b\n", `dpdk.file_prefix: "a/b"`},
		{"port: \"\"\n", `port: ""`},
		{"interface: [1, 2\n", "not valid YAML"},
	} {
		_, err := load(t, c.yaml)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to mention %q", c.yaml, err, c.want)
		}
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestDefaultWorkerCPUsLeaveTheAppCPU(t *testing.T) {
	if got := DefaultWorkerCPUs(2); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("2 CPUs: %v", got)
	}
	if got := DefaultWorkerCPUs(4); !reflect.DeepEqual(got, []int{0, 1, 2}) {
		t.Errorf("4 CPUs: %v", got)
	}
	if got := DefaultWorkerCPUs(1); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("1 CPU: %v", got)
	}
}

// The configuration files the project ships must load: docs match code.
func TestShippedFilesLoad(t *testing.T) {
	for _, f := range []string{"../deploy/kbridge.yaml", "../tests/testbed/kbridge.yaml"} {
		c, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if c.Policy != Default().Policy && f == "../deploy/kbridge.yaml" {
			t.Errorf("%s: policy %+v differs from the defaults the README documents", f, c.Policy)
		}
	}
}

package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/internal/conferr"
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
  policed_sleep: 20us
stats:
  socket: /run/kb7.sock
  metrics: ""
`)
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Policy{Mode: policy.Fixed, Spin: 20 * time.Microsecond,
		Backoff:  policy.Backoff{Min: 5 * time.Microsecond, Max: 80 * time.Microsecond},
		Interval: time.Millisecond, ParkTimeout: 50 * time.Millisecond, PolicedSleep: 20 * time.Microsecond}
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
		{"port: averyverylongport\n", `port: "averyverylongport": must be 1 to 15 characters`},
		{"mode: fast\n", `mode: "fast": must be ring`},
		{"mode: xdp\n", `xdp.nic: required`},
		{"interface: [1, 2\n", "not valid YAML"},
		{"copp:\n  control: {pps: -1}\n", "copp.control.pps: -1"},
		{"copp:\n  default: {pps: 10, burst: 0}\n", "copp.default.burst: 0"},
		{"copp:\n  management_syn: {pps: -5}\n", "copp.management_syn.pps: -5"},
		{"copp:\n  bgp: {pps: 10, burst: 0}\n", "copp.bgp.burst: 0"},
		{"copp:\n  unwanted: {refresh: 0s}\n", "copp.unwanted.refresh: 0s"},
		{"copp:\n  unwanted: {refresh: 1m}\n", "copp.unwanted.refresh: 1m0s"},
		{"copp:\n  neighbor: {bytes: 1000, burst_bytes: 1500}\n", "copp.neighbor.burst_bytes: 1500"},
		{"copp:\n  management: {ports: [0]}\n", "copp.management.ports[0]: 0"},
		{"copp:\n  management: {ethertypes: [0x0800, 20]}\n", "copp.management.ethertypes[1]: 20"},
		{"copp:\n  management: {protocols: [256]}\n", "copp.management.protocols[0]: 256"},
		{"copp:\n  management: {sources: [198.18.0.1]}\n", `copp.management.sources[0]: "198.18.0.1"`},
		{"copp:\n  management: {ports: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}\n", "copp.management.ports: [1 2"},
		{"copp:\n  classes: {control: 1}\n", "copp.classes"},
		{"copp:\n  enabled: yes please\n", "copp.enabled"},
		{"workers:\n  batch: 3.5\n", "workers.batch: 3.5: must be a whole number, not a number with a fraction or an exponent"},
		{"workers:\n  batch: 1e2\n", "workers.batch: 100: must be a whole number"},
		{"workers:\n  cpus: [0.5]\n", "workers.cpus[0]: 0.5: must be a whole number"},
		{"interface:\n  routes: [{to: 198.18.5.0/24, metric: 2.5}]\n", "interface.routes[0].metric: 2.5: must be a whole number"},
		{"interface:\n  addresses: 198.18.0.2/24\n", `interface.addresses: "198.18.0.2/24": must be a list, not a string: write [198.18.0.2/24] for one item`},
		{"copp:\n  management: {ports: 22}\n", "copp.management.ports: 22: must be a list, not a number: write [22] for one item"},
		{"interface:\n  routes: {to: x}\n", "interface.routes: must be a list, not the mapping {to: x}"},
		{"interface:\n  routes: [5]\n", "interface.routes[0]: 5: must be a mapping of keys to values, not a number"},
		{"Policy: {Mode: busy}\n", "Policy: unknown key: keys are lower case, did you mean policy?"},
		{"policy: {Mode: busy}\n", "policy.Mode: unknown key: keys are lower case, did you mean policy.mode?"},
		{"interface:\n  routes: [{To: 198.18.5.0/24}]\n", "interface.routes[0].To: unknown key: keys are lower case"},
		{"log:\n  level: verbose\n", `log.level: "verbose": must be debug, info, warn, error`},
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
	for _, c := range []struct{ online, want []int }{
		{[]int{0, 1}, []int{0}},
		{[]int{0, 1, 2, 3}, []int{0, 1, 2}},
		{[]int{0, 1, 2, 3, 6, 7}, []int{0, 1, 2, 3, 6}},
		{[]int{0}, []int{0}},
		{[]int{5}, []int{5}},
		{nil, []int{0}},
	} {
		if got := DefaultWorkerCPUs(c.online); !reflect.DeepEqual(got, c.want) {
			t.Errorf("online %v: %v, want %v", c.online, got, c.want)
		}
	}
}

// onlineFixture makes the online CPUs those of testdata/cpu-online:
// 0-3,6-7, a machine with CPUs 4 and 5 offline.
func onlineFixture(t *testing.T) {
	old := cpuOnlinePath
	cpuOnlinePath = "testdata/cpu-online"
	t.Cleanup(func() { cpuOnlinePath = old })
}

// workers.cpus is checked against the CPUs that are online, not against
// kbridge's affinity mask, which leaves out isolated CPUs.
func TestWorkerCPUsAreOnlineCPUs(t *testing.T) {
	onlineFixture(t)
	c, err := load(t, "workers:\n  cpus: [7, 6]\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.WorkerCPU(0) != 7 || c.WorkerCPU(5) != 6 {
		t.Errorf("worker CPUs %v", c.WorkerCPUs())
	}
	_, err = load(t, "workers:\n  cpus: [3, 4, 8]\n")
	for _, want := range []string{
		"workers.cpus[1]: 4: not an online CPU: this machine's online CPUs are 0-3,6-7",
		"workers.cpus[2]: 8: not an online CPU",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to mention %q", err, want)
		}
	}
	if got := Default().WorkerCPUs(); !reflect.DeepEqual(got, []int{0, 1, 2, 3, 6}) {
		t.Errorf("default worker CPUs %v, want every online CPU but the highest", got)
	}
}

// The online CPUs come from sysfs in the kernel's list format (parsed by
// internal/cpulist, tested there); a file that cannot be read, is not a
// list, or lists no CPU falls back to CPUs 0 to NumCPU-1.
func TestOnlineCPUs(t *testing.T) {
	onlineFixture(t)
	if got := onlineCPUs(); !reflect.DeepEqual(got, []int{0, 1, 2, 3, 6, 7}) {
		t.Errorf("online CPUs %v from the fixture, want 0-3,6-7", got)
	}
	all := make([]int, runtime.NumCPU())
	for i := range all {
		all[i] = i
	}
	dir := t.TempDir()
	for _, content := range []string{"", "a", "3-1", "1-", "-1"} {
		cpuOnlinePath = filepath.Join(dir, "online")
		if err := os.WriteFile(cpuOnlinePath, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := onlineCPUs(); !reflect.DeepEqual(got, all) {
			t.Errorf("online file %q: CPUs %v, want the fallback %v", content, got, all)
		}
	}
	cpuOnlinePath = filepath.Join(dir, "missing")
	if got := onlineCPUs(); !reflect.DeepEqual(got, all) {
		t.Errorf("no online file: CPUs %v, want the fallback %v", got, all)
	}
}

// A file with several mistakes gets one error that names them all, each a
// FieldError with its key: unknown keys, wrong types, bad values.
func TestSeveralMistakesReportedTogether(t *testing.T) {
	_, err := load(t, `
dpdk:
  fileprefix: x
  wait: 2h
interface:
  mtu: big
  addresses: [198.18.0.2]
  routes: [{to: 198.18.5.0/24, bogus: 1}]
policy:
  mode: turbo
  spin: 20
stats:
  metrics: localhost
`)
	if err == nil {
		t.Fatal("accepted")
	}
	if !errors.Is(err, conferr.ErrInvalid) {
		t.Errorf("%v: not a configuration error", err)
	}
	var l conferr.List
	if !errors.As(err, &l) {
		t.Fatalf("%v: not a conferr.List", err)
	}
	keys, ferr := conferr.KeysOf(err)
	if ferr != nil {
		t.Fatalf("%v: not a FieldError", ferr)
	}
	want := []string{
		"dpdk.fileprefix",           // unknown, found by viper
		"interface.mtu",             // wrong type
		"interface.routes[0].bogus", // unknown, inside a list: found by decoding
		"policy.spin",               // no unit
		"dpdk.wait",                 // out of range
		"interface.addresses[0]",    // no prefix length
		"policy.mode",               // no such mode
		"stats.metrics",             // no port
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("keys\n got %q\nwant %q\nerror: %v", keys, want, err)
	}
	if n := strings.Count(err.Error(), "; "); n != len(want)-1 {
		t.Errorf("%d separators in %v", n, err)
	}
	var fe *conferr.FieldError
	if !errors.As(err, &fe) || fe.Key != "dpdk.fileprefix" || fe.Value != nil {
		t.Errorf("errors.As: %+v", fe)
	}
}

// A value that does not decode is reported once, not also as the default
// it was left at.
func TestDecodeErrorNotRepeatedByValidation(t *testing.T) {
	_, err := load(t, "interface:\n  mtu: big\n")
	const want = `interface.mtu: "big": must be a whole number, not a string`
	if err == nil || !strings.HasSuffix(err.Error(), ": "+want) {
		t.Errorf("got %v\nwant ...: %s", err, want)
	}
}

// A duration without a unit is refused with the fix: "spin: 20" used to be
// 20 nanoseconds. A bare 0 is accepted: it is 0 in every unit.
func TestDurationNeedsUnit(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"policy:\n  spin: 20\n", "policy.spin: 20: a duration needs a unit, e.g. 20us"},
		{"policy:\n  spin: \"20\"\n", `policy.spin: "20": a duration needs a unit, e.g. 20us`},
		{"policy:\n  interval: 1.5\n", "policy.interval: 1.5: a duration needs a unit, e.g. 1.5us"},
		{"policy:\n  backoff: {min: 5, max: 80}\n", "policy.backoff.max: 80: a duration needs a unit, e.g. 80us; policy.backoff.min: 5: a duration"},
		{"policy:\n  park_timeout: soon\n", `policy.park_timeout: "soon": not a duration: write a number with a unit (ns, us, ms, s, m, h), e.g. 20us`},
		{"policy:\n  spin: [1]\n", "policy.spin: [1]: must be a duration, not a list"},
		{"dpdk:\n  wait: 30\n", "dpdk.wait: 30: a duration needs a unit, e.g. 30us"},
	} {
		_, err := load(t, c.yaml)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v\nwant it to mention %q", c.yaml, err, c.want)
		}
	}
	c, err := load(t, "dpdk:\n  wait: 0\npolicy:\n  spin: 0\n  backoff: {min: \"0\", max: 0s}\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.DPDK.Wait != 0 || c.Policy.Spin != 0 {
		t.Errorf("bare 0: wait %v spin %v", c.DPDK.Wait, c.Policy.Spin)
	}
}

func TestMetricsAddress(t *testing.T) {
	for addr, ok := range map[string]bool{
		"": true, "127.0.0.1:9478": true, ":9478": true, "[::1]:9478": true, "localhost:65535": true,
		"127.0.0.1": false, "127.0.0.1:0": false, ":65536": false, "host:http": false, "::1:9478": false,
	} {
		c := Default()
		c.Stats.Metrics = addr
		err := c.Validate()
		if (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), fmt.Sprintf("stats.metrics: %q: must be host:port", addr)) {
			t.Errorf("%q: %v", addr, err)
		}
	}
}

// interface.mtu takes what a worker's frame buffer holds, no more.
func TestMTUBounds(t *testing.T) {
	for mtu, ok := range map[int]bool{67: false, 68: true, 9000: true, 65444: true, 65445: false, 65521: false} {
		_, err := load(t, fmt.Sprintf("interface:\n  mtu: %d\n", mtu))
		if (err == nil) != ok {
			t.Errorf("mtu %d: %v, want ok=%v", mtu, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("interface.mtu: %d: must be between 68 and 65444", mtu)) {
			t.Errorf("mtu %d: %v", mtu, err)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"dpdk:\n  fileprefix: x\n", "dpdk.fileprefix: unknown key, did you mean dpdk.file_prefix? (keys under dpdk: eal_args, file_prefix, runtime_dir, wait)"},
		{"polcy:\n  mode: busy\n", "polcy: unknown key, did you mean policy? (top-level keys: "},
		{"foo:\n  bar: 1\n  baz: 2\n", "foo: unknown key (top-level keys: "},
		{"port: {a: 1}\n", "port: map[a:1]: must be a string, not a mapping"},
	} {
		_, err := load(t, c.yaml)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "; ") {
			t.Errorf("%q: error %v\nwant one error with %q", c.yaml, err, c.want)
		}
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

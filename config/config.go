// Package config loads kbridge's YAML configuration with viper. Every key has
// a default, so an empty file is valid. Load decodes strictly (a number is
// not a string, a duration needs a unit) and then validates each section,
// policy and tap and xdp through their own Validate, collecting every
// problem: unknown keys, wrong types and bad values come back together as
// one conferr.List of *conferr.FieldError, each naming the key and the
// value. Limits shared with the data path come from internal/limits, and
// CPUs are checked against the machine's online CPUs.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/internal/limits"
	"github.com/kbridge/kbridge/policy"
	"github.com/kbridge/kbridge/tap"
	"github.com/kbridge/kbridge/xdp"
)

// Config is kbridge's whole configuration.
type Config struct {
	// Mode is "ring" (DPDK rings <-> TAP, the default), "xdp" (an XDP
	// program on the NIC steers exception traffic into kb0; see xdp) or
	// "vhost" (the app's virtio-user port <-> TAP; see Vhost).
	Mode string `mapstructure:"mode" json:"mode"`
	DPDK DPDK   `mapstructure:"dpdk" json:"dpdk"`
	// Port is the name the DPDK app gave kbridge_port_create().
	Port      string        `mapstructure:"port" json:"port"`
	Interface tap.Config    `mapstructure:"interface" json:"interface"`
	Workers   Workers       `mapstructure:"workers" json:"workers"`
	Policy    policy.Policy `mapstructure:"policy" json:"policy"`
	Stats     Stats         `mapstructure:"stats" json:"stats"`
	// XDP configures mode xdp. Its exception interface and addresses
	// default to interface.name and interface.addresses.
	XDP xdp.Config `mapstructure:"xdp" json:"xdp"`
	// Vhost configures mode vhost: kbridge as the vhost-user backend of
	// the app's virtio-user port.
	Vhost Vhost `mapstructure:"vhost" json:"vhost"`
}

// The modes.
const (
	ModeRing = "ring"
	ModeXDP  = "xdp"
)

// DPDK says how to join the app's DPDK instance.
type DPDK struct {
	FilePrefix string   `mapstructure:"file_prefix" json:"file_prefix"`
	EALArgs    []string `mapstructure:"eal_args" json:"eal_args,omitempty"`
	// RuntimeDir is the app's DPDK runtime directory (it holds
	// <file_prefix>/config). DPDK puts it at $RUNTIME_DIRECTORY/dpdk, which
	// for an app run by root from a shell is /var/run/dpdk.
	RuntimeDir string `mapstructure:"runtime_dir" json:"runtime_dir"`
	// Wait bounds how long kbridge waits for the primary and its port to
	// appear at start-up (a service may start right after the app's,
	// while EAL is still initialising). 0 fails at once.
	Wait time.Duration `mapstructure:"wait" json:"wait"`
}

// Workers places and sizes the per-queue workers.
type Workers struct {
	// CPUs lists the CPU of each queue's worker, in queue order; the last
	// one serves the remaining queues. Empty: every CPU but the highest,
	// which by convention is the DPDK app's lcore.
	CPUs []int `mapstructure:"cpus" json:"cpus"`
	// Batch is the burst size: packets per ring dequeue and TAP read loop.
	Batch int `mapstructure:"batch" json:"batch"`
	// MaxSegments bounds the segments of one chained mbuf (one writev).
	MaxSegments int `mapstructure:"max_segments" json:"max_segments"`
}

// Stats says where kbridge shows what it does.
type Stats struct {
	// Socket is the unix control socket `kbridge stats` reads.
	Socket string `mapstructure:"socket" json:"socket"`
	// Metrics is the Prometheus listen address; empty disables it.
	Metrics string `mapstructure:"metrics" json:"metrics"`
}

// Default returns the configuration an empty file gets.
func Default() Config {
	return Config{
		Mode:      ModeRing,
		DPDK:      DPDK{FilePrefix: "rte", RuntimeDir: "/var/run/dpdk", Wait: 30 * time.Second},
		Port:      "kb0",
		Interface: tap.DefaultConfig(),
		Workers:   Workers{Batch: 32, MaxSegments: 16},
		Policy:    policy.Default(),
		Stats:     Stats{Socket: "/run/kbridge/kbridge.sock", Metrics: "127.0.0.1:9478"},
		Vhost:     DefaultVhost(),
	}
}

// Load reads the YAML file at path over the defaults and validates it. A
// file with several mistakes gets one error naming them all: unknown keys,
// values of the wrong type and values out of range, each a
// *conferr.FieldError (errors.Is(err, conferr.ErrInvalid) holds).
func Load(path string) (Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	setDefaults(v, Default())
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	if err := v.ReadConfig(f); err != nil {
		return Config{}, fmt.Errorf("config %s: not valid YAML: %w", path, err)
	}
	c, err := decode(v)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// decode turns what viper read into a Config and checks it, collecting the
// errors of every stage. A value that does not decode keeps its default, so
// that validation can go on with the other keys; validation errors about a
// key that did not decode are dropped, since they would be about the
// default, not the file.
func decode(v *viper.Viper) (Config, error) {
	var errs conferr.Collector
	unknown := unknownKeys(v)
	for _, fe := range unknown {
		errs.Include(fe)
	}
	c := Default()
	err := v.Unmarshal(&c, func(dc *mapstructure.DecoderConfig) {
		dc.ErrorUnused = true
		dc.WeaklyTypedInput = false
		// Replaces viper's hooks, which turn a bare number into
		// nanoseconds and a string into a one-element list: a list must
		// be a list, as strict decoding wants everywhere else.
		dc.DecodeHook = durationHook
	})
	var failed []string
	for _, fe := range decodeErrors(err) {
		if fe.Reason == reasonUnknown && reportedUnder(unknown, fe.Key) {
			continue
		}
		failed = append(failed, fe.Key)
		errs.Include(fe)
	}
	verr := c.Validate()
	list, ok := verr.(conferr.List)
	if !ok && verr != nil {
		list = conferr.List{verr}
	}
	for _, e := range list {
		var fe *conferr.FieldError
		if errors.As(e, &fe) && slices.ContainsFunc(failed, func(k string) bool { return under(fe.Key, k) }) {
			continue
		}
		errs.Include(e)
	}
	if err := errs.Err(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// durationHook decodes time.Duration keys from strings only ("20us",
// "1.5ms"). A bare number is refused: YAML "spin: 20" would otherwise be 20
// nanoseconds, a thousand times less than whoever wrote it likely meant.
// A bare 0 is accepted because it is 0 in every unit, so it cannot be
// misread (time.ParseDuration accepts "0" for the same reason), and it is
// the natural way to write "off" for backoff.max and dpdk.wait.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType || from == durationType {
		return data, nil
	}
	const units = "write a number with a unit (ns, us, ms, s, m, h), e.g. 20us"
	switch rv := reflect.ValueOf(data); {
	case rv.CanInt(), rv.CanUint(), rv.CanFloat():
		if rv.IsZero() {
			return time.Duration(0), nil
		}
		return nil, conferr.Errorf("", data, "a duration needs a unit, e.g. %vus", data)
	case rv.Kind() == reflect.String:
		d, err := time.ParseDuration(rv.String())
		if err != nil {
			if _, nerr := strconv.ParseFloat(rv.String(), 64); nerr == nil {
				return nil, conferr.Errorf("", data, "a duration needs a unit, e.g. %sus", rv.String())
			}
			return nil, conferr.New("", data, "not a duration: "+units)
		}
		return d, nil
	}
	return nil, conferr.Errorf("", data, "must be a duration, not %s: %s", describeValue(data), units)
}

var durationType = reflect.TypeFor[time.Duration]()

const reasonUnknown = "unknown key"

// decodeErrors turns what mapstructure reports into FieldErrors that name
// the key, the value found in the file and what is wrong. mapstructure
// nests its errors (a DecodeError per field, joined per struct); only the
// leaves are of interest.
func decodeErrors(err error) []*conferr.FieldError {
	var out []*conferr.FieldError
	var walk func(key string, err error)
	walk = func(key string, err error) {
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, err := range e.Unwrap() {
				walk(key, err)
			}
		case *mapstructure.DecodeError:
			// Names are full keys: "interface.routes[0].to". Unused keys
			// have no error type of their own, only this message.
			inner := e.Unwrap()
			if keys, ok := strings.CutPrefix(inner.Error(), "has invalid keys: "); ok {
				for k := range strings.SplitSeq(keys, ", ") {
					out = append(out, conferr.New(conferr.Key(e.Name(), k), nil, reasonUnknown))
				}
				return
			}
			walk(e.Name(), inner)
		case *conferr.FieldError: // from durationHook, keyless
			out = append(out, conferr.Prefix(key, e).(*conferr.FieldError))
		case *mapstructure.UnconvertibleTypeError:
			out = append(out, conferr.Errorf(key, e.Value, "must be %s, not %s",
				describeType(e.Expected.Type()), describeValue(e.Value)))
		default:
			if u := errors.Unwrap(err); u != nil && key == "" {
				walk(key, u) // mapstructure's "decoding failed due to ..."
				return
			}
			out = append(out, conferr.New(key, nil, err.Error()))
		}
	}
	walk("", err)
	slices.SortStableFunc(out, func(a, b *conferr.FieldError) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// describeType says what a YAML value for a field of type t looks like.
func describeType(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration with a unit, e.g. 20us"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uintptr:
		return "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return "a list"
	}
	return "a mapping of keys to values"
}

// describeValue says what kind of YAML value v is.
func describeValue(v any) string {
	switch rv := reflect.ValueOf(v); {
	case v == nil:
		return "empty"
	case rv.Kind() == reflect.Bool:
		return "true or false"
	case rv.Kind() == reflect.String:
		return "a string"
	case rv.CanInt() || rv.CanUint() || rv.CanFloat():
		return "a number"
	case rv.Kind() == reflect.Slice:
		return "a list"
	case rv.Kind() == reflect.Map:
		return "a mapping"
	}
	return fmt.Sprintf("a %T", v)
}

// under reports whether key is parent or a key inside it.
func under(key, parent string) bool {
	rest, ok := strings.CutPrefix(key, parent)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// reportedUnder reports whether an unknown key at or under key was
// reported already: mapstructure names the outermost unknown key
// ("foo" for foo: {bar: 1}) where viper names the leaf ("foo.bar").
func reportedUnder(unknown []*conferr.FieldError, key string) bool {
	return slices.ContainsFunc(unknown, func(fe *conferr.FieldError) bool {
		return under(fe.Key, strings.ToLower(key))
	})
}

// setDefaults registers every leaf of d as a default, so that viper knows
// each key and an empty file yields Default().
func setDefaults(v *viper.Viper, d Config) {
	var m map[string]any
	_ = mapstructure.Decode(d, &m)
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, val := range m {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			if sub, ok := val.(map[string]any); ok {
				walk(key, sub)
				continue
			}
			v.SetDefault(key, val)
		}
	}
	walk("", toMap(m))
}

// toMap converts the nested structs mapstructure.Decode leaves in place.
func toMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch t := v.(type) {
		case map[string]any:
			out[k] = toMap(t)
		default:
			var sub map[string]any
			if v != nil && reflect.TypeOf(v).Kind() == reflect.Struct && mapstructure.Decode(v, &sub) == nil {
				out[k] = toMap(sub)
			} else {
				out[k] = v
			}
		}
	}
	return out
}

// XDPConfig returns the xdp section with what it shares with interface.*.
func (c Config) XDPConfig() xdp.Config {
	x := c.XDP
	if x.Exception == "" {
		x.Exception = c.Interface.Name
	}
	if len(x.Addresses) == 0 {
		x.Addresses = c.Interface.Addresses
	}
	return x
}

// Validate checks every value and reports every problem at once, as a
// conferr.List of *conferr.FieldError naming the key and the value.
func (c Config) Validate() error {
	var errs conferr.Collector
	switch c.Mode {
	case ModeRing:
	case ModeXDP:
		errs.Include(c.XDPConfig().Validate())
	case ModeVhost:
	default:
		errs.Add("mode", c.Mode, "must be ring (DPDK rings <-> TAP), xdp (XDP redirect) or vhost (vhost-user backend of the app's virtio-user port)")
	}
	c.validateVhost(&errs)
	if c.DPDK.FilePrefix == "" || strings.ContainsAny(c.DPDK.FilePrefix, "/ ") {
		errs.Add("dpdk.file_prefix", c.DPDK.FilePrefix, "must be the DPDK app's --file-prefix (no '/' or spaces)")
	}
	for i, a := range c.DPDK.EALArgs {
		for _, owned := range []string{"--proc-type", "--file-prefix", "-l", "--lcores", "-c"} {
			if a == owned || strings.HasPrefix(a, owned+"=") {
				errs.Addf(conferr.Index("dpdk.eal_args", i), a, "kbridge sets %s itself", owned)
			}
		}
	}
	if !filepath.IsAbs(c.DPDK.RuntimeDir) || filepath.Base(c.DPDK.RuntimeDir) != "dpdk" {
		errs.Add("dpdk.runtime_dir", c.DPDK.RuntimeDir, "must be an absolute path ending in /dpdk (DPDK appends that name to $RUNTIME_DIRECTORY)")
	}
	if c.DPDK.Wait < 0 || c.DPDK.Wait > time.Hour {
		errs.Add("dpdk.wait", c.DPDK.Wait, "must be between 0s and 1h")
	}
	if c.Port == "" || len(c.Port) > limits.PortNameMax {
		errs.Addf("port", c.Port, "must be 1 to %d characters, the name given to kbridge_port_create()", limits.PortNameMax)
	}
	errs.Include(c.Interface.Validate("interface"))
	online := onlineCPUs()
	for i, cpu := range c.Workers.CPUs {
		if !slices.Contains(online, cpu) {
			errs.Addf(conferr.Index("workers.cpus", i), cpu, "not an online CPU: this machine's online CPUs are %s", formatCPUList(online))
		}
	}
	if c.Workers.Batch < 1 || c.Workers.Batch > 256 {
		errs.Add("workers.batch", c.Workers.Batch, "must be between 1 and 256")
	}
	if c.Workers.MaxSegments < 1 || c.Workers.MaxSegments > 64 {
		errs.Add("workers.max_segments", c.Workers.MaxSegments, "must be between 1 and 64")
	}
	errs.Include(c.Policy.Validate("policy"))
	if c.Stats.Socket == "" {
		errs.Add("stats.socket", c.Stats.Socket, "kbridge needs a control socket path")
	}
	if m := c.Stats.Metrics; m != "" {
		// Checked here rather than when the listener starts, after the
		// TAP and the workers are up.
		_, port, err := net.SplitHostPort(m)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			errs.Add("stats.metrics", m, `must be host:port with a port from 1 to 65535 (e.g. 127.0.0.1:9478 or :9478), or "" to turn metrics off`)
		}
	}
	return errs.Err()
}

// WorkerCPU returns the CPU of queue q's worker.
func (c Config) WorkerCPU(q int) int {
	cpus := c.WorkerCPUs()
	return cpus[min(q, len(cpus)-1)]
}

// WorkerCPUs returns the configured worker CPUs or the default ones.
func (c Config) WorkerCPUs() []int {
	if len(c.Workers.CPUs) == 0 {
		return DefaultWorkerCPUs(onlineCPUs())
	}
	return c.Workers.CPUs
}

// DefaultWorkerCPUs leaves the highest online CPU to the DPDK app
// (the test bed's placement, tests/testbed/README.md) and returns the others, given the online CPUs
// in ascending order; a one-CPU machine shares its CPU.
func DefaultWorkerCPUs(online []int) []int {
	switch len(online) {
	case 0:
		return []int{0}
	case 1:
		return slices.Clone(online)
	}
	return slices.Clone(online[:len(online)-1])
}

// cpuOnlinePath lists the CPUs that exist and are online. A variable so that
// tests can point it at a fixture.
var cpuOnlinePath = "/sys/devices/system/cpu/online"

// onlineCPUs returns the online CPUs, ascending. It reads sysfs rather than
// using runtime.NumCPU, which counts the CPUs of kbridge's own affinity
// mask: under systemd's CPUAffinity=, taskset, or with the CPUs isolated
// (isolcpus=) that kbridge doctor recommends for workers, NumCPU would
// refuse the very CPUs the workers should run on. Without sysfs it falls
// back to CPUs 0 to NumCPU-1.
func onlineCPUs() []int {
	if b, err := os.ReadFile(cpuOnlinePath); err == nil {
		if cpus, err := parseCPUList(string(b)); err == nil && len(cpus) > 0 {
			return cpus
		}
	}
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// parseCPUList parses the kernel's list format, "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, fmt.Errorf("cpu list %q: bad element %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// formatCPUList writes ascending CPUs in the kernel's list format.
func formatCPUList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// unknownKeys reports the keys of the file that kbridge does not have, each
// with its full dotted name, the closest existing key if one is close, and
// the keys that exist beside it.
func unknownKeys(v *viper.Viper) []*conferr.FieldError {
	known := Keys()
	isSection := func(p string) bool {
		return p == "" || slices.ContainsFunc(known, func(k string) bool { return strings.HasPrefix(k, p+".") })
	}
	keys := v.AllKeys()
	sort.Strings(keys)
	var out []*conferr.FieldError
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		// viper names leaves; report the outermost unknown key instead
		// ("foo" for foo: {bar: 1}), once.
		parent := k
		for parent != "" {
			if i := strings.LastIndex(parent, "."); i >= 0 {
				parent = parent[:i]
			} else {
				parent = ""
			}
			if isSection(parent) {
				break
			}
		}
		rest := strings.TrimPrefix(strings.TrimPrefix(k, parent), ".")
		name := strings.SplitN(rest, ".", 2)[0]
		key := conferr.Key(parent, name)
		if slices.Contains(known, key) || slices.ContainsFunc(out, func(fe *conferr.FieldError) bool { return fe.Key == key }) {
			continue // a mapping where a value belongs: decoding says so
		}
		var siblings []string
		for _, kk := range known {
			if rest, ok := strings.CutPrefix(kk, parent+"."); ok || parent == "" {
				if parent == "" {
					rest = kk
				}
				siblings = append(siblings, strings.SplitN(rest, ".", 2)[0])
			}
		}
		siblings = slices.Compact(siblings)
		reason := reasonUnknown
		if near := closest(name, siblings); near != "" {
			reason += ", did you mean " + conferr.Key(parent, near) + "?"
		}
		where := "top-level keys"
		if parent != "" {
			where = "keys under " + parent
		}
		out = append(out, conferr.New(key, nil, fmt.Sprintf("%s (%s: %s)", reason, where, strings.Join(siblings, ", "))))
	}
	return out
}

// closest returns the candidate name most likely meant by a misspelt one:
// the same but for '_' and '-', or at most two edits away. "" if none is.
func closest(name string, candidates []string) string {
	norm := func(s string) string { return strings.NewReplacer("_", "", "-", "").Replace(s) }
	best, bestD := "", 3
	for _, c := range candidates {
		if norm(c) == norm(name) {
			return c
		}
		if d := editDistance(name, c); d < bestD && d < len(c)/2 {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Keys lists every configuration key, sorted, for documentation and tests.
func Keys() []string {
	v := viper.New()
	setDefaults(v, Default())
	keys := v.AllKeys()
	sort.Strings(keys)
	return slices.Compact(keys)
}

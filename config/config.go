// Package config loads kbridge's YAML configuration with viper. Every key has
// a default; unknown keys and bad values are errors that name the key and the
// value.
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/kbridge/kbridge/policy"
	"github.com/kbridge/kbridge/tap"
	"github.com/kbridge/kbridge/xdp"
)

// Config is kbridge's whole configuration.
type Config struct {
	// Mode is "ring" (DPDK rings <-> TAP, the default) or "xdp" (an XDP
	// program on the NIC steers exception traffic into kb0; see xdp).
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
	}
}

// Load reads the YAML file at path over the defaults and validates it.
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
	if err := unknownKeys(v); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	c, err := decode(v)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

func decode(v *viper.Viper) (Config, error) {
	var c Config
	var md mapstructure.Metadata
	err := v.Unmarshal(&c, func(dc *mapstructure.DecoderConfig) {
		dc.ErrorUnused = true
		dc.Metadata = &md
		dc.WeaklyTypedInput = false
	})
	if err != nil {
		return Config{}, cleanDecodeError(v, err)
	}
	return c, nil
}

var decodeErrLine = regexp.MustCompile(`^'([^']+)' (.*)$`)

// cleanDecodeError rewrites mapstructure's messages as "key: value: what
// is wrong", one per line joined by "; ".
func cleanDecodeError(v *viper.Viper, err error) error {
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "* "))
		if line == "" || strings.HasPrefix(line, "decoding failed") {
			continue
		}
		if m := decodeErrLine.FindStringSubmatch(line); m != nil {
			key := m[1]
			msg := strings.ReplaceAll(m[2], "unconvertible type", "a value of type")
			line = fmt.Sprintf("%s: %q: %s", key, rawValue(v, key), msg)
		}
		out = append(out, line)
	}
	return errors.New(strings.Join(out, "; "))
}

var indexed = regexp.MustCompile(`^(.*)\[(\d+)\]$`)

// rawValue returns what the file holds at key, which may index a list.
func rawValue(v *viper.Viper, key string) string {
	if m := indexed.FindStringSubmatch(key); m != nil {
		i, _ := strconv.Atoi(m[2])
		if list, ok := v.Get(m[1]).([]any); ok && i < len(list) {
			return fmt.Sprint(list[i])
		}
	}
	return fmt.Sprint(v.Get(key))
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
			if isStruct(v) && mapstructure.Decode(v, &sub) == nil {
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

// Validate checks every value; errors name the key and the value.
func (c Config) Validate() error {
	switch c.Mode {
	case ModeRing:
	case ModeXDP:
		if err := c.XDPConfig().Validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("mode: %q: must be ring (DPDK rings <-> TAP) or xdp (XDP redirect)", c.Mode)
	}
	if c.DPDK.FilePrefix == "" || strings.ContainsAny(c.DPDK.FilePrefix, "/ ") {
		return fmt.Errorf("dpdk.file_prefix: %q: must be the DPDK app's --file-prefix (no '/' or spaces)", c.DPDK.FilePrefix)
	}
	for i, a := range c.DPDK.EALArgs {
		for _, owned := range []string{"--proc-type", "--file-prefix", "-l", "--lcores", "-c"} {
			if a == owned || strings.HasPrefix(a, owned+"=") {
				return fmt.Errorf("dpdk.eal_args[%d]: %q: kbridge sets %s itself", i, a, owned)
			}
		}
	}
	if !filepath.IsAbs(c.DPDK.RuntimeDir) || filepath.Base(c.DPDK.RuntimeDir) != "dpdk" {
		return fmt.Errorf("dpdk.runtime_dir: %q: must be an absolute path ending in /dpdk (DPDK appends that name to $RUNTIME_DIRECTORY)", c.DPDK.RuntimeDir)
	}
	if c.DPDK.Wait < 0 || c.DPDK.Wait > time.Hour {
		return fmt.Errorf("dpdk.wait: %v: must be between 0s and 1h", c.DPDK.Wait)
	}
	if c.Port == "" || len(c.Port) > 15 {
		return fmt.Errorf("port: %q: must be 1 to 15 characters, the name given to kbridge_port_create()", c.Port)
	}
	if err := c.Interface.Validate("interface"); err != nil {
		return err
	}
	ncpu := runtime.NumCPU()
	for i, cpu := range c.Workers.CPUs {
		if cpu < 0 || cpu >= ncpu {
			return fmt.Errorf("workers.cpus[%d]: %d: this machine has CPUs 0-%d", i, cpu, ncpu-1)
		}
	}
	if c.Workers.Batch < 1 || c.Workers.Batch > 256 {
		return fmt.Errorf("workers.batch: %d: must be between 1 and 256", c.Workers.Batch)
	}
	if c.Workers.MaxSegments < 1 || c.Workers.MaxSegments > 64 {
		return fmt.Errorf("workers.max_segments: %d: must be between 1 and 64", c.Workers.MaxSegments)
	}
	if err := c.Policy.Validate("policy"); err != nil {
		return err
	}
	if c.Stats.Socket == "" {
		return fmt.Errorf("stats.socket: %q: kbridge needs a control socket path", c.Stats.Socket)
	}
	return nil
}

// WorkerCPU returns the CPU of queue q's worker.
func (c Config) WorkerCPU(q int) int {
	cpus := c.WorkerCPUs()
	return cpus[min(q, len(cpus)-1)]
}

// WorkerCPUs returns the configured worker CPUs or the default ones.
func (c Config) WorkerCPUs() []int {
	if len(c.Workers.CPUs) == 0 {
		return DefaultWorkerCPUs(runtime.NumCPU())
	}
	return c.Workers.CPUs
}

// DefaultWorkerCPUs leaves the highest CPU to the DPDK app (TESTBED.md's
// placement) and returns the others; a one-CPU machine shares CPU 0.
func DefaultWorkerCPUs(ncpu int) []int {
	if ncpu <= 1 {
		return []int{0}
	}
	cpus := make([]int, ncpu-1)
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// unknownKeys reports keys of the file that kbridge does not have, each with
// its full dotted name and the keys that exist beside it.
func unknownKeys(v *viper.Viper) error {
	known := Keys()
	var errs []error
	for _, k := range v.AllKeys() {
		if slices.Contains(known, k) {
			continue
		}
		parent := ""
		if i := strings.LastIndex(k, "."); i >= 0 {
			parent = k[:i]
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
		where := "top-level keys"
		if parent != "" {
			where = "keys under " + parent
		}
		errs = append(errs, fmt.Errorf("unknown key %q (%s: %s)", k, where, strings.Join(siblings, ", ")))
	}
	return errors.Join(errs...)
}

// Keys lists every configuration key, sorted, for documentation and tests.
func Keys() []string {
	v := viper.New()
	setDefaults(v, Default())
	keys := v.AllKeys()
	sort.Strings(keys)
	return slices.Compact(keys)
}

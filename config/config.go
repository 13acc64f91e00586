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
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/internal/cpulist"
	"github.com/kbridge/kbridge/internal/limits"
	"github.com/kbridge/kbridge/internal/logging"
	"github.com/kbridge/kbridge/policy"
	"github.com/kbridge/kbridge/tap/tapconfig"
	"github.com/kbridge/kbridge/xdp/xdpconfig"
)

// Config is kbridge's whole configuration.
type Config struct {
	// Mode is the data path: ring (the default), xdp or vhost (mode.go).
	Mode Mode `mapstructure:"mode" json:"mode"`
	DPDK DPDK `mapstructure:"dpdk" json:"dpdk"`
	// Port is the name the DPDK app gave kbridge_port_create().
	Port      string           `mapstructure:"port" json:"port"`
	Interface tapconfig.Config `mapstructure:"interface" json:"interface"`
	// Ports are more ports of the same app, each with its interface
	// (mode ring; ports.go). Port, when not empty, is served too.
	Ports []PortConfig `mapstructure:"ports" json:"ports,omitempty"`
	// Discover serves every other port the app creates too, each with the
	// interface section as its template, and lets a freed or failed port
	// go without ending kbridge (mode ring).
	Discover bool          `mapstructure:"discover" json:"discover"`
	Workers  Workers       `mapstructure:"workers" json:"workers"`
	Policy   policy.Policy `mapstructure:"policy" json:"policy"`
	Stats    Stats         `mapstructure:"stats" json:"stats"`
	// XDP configures mode xdp. Its exception interface and addresses
	// default to interface.name and interface.addresses.
	XDP xdpconfig.Config `mapstructure:"xdp" json:"xdp"`
	// Vhost configures mode vhost: kbridge as the vhost-user backend of
	// the app's virtio-user port.
	Vhost Vhost `mapstructure:"vhost" json:"vhost"`
	// Requests configures how kbridge hands the interface's changes to an
	// app that takes them as requests (mode ring, kbridge.h version 5).
	Requests Requests `mapstructure:"requests" json:"requests"`
	// CoPP is control-plane protection on the to-kernel path (modes ring
	// and vhost; mode xdp does not use it): classes, their policers, the
	// management match.
	CoPP copp.Config `mapstructure:"copp" json:"copp"`
	// Log says what kbridge logs.
	Log Log `mapstructure:"log" json:"log"`
}

// Log configures kbridge's log (stderr; the journal under systemd).
type Log struct {
	// Level is the least level logged: debug, info, warn or error.
	Level string `mapstructure:"level" json:"level"`
}

// Requests bounds the app's answers to requests.
type Requests struct {
	// Timeout bounds the wait for the app's answer to one request; with
	// none in time the interface is set back. Many PMDs stop and start the
	// port for an MTU change, which can take seconds: KNI waited 3 s.
	Timeout time.Duration `mapstructure:"timeout" json:"timeout"`
}

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
		Interface: tapconfig.DefaultConfig(),
		Workers:   Workers{Batch: 32, MaxSegments: 16},
		Policy:    policy.Default(),
		Stats:     Stats{Socket: "/run/kbridge/kbridge.sock", Metrics: "127.0.0.1:9478"},
		Vhost:     DefaultVhost(),
		Requests:  Requests{Timeout: 3 * time.Second},
		CoPP:      copp.DefaultConfig(),
		Log:       Log{Level: "info"},
	}
}

// XDPConfig returns the xdp section with what it shares with interface.*.
func (c Config) XDPConfig() xdpconfig.Config {
	x := c.XDP
	if x.Exception == "" {
		x.Exception = c.Interface.Name
	}
	if len(x.Addresses) == 0 {
		x.Addresses = c.Interface.Addresses
	}
	x.KeepVeth = c.Interface.Keep()
	return x
}

// Validate checks every value and reports every problem at once, as a
// conferr.List of *conferr.FieldError naming the key and the value.
func (c Config) Validate() error {
	var errs conferr.Collector
	if !c.Mode.valid() {
		errs.Add("mode", c.Mode, "must be ring (DPDK rings <-> TAP), xdp (XDP redirect) or vhost (vhost-user backend of the app's virtio-user port)")
	}
	if c.Mode == ModeXDP {
		errs.Include(c.XDPConfig().Validate())
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
	if c.Requests.Timeout < 10*time.Millisecond || c.Requests.Timeout > time.Minute {
		errs.Add("requests.timeout", c.Requests.Timeout, "must be between 10ms and 1m (the app answers from its control path; an MTU change may restart its port)")
	}
	switch {
	case c.Port == "" && !c.Discover:
		errs.Addf("port", c.Port, "must be 1 to %d characters, the name given to kbridge_port_create() (empty only with discover: true)", limits.PortNameMax)
	case len(c.Port) > limits.PortNameMax:
		errs.Addf("port", c.Port, "must be 1 to %d characters, the name given to kbridge_port_create()", limits.PortNameMax)
	}
	errs.Include(c.Interface.Validate("interface"))
	if c.ServesMany() && c.Mode != ModeRing && c.Mode != "" {
		key, val := "discover", any(c.Discover)
		if len(c.Ports) > 0 {
			key, val = "ports", "["+c.Ports[0].Port+" ...]"
		}
		errs.Addf(key, val, "serves several ports of an app in mode ring only, not in mode %s", c.Mode)
	}
	c.portSpecs(&errs)
	online := onlineCPUs()
	for i, cpu := range c.Workers.CPUs {
		if !slices.Contains(online, cpu) {
			errs.Addf(conferr.Index("workers.cpus", i), cpu, "not an online CPU: this machine's online CPUs are %s", cpulist.Format(online))
		}
	}
	if c.Workers.Batch < 1 || c.Workers.Batch > limits.MaxBatch {
		errs.Addf("workers.batch", c.Workers.Batch, "must be between 1 and %d", limits.MaxBatch)
	}
	if c.Workers.MaxSegments < 1 || c.Workers.MaxSegments > limits.MaxSegments {
		errs.Addf("workers.max_segments", c.Workers.MaxSegments, "must be between 1 and %d", limits.MaxSegments)
	}
	errs.Include(c.Policy.Validate("policy"))
	errs.Include(c.CoPP.Validate("copp"))
	if _, err := logging.ParseLevel(c.Log.Level); err != nil {
		errs.Add("log.level", c.Log.Level, "must be "+strings.Join(logging.Levels, ", ")+" (the least level logged)")
	}
	if c.Stats.Socket == "" {
		errs.Add("stats.socket", c.Stats.Socket, "kbridge needs a control socket path")
	} else if c.Mode == ModeVhost && filepath.Clean(c.Stats.Socket) == filepath.Clean(c.VhostSocket()) {
		errs.Add("stats.socket", c.Stats.Socket, "is the vhost-user socket too (vhost.socket): give each its own path")
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

// Keys lists every configuration key, sorted, for documentation and tests.
func Keys() []string {
	v := viper.New()
	setDefaults(v, Default())
	keys := v.AllKeys()
	sort.Strings(keys)
	return slices.Compact(keys)
}

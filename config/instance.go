package config

// Instances: several kbridges on one host, one per app port, each started
// as systemd's kbridge@NAME.service. An instance reads its own file over
// defaults of its own, so that two of them never claim the same interface,
// port name or control socket unless a file says so.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kbridge/kbridge/internal/limits"
)

// ErrInstanceName means an instance name kbridge cannot use.
var ErrInstanceName = errors.New("invalid instance name")

// CheckInstance returns nil when name can name an instance: any name the
// kernel accepts for an interface (limits.CheckIfName), since an instance's
// name is its interface's and its port's (at most 15 bytes both), DPVS's
// "dpdk0.kni" among them. The kernel's rule leaves out '/', "." and "..",
// so the name is one path element of /etc/kbridge/NAME.yaml and
// /run/kbridge/NAME; its unit is kbridge@$(systemd-escape NAME).service.
func CheckInstance(name string) error {
	if err := limits.CheckIfName(name); err != nil {
		return fmt.Errorf("%w %q: %w (it names the port, the interface and the unit kbridge@NAME.service)", ErrInstanceName, name, err)
	}
	if name == "kbridge" {
		// Its file would be the plain kbridge's, /etc/kbridge/kbridge.yaml.
		return fmt.Errorf("%w %q: the plain kbridge's (kbridge.service, /etc/kbridge/kbridge.yaml); name the instance after its port", ErrInstanceName, name)
	}
	return nil
}

// PlainDefaults names the keys of c that hold the plain kbridge's default
// while an instance's own default differs: what a copy of the plain
// example file (deploy/kbridge.yaml) brings into an instance's file, where
// it makes the instance claim the plain kbridge's port, interface or
// socket. Empty for the plain kbridge.
func PlainDefaults(c Config, instance string) []string {
	if instance == "" {
		return nil
	}
	plain := Default()
	own, err := DefaultFor(instance)
	if err != nil {
		return nil
	}
	var keys []string
	for _, k := range []struct {
		key             string
		got, plain, own string
	}{
		{"port", c.Port, plain.Port, own.Port},
		{"interface.name", c.Interface.Name, plain.Interface.Name, own.Interface.Name},
		{"stats.socket", c.Stats.Socket, plain.Stats.Socket, own.Stats.Socket},
		{"stats.metrics", c.Stats.Metrics, plain.Stats.Metrics, own.Stats.Metrics},
	} {
		if k.got == k.plain && k.plain != k.own {
			keys = append(keys, fmt.Sprintf("%s: %q", k.key, k.got))
		}
	}
	return keys
}

// Path returns the configuration file of an instance, or of the plain
// kbridge when instance is "".
func Path(instance string) string {
	if instance == "" {
		return "/etc/kbridge/kbridge.yaml"
	}
	return "/etc/kbridge/" + instance + ".yaml"
}

// DefaultFor returns the configuration an empty file gets for an instance,
// or Default() when instance is "". An instance's port and interface are
// named after it, its control socket is /run/kbridge/NAME/control.sock (a
// directory of its own: mode vhost's socket defaults to
// /run/kbridge/<interface>.sock) and its metrics listener is off: no port
// number can be distinct for every name without the instances agreeing on
// it, and a clash would be a failed start, so each instance's file names a
// port of its own (docs/CONFIG.md).
func DefaultFor(instance string) (Config, error) {
	d := Default()
	if instance == "" {
		return d, nil
	}
	if err := CheckInstance(instance); err != nil {
		return Config{}, err
	}
	d.Port = instance
	d.Interface.Name = instance
	d.Stats.Socket = "/run/kbridge/" + instance + "/control.sock"
	d.Stats.Metrics = ""
	return d, nil
}

// LoadFor reads the YAML file at path over the defaults of an instance
// (DefaultFor), as Load does over Default().
func LoadFor(path, instance string) (Config, error) {
	d, err := DefaultFor(instance)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return loadOver(path, d)
}

// Clash is another configuration file beside one kbridge's that claims the
// same interface, port or control socket: two kbridges started from the
// two would fight over it (the second one's interface is refused as in use).
type Clash struct {
	File string // the other file
	Key  string // interface.name, port or stats.socket
	Val  string
}

// Clashes reads the other configuration files in path's directory (each
// *.yaml as the plain kbridge's, kbridge.yaml, or as the instance its name
// names) and returns those that claim what c claims. Files that do not
// load are skipped: their own kbridge reports them.
func Clashes(path string, c Config) []Clash {
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.yaml"))
	self, _ := filepath.Abs(path)
	var out []Clash
	for _, f := range files {
		if abs, _ := filepath.Abs(f); abs == self {
			continue
		}
		instance := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if instance == "kbridge" {
			instance = ""
		} else if CheckInstance(instance) != nil {
			continue
		}
		o, err := LoadFor(f, instance)
		if err != nil {
			continue
		}
		for _, k := range []struct{ key, mine, theirs string }{
			{"interface.name", c.Interface.Name, o.Interface.Name},
			{"port", c.Port, o.Port},
			{"stats.socket", c.Stats.Socket, o.Stats.Socket},
		} {
			if k.key == "port" && (c.Mode != ModeRing || o.Mode != ModeRing || c.DPDK.FilePrefix != o.DPDK.FilePrefix) {
				continue // a port name is one app's (its file prefix)
			}
			if k.mine == k.theirs {
				out = append(out, Clash{File: f, Key: k.key, Val: k.mine})
			}
		}
	}
	return out
}

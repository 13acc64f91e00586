// Package daemon runs kbridge: StartWith brings up the data path of the
// configured mode as a Runner, and Serve runs everything around it until a
// signal, a fault or the path's own end: the control socket (mode 0600, root
// or the daemon's user only, a live or foreign path refused), the metrics,
// reloads on SIGHUP and file changes, systemd's READY/STATUS/WATCHDOG
// notifications and the stop. Ring (the app's DPDK rings) and Vhost (a
// vhost-user backend for the app's virtio-user port) share one TAP path: the
// interface, one bridge.Worker per queue, the interface's keeper, the live
// interface.offload switch, the stop order and the status base; each adds
// only its app sides, its watchers and its status extras. XDP is the XDP
// redirect mode. Reload errors are a *ConfigError (nothing changed) or a
// *RestartError (live keys applied, the named ones need a restart). See
// docs/ARCHITECTURE.md, "The lifecycle" and "Faults".
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kbridge/kbridge/config"
)

// Runner is a running data path, whatever the mode: ring (*Ring), xdp
// (*XDP), vhost (*Vhost), and whatever comes next. Serve runs everything around it.
type Runner interface {
	// Reload applies what of cfg can change live (ring and vhost:
	// policy.*, copp.* and interface.offload; xdp: xdp.fast_path and
	// xdp.xsk_fallback). An invalid cfg, or one of
	// another mode, changes nothing: the error is a *ConfigError.
	// Otherwise the live part is applied, and if keys that cannot change
	// live differ too the error is a *RestartError naming them.
	Reload(cfg config.Config) error
	// Alive is the systemd watchdog's question: has the data path
	// advanced since the last call? (ring and vhost: every worker's loop,
	// parked workers being poked; xdp: the program is still attached.)
	Alive() bool
	// Done is closed when the data path stops by itself (workers died,
	// the app exited), and once Stop has stopped it.
	Done() <-chan struct{}
	// Err says why Done closed by itself; nil otherwise.
	Err() error
	// Status is what the control socket serves (JSON).
	Status() any
	// Summary is one line for systemd's STATUS=.
	Summary() string
	// Collector exports the counters to Prometheus.
	Collector() prometheus.Collector
	// Stop stops the data path and removes what it created. It may be
	// called more than once.
	Stop() error
}

// StartOpts says where a start finds an interface to adopt rather than
// make (adopt.go). Modes ring and vhost adopt; mode xdp refuses Takeover
// and closes Stored.
type StartOpts struct {
	// Takeover asks the kbridge serving on stats.socket to hand the port
	// and the interface over (kbridge run --takeover).
	Takeover bool
	// Stored are the fds systemd passed from the unit's fd store, or
	// those this kbridge kept when a takeover was not confirmed
	// (TakenBack).
	Stored []ListenFd
	// TakenBackFrom is the pid whose takeover was not confirmed, when
	// Stored are this kbridge's own queues taken back; 0 otherwise.
	TakenBackFrom int
	// EALAttempt counts the starts of EAL this pid made before this
	// image (EALAttempt): each failed on the app's addresses (Reattach).
	EALAttempt int
	// hinted makes the interface's MTU and admin state the port's own
	// wish (kbridge_port_set_interface()) where it has one: a port set's
	// discovered ports.
	hinted bool
}

// StartWith starts the data path cfg.Mode names, adopting an interface
// where opts says (StartOpts). progress is told what it waits for
// (systemd's STATUS=). It is given up when ctx ends (a SIGTERM during
// start-up): a wait for the primary or the port ends at once, and the steps
// after the EAL check ctx before they take anything. A step in progress
// (the EAL's init, a TAP being made) finishes first; what the path took by
// then is the caller's to Stop, since StartWith then returns it running.
func StartWith(ctx context.Context, cfg config.Config, log *slog.Logger, progress func(string), opts StartOpts) (Runner, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if cfg.Mode == config.ModeXDP {
		if opts.Takeover {
			return nil, &ConfigError{fmt.Errorf("--takeover: mode %s cannot take an interface over (modes ring and vhost)", cfg.Mode)}
		}
		closeStored(opts.Stored, log)
	}
	// No typed nil in the interface: a failed start returns a nil Runner.
	switch cfg.Mode {
	case config.ModeRing, "":
		if cfg.ServesMany() {
			s, err := startPortSet(ctx, cfg, log, progress, opts)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
		r, err := startRing(ctx, cfg, log, progress, opts)
		if err != nil {
			return nil, err
		}
		return r, nil
	case config.ModeXDP:
		x, err := startXDP(cfg, log)
		if err != nil {
			return nil, err
		}
		return x, nil
	case config.ModeVhost:
		v, err := startVhost(cfg, log, progress, opts)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
	return nil, &ConfigError{fmt.Errorf("mode: %q: must be ring, xdp or vhost", cfg.Mode)}
}

// ConfigError is an error in the configuration: kbridge run exits 2 on it.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// IsConfigError reports whether err is, or wraps, a *ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

// RestartError says which changed keys a reload could not apply: they take
// effect at the next start. What could change live was applied.
type RestartError struct {
	Keys []string // dotted keys, e.g. interface.mtu
}

func (e *RestartError) Error() string {
	return strings.Join(e.Keys, ", ") + ": changes need a restart (the rest was applied)"
}

// checkReload refuses a new configuration that cannot be applied at all.
func checkReload(old, cfg config.Config) error {
	if err := cfg.Validate(); err != nil {
		return &ConfigError{err}
	}
	if cfg.Mode != old.Mode {
		return &ConfigError{fmt.Errorf("mode: %q: running in mode %s; changing modes needs a restart", cfg.Mode, old.Mode)}
	}
	return nil
}

// restartNeeded returns a *RestartError for the keys that differ between
// old and cfg outside the live prefixes, or nil.
func restartNeeded(old, cfg config.Config, live ...string) error {
	var keys []string
	for _, k := range ChangedKeys(old, cfg) {
		isLive := false
		for _, p := range live {
			if k == p || strings.HasPrefix(k, p+".") {
				isLive = true
			}
		}
		if !isLive {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	return &RestartError{Keys: keys}
}

// ChangedKeys lists the configuration keys (as written in the file, e.g.
// interface.mtu) whose values differ between a and b. A list is one key.
func ChangedKeys(a, b config.Config) []string {
	var keys []string
	var walk func(prefix string, a, b reflect.Value)
	walk = func(prefix string, a, b reflect.Value) {
		if a.Kind() != reflect.Struct {
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				keys = append(keys, prefix)
			}
			return
		}
		for i := 0; i < a.NumField(); i++ {
			f := a.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if prefix != "" {
				name = prefix + "." + name
			}
			walk(name, a.Field(i), b.Field(i))
		}
	}
	walk("", reflect.ValueOf(a), reflect.ValueOf(b))
	return keys
}

package main

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/pflag"

	"github.com/kbridge/kbridge/config"
)

// configSource is the --config and --instance pair every subcommand that
// reads the configuration takes. --instance NAME picks an instance's file
// (/etc/kbridge/NAME.yaml) and defaults (config.DefaultFor), as
// kbridge@NAME.service runs it; --config still names another file.
type configSource struct {
	path, instance *string
	metrics        string // kbridge run --metrics: stats.metrics over the file's
}

func addConfigSource(fs *pflag.FlagSet) configSource {
	return configSource{
		path:     fs.String("config", "", "the configuration `file` (default /etc/kbridge/kbridge.yaml, or /etc/kbridge/NAME.yaml with --instance; when that default is missing, the defaults)"),
		instance: fs.String("instance", "", "the instance `NAME` of kbridge@NAME.service: its file and defaults (port, interface, control socket named after it)"),
	}
}

// file returns the configuration file in force.
func (s configSource) file() string {
	if *s.path != "" {
		return *s.path
	}
	return config.Path(*s.instance)
}

// given reports whether --config or --instance was given.
func (s configSource) given() bool { return *s.path != "" || *s.instance != "" }

// withMetrics returns s with stats.metrics set to addr over every file it
// loads ("": the file's).
func (s configSource) withMetrics(addr string) configSource {
	s.metrics = addr
	return s
}

// load reads the file over the instance's defaults. A default file
// (no --config) that does not exist gives the defaults, as an empty file
// would: missing reports it. A file named by --config must exist.
func (s configSource) load() (cfg config.Config, missing bool, err error) {
	cfg, err = config.LoadFor(s.file(), *s.instance)
	if errors.Is(err, fs.ErrNotExist) && *s.path == "" {
		cfg, err = s.defaults()
		missing = err == nil
	}
	if err != nil {
		return cfg, false, err
	}
	cfg, err = s.overMetrics(cfg)
	return cfg, missing, err
}

// overMetrics puts --metrics over cfg's stats.metrics, checked as the key.
func (s configSource) overMetrics(cfg config.Config) (config.Config, error) {
	if s.metrics == "" {
		return cfg, nil
	}
	cfg.Stats.Metrics = s.metrics
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("--metrics %s: %w", s.metrics, err)
	}
	return cfg, nil
}

// loadFile reads another file over the same defaults: a reload's. The
// default file, missing, is the defaults, as at start.
func (s configSource) loadFile(path string) (config.Config, error) {
	cfg, err := config.LoadFor(path, *s.instance)
	if errors.Is(err, fs.ErrNotExist) && *s.path == "" && path == s.file() {
		cfg, err = s.defaults()
	}
	if err != nil {
		return cfg, err
	}
	return s.overMetrics(cfg)
}

// defaults returns what an empty file gives.
func (s configSource) defaults() (config.Config, error) {
	return config.DefaultFor(*s.instance)
}

package main

import (
	"flag"
	"fmt"

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

func addConfigSource(fs *flag.FlagSet, what string) configSource {
	return configSource{
		path:     fs.String("config", "", what+" `file` (default /etc/kbridge/kbridge.yaml, or /etc/kbridge/NAME.yaml with --instance)"),
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

// load reads the file over the instance's defaults.
func (s configSource) load() (config.Config, error) {
	return s.loadFile(s.file())
}

// loadFile reads another file over the same defaults: a reload's.
func (s configSource) loadFile(path string) (config.Config, error) {
	c, err := config.LoadFor(path, *s.instance)
	if err != nil || s.metrics == "" {
		return c, err
	}
	c.Stats.Metrics = s.metrics
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("--metrics %s: %w", s.metrics, err)
	}
	return c, nil
}

// defaults returns what an empty file gives.
func (s configSource) defaults() (config.Config, error) {
	return config.DefaultFor(*s.instance)
}

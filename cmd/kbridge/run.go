package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
)

// runCmd plumbs: it loads the configuration, claims the control socket,
// starts the data path and hands it to daemon.Serve, which owns the rest.
func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "/etc/kbridge/kbridge.yaml", "configuration `file`")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := config.Load(*path)
	if err != nil {
		return usageError{err}
	}
	// The socket first: a second kbridge on the same socket is refused
	// before it touches the app's port or the interface.
	ctl, err := daemon.ListenControl(cfg.Stats.Socket, log)
	if err != nil {
		return err
	}
	r, err := daemon.Start(cfg, log, func(s string) { daemon.Notify("STATUS=" + s) })
	if err != nil {
		_ = ctl.Close()
		return err
	}
	return daemon.Serve(context.Background(), r, daemon.Options{
		ConfigPath: *path,
		Control:    ctl,
		Metrics:    cfg.Stats.Metrics,
		Log:        log,
	})
}

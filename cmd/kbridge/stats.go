package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tap"
)

func statsCmd(args []string) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	path := fs.String("config", "", "read the socket path from this configuration `file`")
	sock := fs.String("socket", config.Default().Stats.Socket, "control socket `path`")
	live := fs.Bool("watch", false, "redraw live per-queue rates, like top")
	interval := fs.Duration("interval", time.Second, "refresh `interval` with --watch")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *path != "" {
		cfg, err := config.Load(*path)
		if err != nil {
			return usageError{err}
		}
		*sock = cfg.Stats.Socket
	}
	if *live {
		if *interval < 100*time.Millisecond {
			return usageError{fmt.Errorf("--interval %v: must be at least 100ms", *interval)}
		}
		return watch(*sock, *interval, os.Stdout)
	}
	st, err := daemon.ReadStatus(*sock)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}

func cleanupCmd(args []string) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	path := fs.String("config", "/etc/kbridge/kbridge.yaml", "configuration `file`")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return usageError{err}
	}
	if err := tap.Remove(cfg.Interface.Name); err != nil {
		return err
	}
	if _, err := daemon.ReadStatus(cfg.Stats.Socket); err != nil {
		_ = os.Remove(cfg.Stats.Socket)
	}
	fmt.Println("kbridge: cleaned up", cfg.Interface.Name)
	return nil
}

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
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
	raw, err := daemon.ReadStatusRaw(*sock)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = out.WriteTo(os.Stdout)
	return err
}

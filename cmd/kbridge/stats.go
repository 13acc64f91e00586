package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
)

func statsCmd(args []string) error {
	fset := flag.NewFlagSet("stats", flag.ContinueOnError)
	src := addConfigSource(fset, "read the socket path from this configuration")
	sock := fset.String("socket", "", "control socket `path` (default "+config.Default().Stats.Socket+", or the instance's)")
	live := fset.Bool("watch", false, "redraw live per-queue rates, like top")
	interval := fset.Duration("interval", time.Second, "refresh `interval` with --watch")
	if err := fset.Parse(args); err != nil {
		return usageError{err}
	}
	switch {
	case *sock != "" && src.given():
		return usageError{fmt.Errorf("--socket names the socket itself: give it or --config/--instance, not both")}
	case *sock != "":
	case *src.path != "":
		cfg, err := src.load()
		if err != nil {
			return usageError{err}
		}
		*sock = cfg.Stats.Socket
	default:
		// The defaults' socket: an instance's file may set another, and
		// is read when it exists.
		cfg, err := src.defaults()
		if err != nil {
			return usageError{err}
		}
		*sock = cfg.Stats.Socket
		if c, err := src.load(); err == nil {
			*sock = c.Stats.Socket
		} else if *src.instance != "" && !errors.Is(err, fs.ErrNotExist) {
			return usageError{err}
		}
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

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tap"
)

func cleanupCmd(args []string) error {
	fset := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	src := addConfigSource(fset, "configuration")
	if err := fset.Parse(args); err != nil {
		return usageError{err}
	}
	cfg, err := src.load()
	if errors.Is(err, fs.ErrNotExist) && *src.instance != "" && *src.path == "" {
		// An instance's defaults name its interface and socket alone.
		cfg, err = src.defaults()
	}
	if err != nil {
		return usageError{err}
	}
	return cleanup(cfg, os.Stdout, tap.RemoveOrphan)
}

// cleanup removes the TAP interface and the control socket a crashed daemon
// left behind. While a daemon answers on the control socket it removes
// nothing: the interface is that daemon's. A silent socket proves nothing
// about the interface (another kbridge, or another tool, may use the same
// name: systemd runs this after a refused start too), so removeTAP
// (tap.RemoveOrphan) deletes it only when nobody uses it; one in use
// (tap.ErrInUse) is left in place and said so, which is no failure.
func cleanup(cfg config.Config, out io.Writer, removeTAP func(name string) error) error {
	sock := cfg.Stats.Socket
	if daemon.ControlAnswers(sock) {
		return fmt.Errorf("cleanup refused: a running kbridge answers on %s; stop it first (it removes %s itself when it stops)",
			sock, cfg.Interface.Name)
	}
	left := false
	if err := removeTAP(cfg.Interface.Name); errors.Is(err, tap.ErrInUse) {
		fmt.Fprintf(out, "kbridge: left %s in place: %v\n", cfg.Interface.Name, err)
		left = true
	} else if err != nil {
		return err
	}
	if fi, err := os.Lstat(sock); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return fmt.Errorf("stats.socket: %s is not a socket: left in place", sock)
		}
		if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if !left {
		fmt.Fprintln(out, "kbridge: cleaned up", cfg.Interface.Name)
	}
	return nil
}

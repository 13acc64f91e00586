package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
)

func cleanupCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the TAP interface and control socket a crashed daemon left",
		Long: `Remove the TAP interface and the control socket a crashed kbridge left behind,
and say what was removed or that there was nothing to remove. Refused while a
kbridge answers on the control socket; an interface something still holds is
left in place, and said so. The unit runs it after every stop (ExecStopPost=).`,
	}
	src := addConfigSource(c.Flags())
	c.RunE = func(c *cobra.Command, _ []string) error {
		cfg, _, err := src.load()
		if err != nil {
			return usageError{err}
		}
		return cleanup(cfg, c.OutOrStdout(), removeOrphan)
	}
	return c
}

// cleanup removes the TAP interface and the control socket a crashed daemon
// left behind, and says what it removed, or that there was nothing. While a
// daemon answers on the control socket it removes nothing: the interface is
// that daemon's. A silent socket proves nothing about the interface
// (another kbridge, or another tool, may use the same name: systemd runs
// this after a refused start too), so removeTAP (removeOrphan) deletes it
// only when nobody uses it; one in use (daemon.ErrInterfaceInUse) is left in place and
// said so, which is no failure. removeTAP reports whether there was an
// interface to remove.
func cleanup(cfg config.Config, out io.Writer, removeTAP func(name string) (bool, error)) error {
	sock, name := cfg.Stats.Socket, cfg.Interface.Name
	if daemon.ControlAnswers(sock) {
		return fmt.Errorf("cleanup refused: a running kbridge answers on %s; stop it first (it removes %s itself when it stops)",
			sock, name)
	}
	var did, none []string
	switch found, err := removeTAP(name); {
	case errors.Is(err, daemon.ErrInterfaceInUse):
		fmt.Fprintf(out, "kbridge: left %s in place: %v\n", name, err)
	case err != nil:
		return err
	case found:
		did = append(did, "removed the interface "+name)
	default:
		none = append(none, "no interface "+name)
	}
	fi, err := os.Lstat(sock)
	switch {
	case err != nil:
		none = append(none, "no control socket "+sock)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("stats.socket: %s is not a socket: left in place", sock)
	default:
		if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		did = append(did, "removed the stale control socket "+sock)
	}
	switch {
	case len(did) > 0:
		fmt.Fprintf(out, "kbridge: %s\n", strings.Join(did, ", "))
	case len(none) == 2:
		fmt.Fprintf(out, "kbridge: nothing to clean up: %s\n", strings.Join(none, ", "))
	}
	return nil
}

// removeOrphan removes the TAP called name when nothing holds it
// (daemon.RemoveOrphanInterface), and reports whether there was one.
func removeOrphan(name string) (bool, error) {
	if _, err := os.Lstat("/sys/class/net/" + name); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return true, daemon.RemoveOrphanInterface(name)
}

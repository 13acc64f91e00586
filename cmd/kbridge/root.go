package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kbridge/kbridge/internal/conferr"
)

// The command line is spf13/cobra's over pflag: GNU-style double-dash
// flags anywhere on the line, help on stdout (exit 0), unknown commands,
// flags and arguments refused (exit 2), and the man pages (man.go) and
// shell completion (`kbridge completion bash|zsh`) made from these same
// definitions (docs/ARCHITECTURE.md says why cobra).

const rootLong = `kbridge moves a DPDK application's exception traffic (ARP, SSH, BGP, NFS:
what the app does not handle itself) between the app and a kernel TAP
interface, kb0, and back: the exception path KNI was, as a DPDK secondary
process beside the app.

The configuration is /etc/kbridge/kbridge.yaml unless --config names
another; when that default file is missing, every key has its default. With
--instance NAME (kbridge@NAME.service, one kbridge per port of an app with
several) the file is /etc/kbridge/NAME.yaml, and the port, the interface and
the control socket (/run/kbridge/NAME/control.sock) are named after it
unless the file says otherwise.

Exit status: 0 on success (and on a requested stop); 2 for a bad command line
or configuration, every wrong key and value named, and for a DPDK other
than the app's; 1 for anything else (the app exited, the host is not ready).
kbridge check exits 0, 1 (the host is not ready) or 2 (the configuration is
wrong).`

// extraCommands are added by files behind build tags (man.go).
var extraCommands []func() *cobra.Command

// newRoot returns the command tree. started turns true once a command's
// own code runs: an error before that is the command line's (exit 2).
func newRoot() (*cobra.Command, *bool) {
	started := new(bool)
	root := &cobra.Command{
		Use:   "kbridge",
		Short: "The exception path between a DPDK application and the Linux kernel",
		Long:  rootLong,
		// Errors are printed once, by execute, without the usage after
		// them: a daemon's error is no reason to show every flag.
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			*started = true
			return nil
		},
		Version: versionLine(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	root.CompletionOptions.HiddenDefaultCmd = false
	root.AddCommand(runCommand(), checkCommand(), statsCommand(), doctorCommand(), cleanupCommand(), versionCommand())
	for _, extra := range extraCommands {
		root.AddCommand(extra())
	}
	for _, c := range root.Commands() {
		if c.Args == nil {
			c.Args = noArgs
		}
	}
	return root, started
}

// noArgs refuses positional arguments: every kbridge command takes flags
// only, and a word left over is a mistake (a flag's value split off, a
// missing "--"), never to be dropped silently.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q (see %s --help)", c.CommandPath(), strings.Join(args, " "), c.CommandPath())}
	}
	return nil
}

// durationFlag is a pflag.Value for a duration written with its unit;
// a bare number is refused with the unit it lacks named.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string { return f.d.String() }
func (f durationFlag) Type() string   { return "duration" }
func (f durationFlag) Set(s string) error {
	d, err := conferr.ParseDuration(s, "s")
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// addDuration defines a duration flag on fs.
func addDuration(fs *pflag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	d := value
	fs.Var(durationFlag{&d}, name, usage)
	return &d
}

// Command kbridge moves a DPDK application's exception traffic to and from
// the Linux kernel: the replacement for KNI. It is plumbing only: the
// command line (spf13/cobra, root.go: flags anywhere, --help on stdout
// with exit 0, unknown arguments refused, man pages and shell completion
// from the same definitions), the configuration and exit codes (2 for a
// bad command line or configuration, 1 otherwise), with one file per
// subcommand: run.go (claim the control socket, daemon.StartWith,
// daemon.Serve), check.go (the file and the host, without starting),
// stats.go and watch.go (the daemon's counters as JSON, or live rates),
// doctor.go (package doctor's host checks), cleanup.go (remove what a
// crashed daemon left, refused while one answers), version.go. See
// README.md for use and docs/ARCHITECTURE.md for the design.
package main

import (
	"errors"
	"io"
	"os"
	"strconv"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/internal/logging"
)

// version is set by the Makefile (-ldflags -X main.version=...), from
// deploy/version.sh: the one version string of a build.
var version = "dev"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the command line args and returns the exit status, having
// printed an error, if any, on stderr (with the journal's error priority
// when stderr is the journal).
func execute(args []string, stdout, stderr io.Writer) int {
	root, started := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ex exitError
	if errors.As(err, &ex) {
		return ex.code // said what it had to say itself (doctor, check)
	}
	logging.PrintError(stderr, "kbridge: "+err.Error())
	if !*started {
		// Refused before any command ran: the command line is wrong
		// (an unknown command, flag or argument).
		return 2
	}
	return exitCode(err)
}

// usageError marks errors in the command line or configuration (exit 2);
// so does a *daemon.ConfigError.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// exitError ends the command with code, the command having printed why.
type exitError struct{ code int }

func (e exitError) Error() string { return "exit status " + strconv.Itoa(e.code) }

func exitCode(err error) int {
	var ue usageError
	// A DPDK version mismatch (ring mode) is no fault a restart mends.
	if errors.As(err, &ue) || daemon.IsConfigError(err) || errors.Is(err, daemon.ErrVersionMismatch) {
		return 2
	}
	return 1
}

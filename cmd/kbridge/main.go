// Command kbridge moves a DPDK application's exception traffic to and from
// the Linux kernel: the replacement for KNI. It is plumbing only: flags,
// configuration and exit codes (2 for a bad command line or configuration,
// 1 otherwise), with one file per subcommand: run.go (claim the control
// socket, daemon.Start, daemon.Serve), stats.go and watch.go (the daemon's
// counters as JSON, or live rates), doctor.go (package doctor's host
// checks), cleanup.go (remove what a crashed daemon left, refused while one
// answers). See README.md for use and docs/ARCHITECTURE.md for the design.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring"
)

// version is set by the Makefile (-ldflags -X main.version=...).
var version = "dev"

const usage = `kbridge: the exception path between a DPDK application and the Linux kernel

usage:
  kbridge run     [--config FILE] [--instance NAME] [--takeover]
                                    run the bridge (a DPDK secondary process);
                                    --takeover: take port and interface over
                                    from the kbridge serving them (mode ring)
  kbridge stats   [--config FILE] [--instance NAME] [--socket PATH] [--watch]
                                    show the running daemon's counters
  kbridge doctor  [--config FILE] [--instance NAME] [--root DIR] [--json] [--fix] [--nic IF]
                                    check the host: ENA write-combining, HZ, hugepages,
                                    CPUs, IRQ affinity, XDP, the CoPP class policed now
  kbridge cleanup [--config FILE] [--instance NAME]
                                    remove what a crashed daemon left behind
                                    (refused while a daemon answers on the socket)
  kbridge version

--config defaults to /etc/kbridge/kbridge.yaml. --instance NAME is one of
several kbridges, one per port (kbridge@NAME.service): its file is
/etc/kbridge/NAME.yaml, and its port, interface and control socket
(/run/kbridge/NAME/control.sock) are named after it unless the file says.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "run":
		err = runCmd(args)
	case "stats":
		err = statsCmd(args)
	case "doctor":
		err = doctorCmd(args)
	case "cleanup":
		err = cleanupCmd(args)
	case "version", "--version":
		fmt.Println("kbridge", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "kbridge: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kbridge:", err)
		os.Exit(exitCode(err))
	}
}

// usageError marks errors in the command line or configuration (exit 2);
// so does a *daemon.ConfigError.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func exitCode(err error) int {
	var ue usageError
	// A DPDK version mismatch (ring mode) is no fault a restart mends.
	if errors.As(err, &ue) || daemon.IsConfigError(err) || errors.Is(err, ring.ErrVersionMismatch) {
		return 2
	}
	return 1
}

package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/kbridge/kbridge/daemon"
)

// versionLine is what `kbridge version` and `kbridge --version` print:
// kbridge's version (deploy/version.sh: the .deb's and kbridge.pc's too),
// the DPDK it was built against (mode ring serves only an app on that one)
// and the Go that built it.
func versionLine() string {
	return fmt.Sprintf("kbridge %s\nDPDK %s\n%s %s/%s", version, daemon.DPDKBuiltWith(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kbridge's version, the DPDK it was built against and its Go",
		Long: `Print kbridge's version (the Debian package's and kbridge.pc's), the DPDK it
was built against (in mode ring the app must run that same DPDK) and the Go
release that built it, one a line.`,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(c.OutOrStdout(), versionLine())
			return err
		},
	}
}

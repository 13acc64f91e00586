package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
)

func statsCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "stats",
		Short: "Show the running daemon's counters as JSON, or live rates like top",
		Long: `Show the running kbridge's counters (its control socket's status) as JSON:
packets, bytes, drops by reason, offloads, parks and wakeups per queue, CoPP.
With --watch, redraw per-queue rates every --interval, like top. The socket is
the configuration's stats.socket (--config, --instance), or --socket.`,
		Example: `  kbridge stats
  kbridge stats --instance kb1 --watch --interval 500ms`,
	}
	src := addConfigSource(c.Flags())
	sock := c.Flags().String("socket", "", "the control socket `path` (default "+config.Default().Stats.Socket+", or the instance's)")
	live := c.Flags().Bool("watch", false, "redraw live per-queue rates, like top")
	interval := addDuration(c.Flags(), "interval", time.Second, "the refresh interval of --watch, at least 100ms")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return statsCmd(src, *sock, *live, *interval, c.OutOrStdout())
	}
	return c
}

func statsCmd(src configSource, sock string, live bool, interval time.Duration, stdout io.Writer) error {
	if sock != "" && src.given() {
		return usageError{fmt.Errorf("--socket names the socket itself: give it or --config/--instance, not both")}
	}
	if sock == "" {
		cfg, _, err := src.load()
		if err != nil {
			return usageError{err}
		}
		sock = cfg.Stats.Socket
	}
	if live {
		if interval < 100*time.Millisecond {
			return usageError{fmt.Errorf("--interval %v: must be at least 100ms", interval)}
		}
		return watch(sock, interval, stdout)
	}
	raw, err := daemon.ReadStatusRaw(sock)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = out.WriteTo(stdout)
	return err
}

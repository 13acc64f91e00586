//go:build kbridge_man

package main

// The man pages, one per command, made from the command tree by cobra/doc
// (make man: go run -tags kbridge_man ./cmd/kbridge gen-man DIR). Behind a
// build tag, so that the daemon carries no Markdown-to-roff converter.

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func init() { extraCommands = append(extraCommands, genManCommand) }

func genManCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write a man page per command into DIR (section 8)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			// SOURCE_DATE_EPOCH (the commit's time): the same pages for the
			// same source, as Debian's reproducible builds want.
			date := time.Now()
			if s, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
				date = time.Unix(s, 0).UTC()
			}
			root := c.Root()
			root.RemoveCommand(c)
			root.DisableAutoGenTag = true
			hdr := &doc.GenManHeader{Section: "8", Date: &date, Source: "kbridge " + version, Manual: "kbridge"}
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			return nil
		},
	}
}

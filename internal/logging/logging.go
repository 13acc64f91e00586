// Package logging makes kbridge's logger: log/slog's text on stderr. When
// stderr is the journal (systemd's JOURNAL_STREAM names its device and
// inode), each line goes without a time of its own, since the journal
// stamps every line, and with the "<N>" syslog priority of its level in
// front (sd-daemon(3)), which journald strips and keeps as the line's
// priority: `journalctl -p err -u kbridge` then shows kbridge's errors.
package logging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Levels are the names log.level and --log-level take, least first.
var Levels = []string{"debug", "info", "warn", "error"}

// ErrLevel means a log level kbridge does not know.
var ErrLevel = errors.New("unknown log level")

// ParseLevel reads one of Levels.
func ParseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%w %q: must be %s", ErrLevel, s, strings.Join(Levels, ", "))
}

// New returns a logger writing to f at level and up, for the journal when
// f is the journal's stream (ToJournal).
func New(f *os.File, level slog.Leveler) *slog.Logger {
	return NewFor(f, ToJournal(f), level)
}

// NewFor returns a logger writing to w, in the journal's form when
// journal is set.
func NewFor(w io.Writer, journal bool, level slog.Leveler) *slog.Logger {
	opts := slog.HandlerOptions{Level: level}
	if !journal {
		return slog.New(slog.NewTextHandler(w, &opts))
	}
	opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{} // the journal stamps every line
		}
		return a
	}
	return slog.New(&journalHandler{mu: new(sync.Mutex), w: w, opts: opts})
}

// ToJournal reports whether f is the stream systemd connected to the
// journal: JOURNAL_STREAM is "<device>:<inode>" of it, and a process that
// redirected its stderr elsewhere (a pipe, a file) keeps the variable, so
// the two are compared.
func ToJournal(f *os.File) bool {
	var dev, ino uint64
	if _, err := fmt.Sscanf(os.Getenv("JOURNAL_STREAM"), "%d:%d", &dev, &ino); err != nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return st.Dev == dev && st.Ino == ino
}

// Priority is the syslog priority prefix of level: "<3>" for errors,
// "<4>" warnings, "<6>" information, "<7>" debugging.
func Priority(level slog.Level) string {
	switch {
	case level >= slog.LevelError:
		return "<3>"
	case level >= slog.LevelWarn:
		return "<4>"
	case level >= slog.LevelInfo:
		return "<6>"
	}
	return "<7>"
}

// PrintError prints one error line on w, with the error priority when w
// is the journal's stream: what a command that ends in an error says last.
func PrintError(w io.Writer, line string) {
	if f, ok := w.(*os.File); ok && ToJournal(f) {
		line = Priority(slog.LevelError) + line
	}
	fmt.Fprintln(w, line)
}

// journalHandler is slog's text handler, one line a record, with the
// record's priority in front. Each record is formatted apart (a text
// handler over its own buffer, the attributes and groups given so far
// replayed on it), so that a line's prefix and its text cannot come from
// two records written at once.
type journalHandler struct {
	mu   *sync.Mutex
	w    io.Writer
	opts slog.HandlerOptions
	with []func(slog.Handler) slog.Handler
}

func (h *journalHandler) Enabled(_ context.Context, l slog.Level) bool {
	min := slog.LevelInfo
	if h.opts.Level != nil {
		min = h.opts.Level.Level()
	}
	return l >= min
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	var buf bytes.Buffer
	buf.WriteString(Priority(r.Level))
	var th slog.Handler = slog.NewTextHandler(&buf, &h.opts)
	for _, w := range h.with {
		th = w(th)
	}
	if err := th.Handle(ctx, r); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(buf.Bytes())
	return err
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return h.and(func(th slog.Handler) slog.Handler { return th.WithAttrs(as) })
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return h.and(func(th slog.Handler) slog.Handler { return th.WithGroup(name) })
}

func (h *journalHandler) and(f func(slog.Handler) slog.Handler) slog.Handler {
	c := *h
	c.with = append(append([]func(slog.Handler) slog.Handler(nil), h.with...), f)
	return &c
}

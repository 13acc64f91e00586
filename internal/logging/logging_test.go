package logging

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Under the journal every line carries its level's syslog priority and no
// time of kbridge's own; elsewhere it is slog's plain text, time first.
func TestJournalLinesCarryTheirPriorityAndNoTime(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelDebug)
	log := NewFor(&buf, true, lv).With("instance", "kb1").WithGroup("g")
	log.Debug("d")
	log.Info("i", "k", 1)
	log.Warn("w")
	log.Error("e", "err", "boom")
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []string{
		`<7>level=DEBUG msg=d instance=kb1`,
		`<6>level=INFO msg=i instance=kb1 g.k=1`,
		`<4>level=WARN msg=w instance=kb1`,
		`<3>level=ERROR msg=e instance=kb1 g.err=boom`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, lines[i], want[i])
		}
	}
	buf.Reset()
	NewFor(&buf, false, nil).Error("e")
	if s := buf.String(); !strings.HasPrefix(s, "time=") || strings.HasPrefix(s, "<") {
		t.Errorf("off the journal: %q, want slog's text with its time", s)
	}
}

// The level in force is the LevelVar's, changed live (a reload of
// log.level).
func TestTheLevelFollowsItsVar(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar)
	log := NewFor(&buf, true, lv)
	log.Debug("hidden")
	lv.Set(slog.LevelDebug)
	log.Debug("shown")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "shown") {
		t.Errorf("got %q", s)
	}
}

// Records logged at once from many goroutines come out as whole lines,
// each with its own priority.
func TestConcurrentRecordsStayWhole(t *testing.T) {
	var buf bytes.Buffer
	log := NewFor(&buf, true, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if i%2 == 0 {
					log.Error("even")
				} else {
					log.Info("odd")
				}
			}
		}()
	}
	wg.Wait()
	for _, l := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		if l != "<3>level=ERROR msg=even" && l != "<6>level=INFO msg=odd" {
			t.Fatalf("a torn line: %q", l)
		}
	}
}

// JOURNAL_STREAM names the journal's stream by device and inode: a file
// that is that stream is the journal, another is not, and a malformed or
// missing variable is not either.
func TestToJournalComparesDeviceAndInode(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := os.Create(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	if !ToJournal(f) || ToJournal(other) {
		t.Errorf("ToJournal: the stream %v, another file %v", ToJournal(f), ToJournal(other))
	}
	for _, v := range []string{"", "x:y", "1"} {
		t.Setenv("JOURNAL_STREAM", v)
		if ToJournal(f) {
			t.Errorf("JOURNAL_STREAM=%q taken as the journal", v)
		}
	}
}

func TestParseLevel(t *testing.T) {
	for i, s := range Levels {
		l, err := ParseLevel(s)
		if err != nil || (i > 0 && l <= mustLevel(t, Levels[i-1])) {
			t.Errorf("ParseLevel(%q) = %v, %v", s, l, err)
		}
	}
	if _, err := ParseLevel("verbose"); err == nil || !strings.Contains(err.Error(), `"verbose": must be debug, info, warn, error`) {
		t.Errorf("ParseLevel(verbose) = %v", err)
	}
}

func mustLevel(t *testing.T, s string) slog.Level {
	l, err := ParseLevel(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

package sockfile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	if err := RemoveStale(filepath.Join(dir, "none"), time.Second); err != nil {
		t.Errorf("a missing path: %v, want nil", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveStale(file, time.Second); !errors.Is(err, ErrNotSocket) {
		t.Errorf("a regular file: %v, want ErrNotSocket", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the regular file was removed: %v", err)
	}

	live := filepath.Join(dir, "live")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	if err := RemoveStale(live, time.Second); !errors.Is(err, ErrServed) {
		t.Errorf("a served socket: %v, want ErrServed", err)
	}
	if !Answers(live, time.Second) {
		t.Error("a served socket does not answer")
	}

	stale := filepath.Join(dir, "stale")
	sl, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	sl.SetUnlinkOnClose(false)
	sl.Close() // the file stays, nobody answers: what a killed process leaves
	if err := RemoveStale(stale, time.Second); err != nil {
		t.Errorf("a stale socket: %v, want nil", err)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale socket is still there: %v", err)
	}
	l.Close()
}

package daemon

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/internal/sockfile"
	"github.com/kbridge/kbridge/tests/harness"
)

func bufLogger() (*slog.Logger, *harness.Buffer) {
	b := &harness.Buffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

func serveTestControl(t *testing.T, path string) (*Control, <-chan error) {
	t.Helper()
	c, err := ListenControl(path, quiet())
	if err != nil {
		t.Fatal(err)
	}
	c.SetStatus(func() any { return Status{Port: "kbtest"} })
	t.Cleanup(func() { _ = c.Close() })
	return c, c.Errors()
}

func TestControlSocketIsMode0600WhateverTheUmask(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "kbridge.sock") // before the umask: a directory of mode 0700
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	serveTestControl(t, path)
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket mode %v, want a socket of mode 0600", fi.Mode())
	}
	st, err := ReadStatus(path)
	if err != nil || st.Port != "kbtest" {
		t.Fatalf("ReadStatus = %+v, %v", st, err)
	}
	// No temporary name is left beside it.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("the socket's directory holds %d entries, want 1", len(ents))
	}
}

func TestControlRefusesAPathThatIsNotASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ListenControl(path, quiet())
	if !errors.Is(err, sockfile.ErrNotSocket) || !strings.Contains(err.Error(), path) {
		t.Fatalf("ListenControl on a regular file = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Error("the file was replaced")
	}
}

func TestControlRefusesASecondServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	serveTestControl(t, path)
	_, err := ListenControl(path, quiet())
	if !errors.Is(err, ErrServing) || !strings.Contains(err.Error(), "serving "+path) {
		t.Fatalf("a second ListenControl = %v", err)
	}
	if _, err := ReadStatus(path); err != nil {
		t.Errorf("the first server stopped answering: %v", err)
	}
}

func TestControlReplacesAStaleSocketAndRemovesOnlyItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	// A crashed daemon's socket: bound, nobody listening any more.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	c, errc := serveTestControl(t, path)
	if _, err := ReadStatus(path); err != nil {
		t.Fatalf("the stale socket was not replaced: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err, ok := <-errc; ok {
		t.Errorf("a serving error after Close: %v", err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket outlived Close: %v", err)
	}

	// A file that replaced the socket meanwhile is left alone.
	c, _ = serveTestControl(t, path)
	os.Remove(path)
	os.WriteFile(path, []byte("x"), 0o644)
	c.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("Close removed a file that was not its socket: %v", err)
	}
}

func TestServeControlStopsWithTheContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ServeControl(ctx, path, func() any { return 1 }, quiet()) }()
	deadline := time.Now().Add(5 * time.Second)
	for !ControlAnswers(path) {
		if time.Now().After(deadline) {
			t.Fatal("ServeControl never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if ControlAnswers(path) {
		t.Error("still answering after the context ended")
	}
}

func TestPeerAllowed(t *testing.T) {
	for _, c := range []struct {
		uid, self uint32
		ok        bool
	}{{0, 1000, true}, {1000, 1000, true}, {1001, 1000, false}, {0, 0, true}, {1000, 0, false}} {
		if got := peerAllowed(c.uid, c.self); got != c.ok {
			t.Errorf("peerAllowed(%d, %d) = %v", c.uid, c.self, got)
		}
	}
}

func TestControlAnswersStartingBeforeTheStatusIsSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	c, err := ListenControl(path, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := ReadStatusRaw(path); !errors.Is(err, ErrStarting) {
		t.Errorf("ReadStatusRaw before SetStatus = %v", err)
	}
	c.SetStatus(func() any { return Status{Port: "kbtest"} })
	if st, err := ReadStatus(path); err != nil || st.Port != "kbtest" {
		t.Errorf("ReadStatus = %+v, %v", st, err)
	}
}

// The control socket's directory is root's or kbridge's alone, as the
// vhost-user socket's: one others may write, or a symlink, is refused
// before anything is bound there.
func TestControlRefusesADirectoryOthersMayChange(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, link} {
		path := filepath.Join(dir, "kbridge.sock")
		if _, err := ListenControl(path, quiet()); !errors.Is(err, sockfile.ErrUnsafeDir) || !strings.Contains(err.Error(), path) {
			t.Errorf("ListenControl in %s = %v, want ErrUnsafeDir naming the path", dir, err)
		} else {
			t.Logf("refused: %v", err)
		}
		if ents, _ := os.ReadDir(open); len(ents) != 0 {
			t.Errorf("%s holds %d entries after the refusal", open, len(ents))
		}
	}
}

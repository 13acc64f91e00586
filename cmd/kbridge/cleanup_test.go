package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
)

func TestCleanupRefusesWhileADaemonAnswers(t *testing.T) {
	cfg := config.Default()
	cfg.Interface.Name = "kbtestnone"
	cfg.Stats.Socket = filepath.Join(t.TempDir(), "kbridge.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = daemon.ServeControl(ctx, cfg.Stats.Socket, func() any { return 1 }, nil) }()
	deadline := time.Now().Add(5 * time.Second)
	for !daemon.ControlAnswers(cfg.Stats.Socket) {
		if time.Now().After(deadline) {
			t.Fatal("the test's control socket never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	removed := false
	var out bytes.Buffer
	err := cleanup(cfg, &out, func(string) (bool, error) { removed = true; return true, nil })
	if err == nil || !strings.Contains(err.Error(), "running kbridge answers on "+cfg.Stats.Socket) {
		t.Fatalf("cleanup = %v", err)
	}
	if removed {
		t.Error("cleanup removed the interface of a running daemon")
	}
	if _, err := os.Lstat(cfg.Stats.Socket); err != nil {
		t.Errorf("cleanup removed a live daemon's socket: %v", err)
	}
}

func TestCleanupRemovesWhatACrashedDaemonLeft(t *testing.T) {
	cfg := config.Default()
	cfg.Interface.Name = "kbtestnone"
	cfg.Stats.Socket = filepath.Join(t.TempDir(), "kbridge.sock")
	// A socket nobody answers on: what a crashed daemon leaves.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Stats.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	var removed string
	var out bytes.Buffer
	if err := cleanup(cfg, &out, func(name string) (bool, error) { removed = name; return true, nil }); err != nil {
		t.Fatal(err)
	}
	if removed != "kbtestnone" {
		t.Errorf("removed interface %q", removed)
	}
	if _, err := os.Lstat(cfg.Stats.Socket); !os.IsNotExist(err) {
		t.Errorf("the stale socket is still there: %v", err)
	}
}

// An interface in use (daemon.ErrInterfaceInUse: another kbridge's live TAP) is left,
// said so, and is no failure; the stale socket still goes.
func TestCleanupLeavesATAPInUse(t *testing.T) {
	cfg := config.Default()
	cfg.Interface.Name = "kbtestnone"
	cfg.Stats.Socket = filepath.Join(t.TempDir(), "kbridge.sock")
	var out bytes.Buffer
	err := cleanup(cfg, &out, func(name string) (bool, error) {
		return true, fmt.Errorf("tap: %s: %w: held open by pid [1]", name, daemon.ErrInterfaceInUse)
	})
	if err != nil {
		t.Fatalf("cleanup = %v, want nil", err)
	}
	if got := out.String(); !strings.Contains(got, "left kbtestnone in place") || strings.Contains(got, "cleaned up") {
		t.Errorf("cleanup said %q", got)
	}
}

func TestCleanupLeavesANonSocket(t *testing.T) {
	cfg := config.Default()
	cfg.Stats.Socket = filepath.Join(t.TempDir(), "kbridge.sock")
	os.WriteFile(cfg.Stats.Socket, []byte("x"), 0o644)
	err := cleanup(cfg, &bytes.Buffer{}, func(string) (bool, error) { return false, nil })
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("cleanup = %v", err)
	}
	if _, err := os.Lstat(cfg.Stats.Socket); err != nil {
		t.Error("cleanup removed a regular file")
	}
}

func TestExitCodes(t *testing.T) {
	if c := exitCode(usageError{errors.New("x")}); c != 2 {
		t.Errorf("usage error exits %d", c)
	}
	if c := exitCode(&daemon.ConfigError{Err: errors.New("interface.mtu: 9000: ...")}); c != 2 {
		t.Errorf("daemon config error exits %d", c)
	}
	if c := exitCode(errors.New("the DPDK app (pid 1) exited")); c != 1 {
		t.Errorf("runtime error exits %d", c)
	}
}

// cleanup says what it removed, or that there was nothing: no interface
// and no socket is said so, not "cleaned up".
func TestCleanupSaysWhatItDidOrThatThereWasNothing(t *testing.T) {
	cfg := config.Default()
	cfg.Interface.Name = "kbtestnone"
	cfg.Stats.Socket = filepath.Join(t.TempDir(), "kbridge.sock")
	var out bytes.Buffer
	if err := cleanup(cfg, &out, func(string) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	if want := "kbridge: nothing to clean up: no interface kbtestnone, no control socket " + cfg.Stats.Socket + "\n"; out.String() != want {
		t.Errorf("said %q, want %q", out.String(), want)
	}
	out.Reset()
	if err := cleanup(cfg, &out, func(string) (bool, error) { return true, nil }); err != nil {
		t.Fatal(err)
	}
	if want := "kbridge: removed the interface kbtestnone\n"; out.String() != want {
		t.Errorf("said %q, want %q", out.String(), want)
	}
}

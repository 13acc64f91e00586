package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// ServeControl serves GET /status (JSON) on the unix socket at path until ctx
// ends. A stale socket of a dead daemon is replaced; a live one is an error.
func (d *Daemon) ServeControl(ctx context.Context, path string) error {
	return ServeControl(ctx, path, func() any { return d.Status() })
}

// ServeControl serves what status returns as JSON on GET /status.
func ServeControl(ctx context.Context, path string, status func() any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("control socket %s: another kbridge is listening there: stop it or set stats.socket", path)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(status())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		_ = os.Remove(path)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("control socket: %w", err)
	}
	return nil
}

// ReadStatus asks the daemon listening on the control socket at path.
func ReadStatus(path string) (Status, error) {
	raw, err := ReadStatusRaw(path)
	if err != nil {
		return Status{}, err
	}
	var s Status
	if err := json.Unmarshal(raw, &s); err != nil {
		return Status{}, fmt.Errorf("kbridge on %s: %w", path, err)
	}
	return s, nil
}

// ReadStatusRaw returns the daemon's status document as it sent it, whatever
// its mode.
func ReadStatusRaw(path string) (json.RawMessage, error) {
	c := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", path)
		}},
	}
	resp, err := c.Get("http://kbridge/status")
	if err != nil {
		return nil, fmt.Errorf("no kbridge answers on %s: %w", path, err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return nil, fmt.Errorf("kbridge on %s: %w", path, err)
	}
	return raw, nil
}

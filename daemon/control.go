package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/internal/sockfile"
)

// Control is the control socket: a unix socket of mode 0600 serving GET
// /status as JSON, and POST /takeover (handover.go), to root and to the
// daemon's own user.
type Control struct {
	path string
	l    *net.UnixListener
	ino  uint64 // the socket file's inode: Close removes only that file
	log  *slog.Logger

	status atomic.Pointer[func() any]
	// taking: POST /takeover hands its requests on takeovers to whoever
	// accepts them (acceptTakeovers) until quit closes (Close).
	taking    atomic.Bool
	takeovers chan takeoverRequest
	quit      chan struct{}
	srv       *http.Server
	errc      chan error // a serving failure; closed once serving ended
	mu        sync.Mutex
	closed    bool
}

// ListenControl creates the control socket at path and serves it until
// Close: GET /status answers 503 "starting" until SetStatus. The socket is
// mode 0600 whatever the umask: it binds a temporary name in the same
// directory, sets its mode and renames it over path. Its directory must be
// root's or kbridge's alone, as the vhost-user socket's
// (sockfile.CheckDir): whoever else could write there could put a symlink
// at the temporary name between the bind and the chmod, or a socket of
// their own at path. It refuses a path that exists and is not a socket,
// and a socket another kbridge answers on. A socket nobody answers on (a
// crashed daemon's) is replaced.
func ListenControl(path string, log *slog.Logger) (*Control, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := sockfile.CheckDir(dir); err != nil {
		return nil, fmt.Errorf("control socket %s: %w: give it a directory only root (or kbridge's user) may write, or set stats.socket", path, err)
	}
	if err := checkStale(path); err != nil {
		return nil, err
	}
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".kbridge-%d.sock", os.Getpid()))
	_ = removeSocket(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	fail := func(err error) (*Control, error) {
		l.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := sockfile.SetPerm(tmp, 0o600, -1); err != nil { // follows no symlink
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	if log == nil {
		log = slog.Default()
	}
	c := &Control{path: path, l: l, log: log, errc: make(chan error, 1),
		takeovers: make(chan takeoverRequest), quit: make(chan struct{})}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		c.ino = st.Ino
	}
	c.serve()
	return c, nil
}

// checkStale refuses a path that is not a socket or that a live daemon
// answers on, and removes a dead daemon's socket.
func checkStale(path string) error {
	switch err := sockfile.RemoveStale(path, controlDial); {
	case errors.Is(err, sockfile.ErrNotSocket):
		return fmt.Errorf("control socket %s: %w: kbridge will not replace it; remove it or set stats.socket", path, err)
	case errors.Is(err, sockfile.ErrServed):
		return fmt.Errorf("control socket %s: %w %s: stop it or set stats.socket", path, ErrServing, path)
	case err != nil:
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	return nil
}

// controlDial bounds the wait for a daemon's answer on its control socket.
const controlDial = 500 * time.Millisecond

// ControlAnswers reports whether something accepts connections on the unix
// socket at path: a running daemon.
func ControlAnswers(path string) bool { return sockfile.Answers(path, controlDial) }

// removeSocket removes path if it is a socket.
func removeSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s is not a socket", path)
	}
	return os.Remove(path)
}

// Path returns the socket's path.
func (c *Control) Path() string { return c.path }

// SetStatus sets what GET /status serves; until then it answers 503.
func (c *Control) SetStatus(status func() any) { c.status.Store(&status) }

// acceptTakeovers makes POST /takeover hand its requests, their
// connections hijacked, to the caller on the channel returned, which it
// must receive from until Close (Serve's loop does). Until then a takeover
// is refused: this kbridge is starting, or its mode cannot hand over.
func (c *Control) acceptTakeovers() <-chan takeoverRequest {
	c.taking.Store(true)
	return c.takeovers
}

// Errors delivers an error if serving fails; it is closed once serving
// ended, after Close.
func (c *Control) Errors() <-chan error { return c.errc }

func (c *Control) serve() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		f := c.status.Load()
		if f == nil {
			http.Error(w, ErrStarting.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode((*f)())
	})
	mux.HandleFunc("POST /takeover", c.takeover)
	c.srv = &http.Server{
		Handler:           mux,
		ConnContext:       connContext,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	go func() {
		defer close(c.errc)
		err := c.srv.Serve(&credListener{UnixListener: c.l, log: c.log})
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if !closed && !errors.Is(err, http.ErrServerClosed) {
			c.errc <- fmt.Errorf("control socket %s: %w", c.path, err)
		}
	}()
}

// Close stops serving and removes the socket file, if it is still the one
// ListenControl created.
func (c *Control) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.quit) // a takeover nobody received is refused
	err := c.srv.Close()
	if lerr := c.l.Close(); lerr != nil && !errors.Is(lerr, net.ErrClosed) && err == nil {
		err = lerr
	}
	if fi, serr := os.Lstat(c.path); serr == nil && fi.Mode().Type() == fs.ModeSocket {
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Ino == c.ino {
			_ = os.Remove(c.path)
		}
	}
	return err
}

// ServeControl serves what status returns as JSON on GET /status at the
// unix socket path until ctx ends, then removes the socket.
func ServeControl(ctx context.Context, path string, status func() any, log *slog.Logger) error {
	c, err := ListenControl(path, log)
	if err != nil {
		return err
	}
	c.SetStatus(status)
	select {
	case <-ctx.Done():
		return c.Close()
	case err := <-c.Errors():
		_ = c.Close()
		return err
	}
}

// credListener accepts only peers running as root or as this process's
// user (SO_PEERCRED); it logs and closes the others.
type credListener struct {
	*net.UnixListener
	log *slog.Logger
}

func (l *credListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(conn)
		if err == nil && peerAllowed(cred.Uid, uint32(os.Geteuid())) {
			return conn, nil
		}
		if err != nil {
			l.log.Warn("control socket: refused a client whose credentials cannot be read", "err", err)
		} else {
			l.log.Warn("control socket: refused a client: only root and the daemon's user may connect",
				"uid", cred.Uid, "pid", cred.Pid)
		}
		conn.Close()
	}
}

// peerAllowed is the control socket's rule: root, or the daemon's user.
func peerAllowed(uid, self uint32) bool { return uid == 0 || uid == self }

func peerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
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

// ReadStatuses returns each port's status: a port set's ports (SetStatus),
// or the one port of any other runner.
func ReadStatuses(path string) ([]Status, error) {
	raw, err := ReadStatusRaw(path)
	if err != nil {
		return nil, err
	}
	var set struct {
		Ports *[]Status `json:"ports"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("kbridge on %s: %w", path, err)
	}
	if set.Ports != nil {
		return *set.Ports, nil
	}
	var s Status
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("kbridge on %s: %w", path, err)
	}
	return []Status{s}, nil
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
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		if text := strings.TrimSpace(string(msg)); resp.StatusCode != http.StatusServiceUnavailable || text != ErrStarting.Error() {
			return nil, fmt.Errorf("kbridge on %s: %s: %s", path, resp.Status, text)
		}
		return nil, fmt.Errorf("kbridge on %s: %s: %w", path, resp.Status, ErrStarting)
	}
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return nil, fmt.Errorf("kbridge on %s: %w", path, err)
	}
	return raw, nil
}

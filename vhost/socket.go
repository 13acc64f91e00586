package vhost

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kbridge/kbridge/internal/sockfile"
)

// ErrGroup: vhost.socket_group names no group.
var ErrGroup = errors.New("vhost: no such group")

// LookupGroup returns the gid named by g, a name or a number; -1 for "".
func LookupGroup(g string) (int64, error) {
	if g == "" {
		return -1, nil
	}
	if n, err := strconv.ParseUint(g, 10, 32); err == nil {
		return int64(n), nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return -1, fmt.Errorf("%w: %q: %w", ErrGroup, g, err)
	}
	n, err := strconv.ParseUint(gr.Gid, 10, 32)
	if err != nil {
		return -1, fmt.Errorf("%w: %q: gid %q", ErrGroup, g, gr.Gid)
	}
	return int64(n), nil
}

// PrepareSocket readies path for a server's bind: its directory is made
// if missing (mode 0711: others may pass through to a socket whose own
// mode and group let them, and list nothing) and must be root's alone
// (sockfile.CheckDir: no symlink there or above, nobody else may write),
// and a stale socket there is removed. kbridge binds, chmods and chowns
// there as root: in a directory someone else may write, a symlink put at
// the path would make it change what the link points to.
func PrepareSocket(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("vhost: %w", err)
	}
	if err := sockfile.CheckDir(dir); err != nil {
		return fmt.Errorf("vhost: socket %s: %w: put it in a directory only root may change, such as /run/kbridge", path, err)
	}
	return removeStale(path)
}

// removeStale removes a socket file nobody listens on any more (a kbridge
// that was killed); one that answers belongs to a running backend.
func removeStale(path string) error {
	switch err := sockfile.RemoveStale(path, 200*time.Millisecond); {
	case errors.Is(err, sockfile.ErrServed):
		return fmt.Errorf("vhost: %s is served by another process", path)
	case err != nil:
		return fmt.Errorf("vhost: %s: %w", path, err)
	}
	return nil
}

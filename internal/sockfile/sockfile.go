// Package sockfile decides what may be done with a unix socket's path before
// kbridge listens on it (the control socket, the vhost-user socket): a
// socket nobody answers on is what a killed process left and may go; one
// that answers, or a path that is no socket, is someone else's.
package sockfile

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"
)

// Why RemoveStale left a path alone.
var (
	ErrNotSocket = errors.New("the path exists and is not a socket")
	ErrServed    = errors.New("another process serves it")
)

// Answers reports whether something accepts connections on the unix socket
// at path within timeout.
func Answers(path string, timeout time.Duration) bool {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// RemoveStale removes path if it is a socket nobody answers on within
// timeout. A path that does not exist is fine (nil); one that is not a
// socket is ErrNotSocket (wrapped with its type), one that answers
// ErrServed.
func RemoveStale(path string, timeout time.Duration) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if t := fi.Mode().Type(); t != fs.ModeSocket {
		return fmt.Errorf("%w (%s)", ErrNotSocket, t)
	}
	if Answers(path, timeout) {
		return ErrServed
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the stale socket: %w", err)
	}
	return nil
}

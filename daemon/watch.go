package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// watchFile reports changes to the file at path. It watches the directory,
// since editors and config managers replace files rather than write them in
// place, and lets a burst of events settle before it reports one change.
func watchFile(ctx context.Context, path string) (<-chan struct{}, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer w.Close()
		var settle <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) == abs && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
					settle = time.After(100 * time.Millisecond)
				}
			case <-w.Errors:
			case <-settle:
				settle = nil
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

// watchPID returns a channel closed when process pid exits (pidfd_open),
// and a function that ends the watch.
func watchPID(pid int) (gone <-chan struct{}, stop func(), err error) {
	if pid <= 0 {
		return nil, nil, fmt.Errorf("pid %d: unknown", pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("eventfd: %w", err)
	}
	ch := make(chan struct{})
	// mu orders stop's write against the goroutine closing efd, so that
	// stop never writes to a closed (or reused) descriptor.
	var mu sync.Mutex
	exited := false
	stop = func() {
		mu.Lock()
		defer mu.Unlock()
		if !exited {
			one := [8]byte{1}
			_, _ = unix.Write(efd, one[:])
		}
	}
	go func() {
		defer func() {
			mu.Lock()
			exited = true
			unix.Close(efd)
			mu.Unlock()
			unix.Close(fd)
		}()
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(efd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == unix.EINTR {
				continue
			}
			if fds[0].Revents != 0 {
				close(ch)
			}
			return
		}
	}()
	return ch, stop, nil
}

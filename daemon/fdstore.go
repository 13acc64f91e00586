package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// systemd's fd store, spoken without libsystemd: kbridge stores each TAP
// queue's fd (sd_notify FDSTORE=1, one message a queue, FDNAME
// "<interface>.q<N>"); systemd holds duplicates, so that the queues stay
// attached while no kbridge runs (a crash with Restart=, a systemctl
// restart where FileDescriptorStorePreserve= keeps the store), and passes
// them to the next kbridge from fd 3 on (LISTEN_FDS, LISTEN_PID,
// LISTEN_FDNAMES), which adopts them. The unit's FileDescriptorStoreMax=
// bounds the store; where it is 0 systemd ignores the fds.

// listenFdsStart is the first fd systemd passes (SD_LISTEN_FDS_START).
const listenFdsStart = 3

// ListenFd is one fd systemd passed at start, with its FDNAME.
type ListenFd struct {
	Fd   int
	Name string
}

// ListenFds reads the fds systemd passed to process pid from the
// environment getenv reads: none unless LISTEN_PID is pid. Names missing
// from LISTEN_FDNAMES are "unknown", as sd_listen_fds_with_names says.
func ListenFds(getenv func(string) string, pid int) ([]ListenFd, error) {
	if p, err := strconv.Atoi(getenv("LISTEN_PID")); err != nil || p != pid {
		return nil, nil
	}
	n, err := strconv.Atoi(getenv("LISTEN_FDS"))
	if err != nil || n < 0 {
		return nil, fmt.Errorf("LISTEN_FDS=%q: %w", getenv("LISTEN_FDS"), ErrListenFds)
	}
	var names []string
	if s := getenv("LISTEN_FDNAMES"); s != "" {
		names = strings.Split(s, ":")
	}
	fds := make([]ListenFd, n)
	for i := range fds {
		fds[i] = ListenFd{Fd: listenFdsStart + i, Name: "unknown"}
		if i < len(names) && names[i] != "" {
			fds[i].Name = names[i]
		}
	}
	return fds, nil
}

// TakeListenFds is ListenFds of this process: the fds are marked
// close-on-exec and the variables unset, so that nothing kbridge starts
// inherits them.
func TakeListenFds() ([]ListenFd, error) {
	fds, err := ListenFds(os.Getenv, os.Getpid())
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		_ = os.Unsetenv(k)
	}
	for _, f := range fds {
		unix.CloseOnExec(f.Fd)
	}
	return fds, err
}

// queueFdName is the FDNAME of queue q of interface name. An interface's
// name never holds ':', which FDNAME may not.
func queueFdName(name string, q int) string { return fmt.Sprintf("%s.q%d", name, q) }

// storedQueues picks the queue fds of interface name from fds, in queue
// order; a gap ends them (the queues after it are closed). It returns the
// others apart, and the names of those closed.
func storedQueues(fds []ListenFd, name string) (queues []int, others []ListenFd, dropped []string) {
	byQueue := map[int]int{}
	for _, f := range fds {
		rest, ok := strings.CutPrefix(f.Name, name+".q")
		q, err := strconv.Atoi(rest)
		if !ok || err != nil || q < 0 || rest != strconv.Itoa(q) {
			others = append(others, f)
			continue
		}
		if _, dup := byQueue[q]; dup {
			dropped = append(dropped, f.Name)
			unix.Close(f.Fd)
			continue
		}
		byQueue[q] = f.Fd
	}
	qs := make([]int, 0, len(byQueue))
	for q := range byQueue {
		qs = append(qs, q)
	}
	sort.Ints(qs)
	for i, q := range qs {
		if i == q {
			queues = append(queues, byQueue[q])
			continue
		}
		dropped = append(dropped, queueFdName(name, q))
		unix.Close(byQueue[q])
	}
	return queues, others, dropped
}

// fdStore stores and removes fds in the unit's fd store through notify
// (NotifyFds). Its zero value stores nothing: kbridge not under systemd.
type fdStore struct {
	notify func(state string, fds []int) error
	log    *slog.Logger
}

// newFdStore is the fd store of this process: on when systemd listens
// (NOTIFY_SOCKET), unless it says the store holds nothing ($FDSTORE, set
// by systemd 254 and later to FileDescriptorStoreMax=, is 0).
func newFdStore(log *slog.Logger) fdStore {
	if os.Getenv("NOTIFY_SOCKET") == "" || os.Getenv("FDSTORE") == "0" {
		return fdStore{}
	}
	return fdStore{notify: NotifyFds, log: log}
}

// storeQueues stores the queue fds of interface name, one message each,
// and removes queues from len(fds) up to had (queues a predecessor stored
// that this kbridge closed).
func (s fdStore) storeQueues(name string, fds []int, had int) {
	if s.notify == nil {
		return
	}
	for q, fd := range fds {
		if err := s.notify("FDSTORE=1\nFDNAME="+queueFdName(name, q), []int{fd}); err != nil {
			s.log.Warn("not stored in systemd's fd store: a restart makes the interface anew", "interface", name, "queue", q, "err", err)
			return
		}
	}
	for q := len(fds); q < had; q++ {
		s.remove(queueFdName(name, q))
	}
}

// remove drops the fds called name from the store.
func (s fdStore) remove(name string) {
	if s.notify == nil {
		return
	}
	if err := s.notify("FDSTOREREMOVE=1\nFDNAME="+name, nil); err != nil {
		s.log.Warn("could not remove from systemd's fd store", "fdname", name, "err", err)
	}
}

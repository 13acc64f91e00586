package vhost

/*
#include <stdlib.h>
#include "guestmem.h"
#include "vhost.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/internal/sockfile"
)

// MaxQueues is the most queue pairs a backend serves.
const MaxQueues = C.KB_VH_MAX_QUEUES

// Backend is the vhost-user socket kbridge serves (or connects to, as a
// client). There is one per process: librte_vhost's callbacks reach it
// through C globals.
type Backend struct {
	path     string
	client   bool
	queues   int
	log      *slog.Logger
	notify   int // eventfd the callbacks write
	link     func(up bool)
	stopOnce sync.Once
	done     chan struct{}
}

// Config says where and how to serve.
type Config struct {
	Path   string
	Client bool // connect to a frontend running virtio-user with server=1
	Queues int
	Log    *slog.Logger
	// Mode and Group (a name or a gid; "": kbridge's) are set on the
	// socket file once librte_vhost made it (server). Mode 0: 0600.
	Mode  os.FileMode
	Group string
	// AllowUIDs are the peers served besides root and kbridge's uid (and
	// a peer whose gid is Group's).
	AllowUIDs []int
	// Link, if set, is called from the backend's goroutine when a
	// frontend's device starts (true) and when it goes (false): what a
	// NIC's link is to its interface.
	Link func(up bool)
}

// ErrGroup: vhost.socket_group names no group.
var ErrGroup = errors.New("vhost: no such group")

// ErrStopTimeout: librte_vhost did not let go of the socket in time.
var ErrStopTimeout = errors.New("vhost: librte_vhost did not let go of the socket")

// stopTimeout bounds librte_vhost's unregister, which waits for the
// message handler of every connection (rte_vhost_driver_unregister loops
// while one runs). The connections' receive timeout ends a stalled one
// well before (KB_VH_MSG_TIMEOUT_MS); this is the backstop for anything
// else that holds the handler.
const stopTimeout = 5 * C.KB_VH_MSG_TIMEOUT_MS * time.Millisecond

func lookupGroup(g string) (int64, error) {
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

var started bool

// Start registers the socket with librte_vhost, offering kbridge's features,
// and starts serving it. The EAL and the pool must exist.
func Start(cfg Config) (*Backend, error) {
	if started {
		return nil, errors.New("vhost: one backend per process")
	}
	if cfg.Queues < 1 || cfg.Queues > MaxQueues {
		return nil, fmt.Errorf("vhost: %d queue pairs: must be 1 to %d", cfg.Queues, MaxQueues)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Mode == 0 {
		cfg.Mode = 0o600
	}
	gid, err := lookupGroup(cfg.Group)
	if err != nil {
		return nil, err
	}
	if len(cfg.AllowUIDs) > C.KB_VH_MAX_UIDS {
		return nil, fmt.Errorf("vhost: %d allowed uids: at most %d", len(cfg.AllowUIDs), C.KB_VH_MAX_UIDS)
	}
	uids := make([]C.uint32_t, len(cfg.AllowUIDs)+1)
	for i, u := range cfg.AllowUIDs {
		uids[i] = C.uint32_t(u)
	}
	if C.kb_vh_allow(&uids[0], C.int(len(cfg.AllowUIDs)), C.int64_t(gid)) != 0 {
		return nil, errors.New("vhost: bad allow-list")
	}
	if !cfg.Client {
		if err := PrepareSocket(cfg.Path); err != nil {
			return nil, err
		}
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("vhost: eventfd: %w", err)
	}
	cpath := C.CString(cfg.Path)
	defer C.free(unsafe.Pointer(cpath))
	client := 0
	if cfg.Client {
		client = 1
	}
	if rc := C.kb_vh_start(cpath, C.int(client), C.int(cfg.Queues), C.int(evfd)); rc < 0 {
		unix.Close(evfd)
		return nil, fmt.Errorf("vhost: serve %s: %w (see DPDK's VHOST_CONFIG lines above)", cfg.Path, unix.Errno(-rc))
	}
	started = true
	if !cfg.Client {
		// librte_vhost bound the socket with the umask's mode; until
		// here the peer check alone keeps others out. The directory is
		// root's alone (PrepareSocket), and SetPerm follows no symlink.
		if err := sockfile.SetPerm(cfg.Path, cfg.Mode, int(gid)); err != nil {
			C.kb_vh_stop(cpath)
			unix.Close(evfd)
			started = false
			return nil, fmt.Errorf("vhost: socket %s: %w", cfg.Path, err)
		}
	}
	b := &Backend{path: cfg.Path, client: cfg.Client, queues: cfg.Queues, log: cfg.Log,
		notify: evfd, link: cfg.Link, done: make(chan struct{})}
	role := "server"
	if cfg.Client {
		role = "client"
	}
	cfg.Log.Info("vhost-user backend listening", "socket", cfg.Path, "role", role, "queues", cfg.Queues,
		"mode", fmt.Sprintf("%04o", cfg.Mode), "group", cfg.Group, "allow_uids", append([]int{0, os.Geteuid()}, cfg.AllowUIDs...),
		"offered", featureString(uint64(C.kb_vh_offered(cpath))))
	go b.watch()
	return b, nil
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

// watch turns the callbacks' notifications into log lines.
func (b *Backend) watch() {
	defer close(b.done)
	var buf [8]byte
	up := false
	var seen uint64   // connects logged
	var shrank uint64 // guest memory faults logged
	for {
		if _, err := unix.Read(b.notify, buf[:]); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if C.kb_vh_stopping != 0 {
			return
		}
		b.logFaults()
		if n := uint64(C.kb_gm_faults()); n != shrank {
			b.log.Error("vhost-user guest memory shrank under kbridge: zeros mapped over the vanished pages, frontend disconnected",
				"socket", b.path, "pages", n-shrank, "last_address", fmt.Sprintf("%#x", uint64(C.kb_gm_last())))
			shrank = n
		}
		// The eventfd adds notifications up: a frontend that left and
		// came back between two reads (virtio-user renegotiating its
		// features at port start does) shows only as a new connect
		// count, and its features are the new ones.
		connects, _ := b.Connects()
		vid, f := connected()
		switch {
		case vid >= 0 && (!up || connects != seen):
			seen = connects
			o := OffloadsOf(f)
			b.log.Info("vhost-user frontend connected", "socket", b.path, "vid", vid,
				"features", featureString(f), "app_csum", o.AppCsum, "app_tso", o.AppTSO,
				"kernel_csum", o.KernelCsum, "kernel_tso4", o.KernelTSO4, "kernel_tso6", o.KernelTSO6,
				"mrg_rxbuf", o.Mergeable)
			if !up && b.link != nil {
				b.link(true)
			}
			up = true
		case vid < 0 && up:
			up = false
			b.log.Info("vhost-user frontend gone", "socket", b.path)
			if b.link != nil {
				b.link(false)
			}
		}
	}
}

// logFaults logs what kbridge refused of a frontend since the last call.
// librte_vhost's own refusals are its VHOST_CONFIG lines on stdout.
func (b *Backend) logFaults() {
	var buf [C.KB_VH_FAULT_LEN]C.char
	for {
		switch C.kb_vh_fault_take(&buf[0]) {
		case C.KB_VH_FAULT_MEM_TABLE:
			b.log.Error("vhost-user memory table refused, frontend disconnected", "socket", b.path,
				"why", C.GoString(&buf[0]))
		case C.KB_VH_FAULT_REQUEST:
			b.log.Error("vhost-user request refused, frontend disconnected", "socket", b.path,
				"why", C.GoString(&buf[0]))
		case C.KB_VH_FAULT_PEER:
			b.log.Error("vhost-user peer refused, connection closed before any message", "socket", b.path,
				"why", C.GoString(&buf[0]))
		case C.KB_VH_FAULT_VRING:
			b.log.Error("vhost-user vring request refused, frontend disconnected", "socket", b.path,
				"why", C.GoString(&buf[0]))
		case C.KB_VH_FAULT_CHAIN:
			b.log.Error("vhost-user descriptor chain refused, the vring is not served until the frontend reconnects",
				"socket", b.path, "why", C.GoString(&buf[0]))
		default:
			return
		}
	}
}

// Path returns the socket's path.
func (b *Backend) Path() string { return b.path }

// Connected reports whether a frontend is connected, and its features.
func (b *Backend) Connected() (bool, uint64) {
	vid, f := connected()
	return vid >= 0, f
}

// connected reads the device the callbacks (librte_vhost's thread) set:
// its vid (-1: none) and negotiated features, with atomic loads, as the
// callbacks store them.
func connected() (vid int, features uint64) {
	v := atomic.LoadInt32((*int32)(unsafe.Pointer(&C.kb_vh.vid)))
	f := atomic.LoadUint64((*uint64)(unsafe.Pointer(&C.kb_vh.features)))
	return int(v), f
}

// Connects counts frontends that connected; Disconnects, that left.
func (b *Backend) Connects() (connects, disconnects uint64) {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&C.kb_vh.connects))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&C.kb_vh.disconnects)))
}

// Refused counts the memory tables kbridge refused (a region past the end
// of its file) and the descriptor chains that stopped a TX vring (outside
// guest memory, a loop).
func (b *Backend) Refused() (memTables, chains uint64) {
	return uint64(C.kb_vh.refused_mem_tables), uint64(C.kb_vh.refused_chains)
}

// RefusedRequests counts the requests kbridge refused because it does not
// use them (the dirty log, inflight tracking, postcopy, IOTLB, the backend
// channel, ...): each hung up on its frontend.
func (b *Backend) RefusedRequests() uint64 { return uint64(C.kb_vh.refused_requests) }

// RefusedVrings counts the vring requests refused because they would change
// a vring in use (a new size, base or address for translated rings; a
// second kick fd or new protocol features for the running device).
func (b *Backend) RefusedVrings() uint64 { return uint64(C.kb_vh.refused_vrings) }

// GuestMemoryFaults counts the pages of guest memory that vanished under
// kbridge (a frontend truncated its file) and were mapped over with zeros.
func (b *Backend) GuestMemoryFaults() uint64 { return uint64(C.kb_gm_faults()) }

// RefusedPeers counts the connections refused by the peer check (a uid
// not allowed; as a client, a listener not allowed).
func (b *Backend) RefusedPeers() uint64 { return uint64(C.kb_vh.refused_peers) }

// Stop unregisters the socket (librte_vhost destroys the device, after the
// workers, which must have stopped) and removes the socket file. An
// unregister still waiting after stopTimeout is left behind, logged, with
// ErrStopTimeout: the process is on its way out.
func (b *Backend) Stop() error {
	var err error
	b.stopOnce.Do(func() {
		rc := make(chan C.int, 1)
		go func() {
			cpath := C.CString(b.path)
			defer C.free(unsafe.Pointer(cpath))
			rc <- C.kb_vh_stop(cpath)
		}()
		stuck := false
		select {
		case r := <-rc:
			if r < 0 {
				err = fmt.Errorf("vhost: unregister %s failed", b.path)
			}
		case <-time.After(stopTimeout):
			stuck = true
			err = fmt.Errorf("%w: %s, still waiting after %v for a connection's message handler", ErrStopTimeout, b.path, stopTimeout)
			b.log.Error("vhost-user backend not stopped, going on without it", "socket", b.path, "err", err)
		}
		C.kb_vh_stopping = 1
		one := [8]byte{1}
		_, _ = unix.Write(b.notify, one[:])
		<-b.done
		if !stuck {
			// Left open otherwise: librte_vhost's callbacks may still
			// write it.
			unix.Close(b.notify)
		}
		if !b.client {
			if rerr := os.Remove(b.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	})
	return err
}

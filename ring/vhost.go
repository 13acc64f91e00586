package ring

// Mode vhost's backend: the vhost-user socket librte_vhost serves.

/*
#include <stdlib.h>
#include "vhost_guestmem.h"
#include "vhost.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/internal/sockfile"
	"github.com/kbridge/kbridge/vhost"
)

// VhostMaxQueues is the most queue pairs a backend serves.
const VhostMaxQueues = C.KB_VH_MAX_QUEUES

// VhostBackend is the vhost-user socket kbridge serves (or connects to, as
// a client). There is one per process: librte_vhost's callbacks reach it
// through C globals.
type VhostBackend struct {
	path     string
	client   bool
	queues   int
	log      *slog.Logger
	notify   int // eventfd the callbacks write
	link     func(up bool)
	stopOnce sync.Once
	done     chan struct{}
}

// VhostConfig says where and how to serve.
type VhostConfig struct {
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

// ErrVhostStopTimeout: librte_vhost did not let go of the socket in time.
var ErrVhostStopTimeout = errors.New("vhost: librte_vhost did not let go of the socket")

// vhostStopTimeout bounds librte_vhost's unregister, which waits for the
// message handler of every connection (rte_vhost_driver_unregister loops
// while one runs). The connections' receive timeout ends a stalled one
// well before (KB_VH_MSG_TIMEOUT_MS); this is the backstop for anything
// else that holds the handler.
const vhostStopTimeout = 5 * C.KB_VH_MSG_TIMEOUT_MS * time.Millisecond

var vhostStarted bool

// StartVhost registers the socket with librte_vhost, offering kbridge's
// features, and starts serving it. The EAL and the pool must exist.
func StartVhost(cfg VhostConfig) (*VhostBackend, error) {
	if vhostStarted {
		return nil, errors.New("vhost: one backend per process")
	}
	if cfg.Queues < 1 || cfg.Queues > VhostMaxQueues {
		return nil, fmt.Errorf("vhost: %d queue pairs: must be 1 to %d", cfg.Queues, VhostMaxQueues)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Mode == 0 {
		cfg.Mode = 0o600
	}
	gid, err := vhost.LookupGroup(cfg.Group)
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
		if err := vhost.PrepareSocket(cfg.Path); err != nil {
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
	vhostStarted = true
	if !cfg.Client {
		// librte_vhost bound the socket with the umask's mode; until
		// here the peer check alone keeps others out. The directory is
		// root's alone (PrepareSocket), and SetPerm follows no symlink.
		if err := sockfile.SetPerm(cfg.Path, cfg.Mode, int(gid)); err != nil {
			C.kb_vh_stop(cpath)
			unix.Close(evfd)
			vhostStarted = false
			return nil, fmt.Errorf("vhost: socket %s: %w", cfg.Path, err)
		}
	}
	b := &VhostBackend{path: cfg.Path, client: cfg.Client, queues: cfg.Queues, log: cfg.Log,
		notify: evfd, link: cfg.Link, done: make(chan struct{})}
	role := "server"
	if cfg.Client {
		role = "client"
	}
	cfg.Log.Info("vhost-user backend listening", "socket", cfg.Path, "role", role, "queues", cfg.Queues,
		"mode", fmt.Sprintf("%04o", cfg.Mode), "group", cfg.Group, "allow_uids", append([]int{0, os.Geteuid()}, cfg.AllowUIDs...),
		"offered", vhost.FeatureString(uint64(C.kb_vh_offered(cpath))))
	go b.watch()
	return b, nil
}

// watch turns the callbacks' notifications into log lines.
func (b *VhostBackend) watch() {
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
		vid, f := vhostConnected()
		switch {
		case vid >= 0 && (!up || connects != seen):
			seen = connects
			o := vhost.OffloadsOf(f)
			b.log.Info("vhost-user frontend connected", "socket", b.path, "vid", vid,
				"features", vhost.FeatureString(f), "app_csum", o.AppCsum, "app_tso", o.AppTSO,
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
func (b *VhostBackend) logFaults() {
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
func (b *VhostBackend) Path() string { return b.path }

// Connected reports whether a frontend is connected, and its features.
func (b *VhostBackend) Connected() (bool, uint64) {
	vid, f := vhostConnected()
	return vid >= 0, f
}

// vhostConnected reads the device the callbacks (librte_vhost's thread) set:
// its vid (-1: none) and negotiated features, with atomic loads, as the
// callbacks store them.
func vhostConnected() (vid int, features uint64) {
	v := atomic.LoadInt32((*int32)(unsafe.Pointer(&C.kb_vh.vid)))
	f := atomic.LoadUint64((*uint64)(unsafe.Pointer(&C.kb_vh.features)))
	return int(v), f
}

// Connects counts frontends that connected; Disconnects, that left.
func (b *VhostBackend) Connects() (connects, disconnects uint64) {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&C.kb_vh.connects))),
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&C.kb_vh.disconnects)))
}

// Refused counts the memory tables kbridge refused (a region past the end
// of its file) and the descriptor chains that stopped a TX vring (outside
// guest memory, a loop).
func (b *VhostBackend) Refused() (memTables, chains uint64) {
	return uint64(C.kb_vh.refused_mem_tables), uint64(C.kb_vh.refused_chains)
}

// RefusedRequests counts the requests kbridge refused because it does not
// use them (the dirty log, inflight tracking, postcopy, IOTLB, the backend
// channel, ...): each hung up on its frontend.
func (b *VhostBackend) RefusedRequests() uint64 { return uint64(C.kb_vh.refused_requests) }

// RefusedVrings counts the vring requests refused because they would change
// a vring in use (a new size, base or address for translated rings; a
// second kick fd or new protocol features for the running device).
func (b *VhostBackend) RefusedVrings() uint64 { return uint64(C.kb_vh.refused_vrings) }

// GuestMemoryFaults counts the pages of guest memory that vanished under
// kbridge (a frontend truncated its file) and were mapped over with zeros.
func (b *VhostBackend) GuestMemoryFaults() uint64 { return uint64(C.kb_gm_faults()) }

// RefusedPeers counts the connections refused by the peer check (a uid
// not allowed; as a client, a listener not allowed).
func (b *VhostBackend) RefusedPeers() uint64 { return uint64(C.kb_vh.refused_peers) }

// Stop unregisters the socket (librte_vhost destroys the device, after the
// workers, which must have stopped) and removes the socket file. An
// unregister still waiting after stopTimeout is left behind, logged, with
// ErrStopTimeout: the process is on its way out.
func (b *VhostBackend) Stop() error {
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
		case <-time.After(vhostStopTimeout):
			stuck = true
			err = fmt.Errorf("%w: %s, still waiting after %v for a connection's message handler", ErrVhostStopTimeout, b.path, vhostStopTimeout)
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

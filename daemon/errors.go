package daemon

import (
	"errors"

	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap"
)

// The errors callers tell apart with errors.Is: why a start failed, and why
// a data path stopped by itself (Runner.Err). Each is wrapped with what it
// is about; the texts read on as the wrapping message's.
var (
	// ErrStartCancelled is what StartWith returns when its context
	// ended before the data path was up; nothing it took is left (the EAL
	// aside).
	ErrStartCancelled = errors.New("start-up cancelled")
	// ErrInterfaceLost: the TAP interface was deleted and could not be
	// made again (another interface took its name, say).
	ErrInterfaceLost = errors.New("deleted and could not be made again")
	// ErrAppExited: the DPDK app's process exited.
	ErrAppExited = errors.New("exited: kbridge stops with it")
	// ErrAppFreesPort: the DPDK app is freeing the port
	// (kbridge_port_free).
	ErrAppFreesPort = errors.New("the DPDK app is freeing port")
	// ErrWorkerStopped: a worker stopped (failed, or every one returned),
	// and with it the path.
	ErrWorkerStopped = errors.New("worker stopped")
	// ErrServing: another kbridge serves on the control socket.
	ErrServing = errors.New("another kbridge is serving")
	// ErrListenFds: systemd's LISTEN_FDS cannot be read.
	ErrListenFds = errors.New("fds passed by systemd unreadable")
	// ErrTakeoverRefused: the kbridge on the control socket refused to
	// hand its interface and port over (another port or interface, a
	// mode that cannot, a stop under way), or answered no takeover.
	ErrTakeoverRefused = errors.New("takeover refused")
	// ErrStarting: the daemon on the control socket has no status yet.
	ErrStarting = errors.New("kbridge is starting")
	// ErrVersionMismatch: the app runs another DPDK than kbridge was
	// built with, so mode ring cannot attach; no restart mends it (package
	// ring's error, under the daemon's name).
	ErrVersionMismatch = ring.ErrVersionMismatch
	// ErrInterfaceInUse: RemoveOrphanInterface left an interface something
	// holds (package tap's error, under the daemon's name).
	ErrInterfaceInUse = tap.ErrInUse
)

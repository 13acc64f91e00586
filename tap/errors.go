package tap

import "errors"

// The errors callers tell apart with errors.Is; each is wrapped with what
// it is about (the interface, the queue, the MTU).
var (
	// ErrNotSupported means the kernel's TUN driver lacks a feature kbridge
	// needs (IFF_VNET_HDR, IFF_MULTI_QUEUE).
	ErrNotSupported = errors.New("not supported by this kernel's TUN driver")
	// ErrInUse means a TAP interface is in use: RemoveOrphan leaves it,
	// Create refuses it.
	ErrInUse = errors.New("in use")
	// ErrNotTAP means an interface of the name exists and is not a TAP:
	// Create and Remove leave it.
	ErrNotTAP = errors.New("not a TAP")
	// ErrMTURange means an MTU below limits.MinMTU or above the queue's
	// MaxMTU: the buffers were sized at creation and are never grown on the
	// hot path.
	ErrMTURange = errors.New("MTU out of range")
	// ErrClosed means the Device was closed.
	ErrClosed = errors.New("device closed")
	// ErrDeleted means the interface was deleted (State, Set): Recreate
	// makes it again.
	ErrDeleted = errors.New("interface deleted")
	// ErrNameTaken means another interface took a deleted interface's
	// name: Recreate leaves it.
	ErrNameTaken = errors.New("took its place")
	// ErrNotAdoptable means queue fds or an interface Adopt refuses: not
	// a queue of the interface named, not kbridge's flags or header size,
	// or no kbridge mark.
	ErrNotAdoptable = errors.New("not adoptable")
	// ErrUnknownChange means a ChangeKind Set or Remember does not know.
	ErrUnknownChange = errors.New("unknown change")
)

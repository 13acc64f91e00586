package xdp

import (
	"errors"

	"github.com/kbridge/kbridge/internal/conferr"
)

// Sentinel errors. Errors returned by this package wrap one of these (or an
// errno from the kernel) with %w, so callers can test them with errors.Is.
var (
	// ErrInvalidConfig: the Config failed validation; the message names the
	// field and the offending value. It is conferr.ErrInvalid, so that one
	// errors.Is test recognises a bad value in any section of kbridge's
	// configuration.
	ErrInvalidConfig = conferr.ErrInvalid
	// ErrNotSupported: the kernel or driver refused what was asked, e.g.
	// native XDP on a driver without it when mode is "native".
	ErrNotSupported = errors.New("not supported")
	// ErrBusy: the NIC already runs an XDP program kbridge cannot share, or
	// the maps in the pin path belong to a live path.
	ErrBusy = errors.New("busy")
	// ErrExists: the exception interface name is taken by an interface
	// kbridge did not create.
	ErrExists = errors.New("interface already exists")
	// ErrNoDevice: the NIC named in the Config does not exist.
	ErrNoDevice = errors.New("no such interface")
	// ErrClosed: the Path was already closed.
	ErrClosed = errors.New("xdp path closed")
)

// FieldError is one validation failure: kbridge's shared configuration
// error, whose Key is the YAML path under the top-level configuration (for
// example "xdp.fast_path[1].ports"). It matches ErrInvalidConfig under
// errors.Is. The alias lets code outside kbridge's module, which cannot name
// an internal package, use errors.As with it.
type FieldError = conferr.FieldError

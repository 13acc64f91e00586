package xdp

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of these (or an
// errno from the kernel) with %w, so callers can test them with errors.Is.
var (
	// ErrInvalidConfig: the Config failed validation; the message names the
	// field and the offending value.
	ErrInvalidConfig = errors.New("invalid xdp configuration")
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

// FieldError is one validation failure. Field is the YAML path under the
// top-level configuration (for example "xdp.fast_path[1].ports").
type FieldError struct {
	Field string
	Value string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %q: %s", e.Field, e.Value, e.Msg)
}

// Unwrap lets errors.Is(err, ErrInvalidConfig) hold for every FieldError.
func (e *FieldError) Unwrap() error { return ErrInvalidConfig }

package daemon

import (
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap"
)

// What the command asks of the sides without a data path running (kbridge
// version, kbridge cleanup, the exit code of a refused start): the command
// goes through the daemon and imports no side.

// DPDKBuiltWith is the DPDK this kbridge was built with, as DPDK writes
// its version ("22.11.11"): in mode ring the app must run that same one.
func DPDKBuiltWith() string { return ring.BuiltWith().String() }

// RemoveOrphanInterface removes the TAP interface called name when nothing
// holds it (an interface a crashed kbridge left); one in use is left, and
// the error wraps ErrInterfaceInUse. No interface of that name is no error.
func RemoveOrphanInterface(name string) error { return tap.RemoveOrphan(name) }

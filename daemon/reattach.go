package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/kbridge/kbridge/ring"
)

// A DPDK secondary maps the app's memory at the very addresses the app
// chose, and ASLR places this process's own mappings (its Go heap under
// Go's randomized heap base, its libraries, its threads' stacks) where it
// likes: now and then one sits at an address the app's memory needs, and
// EAL refuses (ring.ErrAddressTaken). DPDK's remedies are the app's
// --base-virtaddr, which is the app's to choose, and another try in a
// fresh process, since EAL starts once per process. kbridge takes the
// second: it executes itself again under the same pid (systemd's main pid,
// the pidfd an rte_kni.h app holds stay right), over the queues it was
// given, up to ealStarts starts, each after a short pause. ASLR draws a new
// layout at each exec, so a clash by chance is gone by the next start;
// one that stays names --base-virtaddr in the last start's error.

// ealStarts bounds the starts of EAL a kbridge makes under one pid.
const ealStarts = 3

// ealBackoff is the pause before the start after start n (1, 2...).
func ealBackoff(n int) time.Duration { return time.Duration(n) * 100 * time.Millisecond }

// envEALAttempt counts the starts of EAL a kbridge executed again made
// before it (Reattach, EALAttempt).
const envEALAttempt = "KBRIDGE_EAL_ATTEMPT"

// ReattachError is what a start returns when EAL could not map the app's
// memory and starts are left: the queues systemd passed (Fds, of
// Interface, in queue order; From as StartOpts.TakenBackFrom) are not
// adopted yet, and Reattach executes kbridge again over them.
type ReattachError struct {
	Err       error
	Starts    int // the starts of EAL made, this one included
	Interface string
	Fds       []int
	From      int
}

func (e *ReattachError) Error() string {
	return fmt.Sprintf("start %d of %d of EAL failed: %v", e.Starts, ealStarts, e.Err)
}

func (e *ReattachError) Unwrap() error { return e.Err }

// EALAttempt returns how many starts of EAL this pid made before this
// image (0 for a fresh kbridge) and unsets the variable that says it.
func EALAttempt() int {
	n, _ := strconv.Atoi(os.Getenv(envEALAttempt))
	_ = os.Unsetenv(envEALAttempt)
	return max(n, 0)
}

// Reattach executes kbridge again, with the same pid and arguments, over
// the queues e holds, for another start of EAL. It returns only if the
// exec failed.
func Reattach(e *ReattachError) error {
	return execAgain("start EAL again", os.Args, e.Interface, e.Fds, e.From, envEALAttempt+"="+strconv.Itoa(e.Starts))
}

// reattach is a failed start of EAL's error: on ring.ErrAddressTaken with
// starts left, a ReattachError that takes the stored queues from adopt,
// logged at warn, after ealBackoff; on the last start, err saying so and
// what is left to do; any other error as it is.
func reattach(err error, opts StartOpts, iface string, adopt *adoption, log *slog.Logger) error {
	if !errors.Is(err, ring.ErrAddressTaken) {
		return err
	}
	start := opts.EALAttempt + 1
	if start >= ealStarts {
		return fmt.Errorf("%w; in each of %d starts of this process: something sits at one of the app's addresses every time "+
			"(EAL's line above names it): start the app with --base-virtaddr at addresses free in kbridge too (docs/DPDK.md)",
			err, ealStarts)
	}
	log.Warn("EAL could not map the app's DPDK memory at the app's addresses (this process's address space has something there): "+
		"kbridge executes itself again, for a fresh layout", "start", start, "of", ealStarts, "err", err)
	time.Sleep(ealBackoff(start))
	e := &ReattachError{Err: err, Starts: start, Interface: iface, Fds: adopt.fds, From: opts.TakenBackFrom}
	adopt.fds = nil // not closed: the next image adopts them
	return e
}

// reattachStored is reattach for a start that failed before any port took
// its stored queues (joinApp): those of interface iface among stored go
// with the next image, any other is closed as a start closes what it does
// not adopt (storedAdoption).
func reattachStored(err error, opts StartOpts, iface string, stored []ListenFd, log *slog.Logger) error {
	o := opts
	o.Stored = stored
	adopt, _, _ := storedAdoption(o, iface, log)
	err = reattach(err, opts, iface, adopt, log)
	adopt.close()
	return err
}

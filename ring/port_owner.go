package ring

/*
#include <stdlib.h>
#include "port.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// Owner names the kbridge process that serves a port (kbridge_ctl.owner):
// its pid and the low 32 bits of its start time in clock ticks since boot,
// which tell a reused pid apart.
type Owner struct {
	PID   int
	Start uint32
}

func ownerOf(v uint64) Owner { return Owner{PID: int(uint32(v)), Start: uint32(v >> 32)} }

// Started returns when the owner started, if it still runs; zero otherwise.
func (o Owner) Started() time.Time {
	ticks := kbPidStart(o.PID)
	if ticks == 0 || uint32(ticks) != o.Start {
		return time.Time{}
	}
	boot := bootTime()
	if boot.IsZero() {
		return time.Time{}
	}
	// USER_HZ, the unit of /proc/<pid>/stat, is 100 on every Linux ABI.
	return boot.Add(time.Duration(ticks) * (time.Second / 100))
}

// kbPidStart is pid's start time in clock ticks since boot, 0 when it
// does not run (field 22 of /proc/<pid>/stat, read by kbridge.h's parser).
func kbPidStart(pid int) uint64 { return uint64(C.kb_pid_start(C.int(pid))) }

func (o Owner) value() uint64 { return uint64(uint32(o.PID)) | uint64(o.Start)<<32 }

// Fate says what became of the owner, as /proc says now: "" while it runs
// (stopped, frozen or starved included), else why it counts as dead.
// kbridge.h's kbridge_port_free() applies the same rule.
func (o Owner) Fate() string {
	switch C.kb_owner_state(C.uint64_t(o.value())) {
	case C.KBRIDGE_OWNER_ALIVE:
		return ""
	case C.KBRIDGE_OWNER_ZOMBIE:
		return "a zombie (it exited; its parent has not reaped it)"
	case C.KBRIDGE_OWNER_REUSED:
		return "its pid now names another process (another start time)"
	case C.KBRIDGE_OWNER_NONE:
		return "none"
	default:
		return "exited"
	}
}

func (o Owner) String() string {
	if t := o.Started(); !t.IsZero() {
		return fmt.Sprintf("kbridge pid %d (started %s)", o.PID, t.Format(time.DateTime))
	}
	return fmt.Sprintf("kbridge pid %d", o.PID)
}

func bootTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
}

// OwnedError means another kbridge, still running, serves the port.
type OwnedError struct {
	Port  string
	Owner Owner
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("port %s is served by %s: stop it first", e.Port, e.Owner)
}

// ErrClosing means the app is freeing the port (kbridge_port_free).
var ErrClosing = errors.New("the DPDK app is freeing the port")

// Claim is what Port.Claim found.
type Claim struct {
	// Enforced is false for a version-1 app, whose control block has no
	// owner field: nothing stops a second kbridge, and what a killed one
	// held is not recorded.
	Enforced bool
	// Previous is the owner that was gone (exited without releasing,
	// killed, a zombie not yet reaped; or its pid now runs another
	// process) and was taken over.
	Previous *Owner
}

// Claim makes this process the port's one kbridge, atomically, in the
// control block; call it before touching a ring or sending an eventfd. It
// fails with an *OwnedError while another kbridge runs and serves the port,
// and with ErrClosing while the app frees it. A gone owner is taken over:
// one that exited, a zombie its parent has not reaped, a pid that now names
// another process (Owner.Fate).
// It then opens (or creates) the shared record of what the workers hold.
func (p *Port) Claim() (Claim, error) {
	me := uint64(C.kb_self_owner())
	var prev C.uint64_t
	switch rc := C.kb_port_claim(p.info.ctl, p.info.version, C.uint64_t(me), &prev); rc {
	case 0:
	case -C.ENOTSUP:
		return Claim{}, nil
	case -C.EBUSY:
		return Claim{}, &OwnedError{Port: p.name, Owner: ownerOf(uint64(prev))}
	case -C.ESHUTDOWN:
		return Claim{}, fmt.Errorf("port %s: %w", p.name, ErrClosing)
	default:
		return Claim{}, fmt.Errorf("ring: claim port %s: error %d", p.name, rc)
	}
	c := Claim{Enforced: true}
	if prev != 0 {
		o := ownerOf(uint64(prev))
		c.Previous = &o
	}
	cname := C.CString(p.name)
	defer C.free(unsafe.Pointer(cname))
	var created C.int
	h := C.kb_held_open(cname, &created)
	if h == nil {
		C.kb_port_release(p.info.ctl, C.uint64_t(me))
		return Claim{}, fmt.Errorf("ring: port %s: no memory for the held-mbuf record (memzone %s%s%s)",
			p.name, C.KBRIDGE_MZ_PREFIX, p.name, C.KBRIDGE_HELD_SUFFIX)
	}
	p.mu.Lock()
	p.owner, p.held, p.released = me, h, false
	p.mu.Unlock()
	return c, nil
}

// FreeHeld frees what the record says the workers hold and clears it, and
// returns how many mbufs it freed in each direction: after Claim and before
// any worker starts, what a killed kbridge held; after the workers stopped,
// nothing. Calling it while a worker runs frees what the worker uses. For
// an app of kbridge.h version 7 "frees" is "puts on the spent ring", for
// the app to free: what the ring has no room for stays on the record, and
// the workers put it there before they take anything (held).
func (p *Port) FreeHeld() (toKernel, fromKernel int) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.held == nil || p.released {
		return 0, 0
	}
	for q := 0; q < C.KBRIDGE_MAX_QUEUES; q++ {
		toKernel += p.giveHeld(&p.held.out[q], q)
		fromKernel += p.giveHeld(&p.held.in[q], q)
	}
	return toKernel, fromKernel
}

// giveHeld frees what rec, a record of queue q, names (version 7: puts it
// on q's spent ring, or leaves it when it has no room), and returns how
// many mbufs that was.
func (p *Port) giveHeld(rec *C.struct_kbridge_held_q, q int) int {
	if p.info.version >= 7 {
		if q >= p.NumQueues() {
			return 0 // no ring: a record no worker of this port uses
		}
		return int(C.kb_held_give(rec, p.info.spent[q]))
	}
	return int(C.kb_held_free(rec))
}

// Closing reports whether the app is freeing the port (kbridge_port_free):
// kbridge must stop and Release, which the app waits for.
func (p *Port) Closing() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released || p.info.version < 2 {
		return false
	}
	return C.kb_port_closing(p.info.ctl) != 0
}

// Release gives the port up, once no worker runs: it frees what the record
// still names (nothing after a clean stop; version 7: what the spent ring
// had no room for, which stays on the record for the app's
// kbridge_port_free() or the next kbridge when it still has none) and
// clears the owner, which is also the acknowledgement a closing app waits
// for. From then on the app may free its shared memory, and Port reads
// none of it (PoolInUse and the app counters read as 0). It may be called
// more than once.
func (p *Port) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return
	}
	if p.held != nil {
		for q := 0; q < C.KBRIDGE_MAX_QUEUES; q++ {
			p.giveHeld(&p.held.out[q], q)
			p.giveHeld(&p.held.in[q], q)
		}
	}
	if p.served {
		// Not served any more, then no owner: the app never sees its
		// port served by no one. (A refusal stays for the app to read.)
		C.kb_port_set_served(p.info.ctl, C.uint32_t(p.info.version), C.KBRIDGE_SERVED_NOT, nil)
	}
	if p.owner != 0 {
		C.kb_port_release(p.info.ctl, C.uint64_t(p.owner))
	}
	p.released = true
}

package ring

/*
#include "port.h"
*/
import "C"

import (
	"errors"
	"fmt"
)

// ErrNotSingle means a ring of the port is not single-producer /
// single-consumer on kbridge's side, as kbridge_port_create makes them:
// kbridge does not reconcile it.
var ErrNotSingle = errors.New("ring: not a single-producer/single-consumer ring")

// Recovered is what Reconcile found of the ring operations a killed
// kbridge had under way, summed over the queues (port_reconcile.c says how each
// is told).
type Recovered struct {
	// ToKernelReclaimed entries of to_kernel the dead consumer had claimed
	// (cons.head moved) but not released (cons.tail): dequeued again.
	ToKernelReclaimed int `json:"to_kernel_reclaimed"`
	// ToKernelFreed mbufs it had dequeued and released but not yet put on
	// record: freed.
	ToKernelFreed int `json:"to_kernel_freed"`
	// FromKernelDiscarded slots of from_kernel the dead producer had
	// reserved (prod.head moved) but not published (prod.tail): the next
	// enqueue overwrites them before it publishes anything.
	FromKernelDiscarded int `json:"from_kernel_discarded"`
	// FromKernelFreed mbufs of that enqueue it had not published: freed.
	FromKernelFreed int `json:"from_kernel_freed"`
	// FromKernelPublished mbufs of it that it had published (prod.tail
	// moved) before it died: the app's, left to it.
	FromKernelPublished int `json:"from_kernel_published"`
	// Inconsistent records whose pend word named more than an operation
	// could move: left alone (a leak at worst, never a double free).
	Inconsistent int `json:"inconsistent"`
	// An app of kbridge.h version 7: its fresh and spent rings, as
	// to_kernel and from_kernel. What is "freed" of an app's mbufs goes to
	// its spent ring, for the app to free (kbridge never calls its pool):
	// here, and in ToKernelFreed and FromKernelFreed.
	FreshReclaimed int `json:"fresh_reclaimed"`
	FreshFreed     int `json:"fresh_freed"`
	SpentDiscarded int `json:"spent_discarded"`
	SpentFreed     int `json:"spent_freed"`
	SpentPublished int `json:"spent_published"`
}

// Any reports whether anything was found.
func (r Recovered) Any() bool { return r != Recovered{} }

// Reconcile puts kbridge's side of every ring of the port back in step
// with itself before any worker runs: after Claim, before FreeHeld (it
// leaves what the held records name to FreeHeld). On to_kernel (and an
// app of version 7's fresh ring), where kbridge consumes, cons.head goes
// back to cons.tail; on from_kernel (and spent), where it produces,
// prod.head goes back to prod.tail; the mbufs a killed kbridge's ring
// operation had taken off its record are freed (version 7: put on the
// spent ring, or on the record when it has no room). The app's side of
// each ring is never written, so the app may run meanwhile. A version-1
// app keeps no record and no owner: nothing is done.
func (p *Port) Reconcile() (Recovered, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var res C.struct_kb_reconcile
	if p.held == nil || p.released {
		return Recovered{}, nil
	}
	for q := 0; q < p.NumQueues(); q++ {
		rc := C.kb_ring_reconcile(p.info.to_kernel[q], p.info.from_kernel[q], p.info.fresh[q], p.info.spent[q],
			&p.held.out[q], &p.held.in[q], &res)
		if rc == -C.ENOTSUP {
			return Recovered{}, fmt.Errorf("%w: port %s queue %d", ErrNotSingle, p.name, q)
		}
	}
	return Recovered{
		ToKernelReclaimed:   int(res.to_kernel_reclaimed),
		ToKernelFreed:       int(res.to_kernel_freed),
		FromKernelDiscarded: int(res.from_kernel_discarded),
		FromKernelFreed:     int(res.from_kernel_freed),
		FromKernelPublished: int(res.from_kernel_published),
		Inconsistent:        int(res.inconsistent),
		FreshReclaimed:      int(res.fresh_reclaimed),
		FreshFreed:          int(res.fresh_freed),
		SpentDiscarded:      int(res.spent_discarded),
		SpentFreed:          int(res.spent_freed),
		SpentPublished:      int(res.spent_published),
	}, nil
}

package ring

/*
#include "port.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/kbridge/kbridge/bridge"
)

// Out moves bursts from a to_kernel ring into Go's view: the burst core's
// out buffer over kb_ring_burst_ops, giving each burst back to the app's
// spent ring (kbridge.h version 7) or its pool. It implements
// bridge.AppOut, with the residence-time histogram of the app's enqueue
// time stamps.
type Out struct{ outBuf }

var (
	_ bridge.AppOut     = (*Out)(nil)
	_ bridge.AppPolicer = (*Out)(nil)
)

// App is this queue's app side for a worker: out and in over its rings,
// the queue as the waker, and what they can: TSO only where the app
// declared it (it does not change while the port lives), the cut of
// super-frames straight into mbufs, the kernel's partial checksums finished
// as they are copied, CoPP's policers and reserve, and the
// residence histogram.
func (q *Queue) App(out *Out, in *In) bridge.App {
	app := bridge.App{Out: out, In: in, Waker: q, Split: in, Csum: in, Policer: out, Reserver: in, Residence: out.Residence}
	if in.takes {
		app.TSO = in
	}
	return app
}

// Out returns a burst reader for this queue's to_kernel ring holding up to
// batch packets of up to maxSegs segments each.
func (q *Queue) Out(batch, maxSegs int) (*Out, error) {
	info := &q.port.info
	o := &Out{}
	err := o.open(outConfig{
		Ops:       unsafe.Pointer(&C.kb_ring_burst_ops),
		Ctx:       unsafe.Pointer(info.to_kernel[q.id]),
		Batch:     batch,
		MaxSegs:   maxSegs,
		TSCOffset: int32(info.tsc_offset),
		TSCHz:     uint64(info.tsc_hz),
		Held:      q.held(false),
		Src:       q.src(),
	})
	if err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	return o, nil
}

// held names the record of what this queue's worker holds toward the
// kernel (or, with in, toward the app); none for a version-1 app.
func (q *Queue) held(in bool) heldRec {
	h := q.port.held
	if h == nil {
		return heldRec{}
	}
	rec := &h.out[q.id]
	if in {
		rec = &h.in[q.id]
	}
	return heldRec{N: unsafe.Pointer(&rec.n), M: unsafe.Pointer(&rec.m[0]), Pend: unsafe.Pointer(&rec.pend),
		Max: C.KBRIDGE_HELD_MAX, In: in}
}

// src is where this queue's buffers take mbufs from and give them back
// to: the app's fresh and spent rings (kbridge.h version 7), else the
// app's pool, through kbridge's handlers, which OpenPort checked.
func (q *Queue) src() srcConfig {
	info := &q.port.info
	if info.fresh[q.id] == nil {
		return srcConfig{Pool: unsafe.Pointer(info.pool)}
	}
	return srcConfig{Fresh: unsafe.Pointer(info.fresh[q.id]), Spent: unsafe.Pointer(info.spent[q.id]),
		SpentWaits: unsafe.Pointer(&info.ctl.qm[q.id].spent_waits)}
}

// Residence copies the residence-time histogram into dst. After Close it
// leaves dst as it is.
func (o *Out) Residence(dst []uint64) { o.residence(dst) }

// In moves frames read from the kernel into mbufs on a from_kernel ring:
// the burst core's in buffer over kb_ring_burst_ops, the mbufs taken off
// the app's fresh ring (kbridge.h version 7) or from its pool. It
// implements bridge.AppIn, bridge.AppTSO and bridge.AppSplit.
type In struct {
	inBuf
	takes bool // the app declared TSO
}

var (
	_ bridge.AppIn       = (*In)(nil)
	_ bridge.AppTSO      = (*In)(nil)
	_ bridge.AppSplit    = (*In)(nil)
	_ bridge.AppCsum     = (*In)(nil)
	_ bridge.AppReserver = (*In)(nil)
)

// In returns a burst writer for this queue's from_kernel ring with batch
// slots of stride bytes (the largest frame it can carry).
func (q *Queue) In(batch, stride int) (*In, error) {
	info := &q.port.info
	cfg := inConfig{
		Ops:    unsafe.Pointer(&C.kb_ring_burst_ops),
		Ctx:    unsafe.Pointer(info.from_kernel[q.id]),
		Src:    q.src(),
		Room:   int(C.kb_pool_data_room(info.pool)),
		Batch:  batch,
		Stride: stride,
	}
	takes, maxSegs := q.port.AppTSO()
	if takes {
		cfg.TSOMaxSegs = maxSegs
	}
	cfg.Held = q.held(true)
	in := &In{takes: takes}
	if err := in.open(cfg); err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	return in, nil
}

// TakesTSO reports whether the app declared KBRIDGE_APP_TSO.
func (in *In) TakesTSO() bool { return in.takes }

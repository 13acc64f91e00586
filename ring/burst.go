package ring

/*
#include "port.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/internal/burst"
)

// HistBuckets is the number of residence-time buckets; bucket i counts
// packets that waited less than HistBound(i).
const HistBuckets = burst.HistBuckets

// HistBound returns the upper bound of bucket i in nanoseconds (the last
// bucket is open-ended).
func HistBound(i int) uint64 { return burst.HistBound(i) }

// Out moves bursts from a to_kernel ring into Go's view. It implements
// bridge.AppOut.
type Out struct {
	b *burst.Out
}

var _ bridge.AppOut = (*Out)(nil)

// Out returns a burst reader for this queue's to_kernel ring holding up to
// batch packets of up to maxSegs segments each.
func (q *Queue) Out(batch, maxSegs int) (*Out, error) {
	info := &q.port.info
	b, err := burst.NewOut(burst.OutConfig{
		Ops:       unsafe.Pointer(&C.kb_ring_burst_ops),
		Ctx:       unsafe.Pointer(info.to_kernel[q.id]),
		Batch:     batch,
		MaxSegs:   maxSegs,
		TSCOffset: int32(info.tsc_offset),
		TSCHz:     uint64(info.tsc_hz),
		Held:      q.held(false),
	})
	if err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	return &Out{b: b}, nil
}

// held names the record of what this queue's worker holds toward the
// kernel (or, with in, toward the app); none for a version-1 app.
func (q *Queue) held(in bool) burst.Held {
	testHoldOnce.Do(setTestHold)
	h := q.port.held
	if h == nil {
		return burst.Held{}
	}
	rec := &h.out[q.id]
	if in {
		rec = &h.in[q.id]
	}
	return burst.Held{N: unsafe.Pointer(&rec.n), M: unsafe.Pointer(&rec.m[0]), Pend: unsafe.Pointer(&rec.pend),
		Max: C.KBRIDGE_HELD_MAX}
}

// Next frees the previous burst and dequeues the next one.
func (o *Out) Next() int { return o.b.Next() }

// Packet returns packet i of the current burst.
func (o *Out) Packet(i int) (bridge.Packet, error) { return o.b.Packet(i) }

// Written marks packet i as delivered: it counts toward residence time.
func (o *Out) Written(i int) { o.b.Written(i) }

// Residence copies the residence-time histogram into dst. After Close it
// leaves dst as it is.
func (o *Out) Residence(dst []uint64) { o.b.Residence(dst) }

// Close frees the current burst and the buffer.
func (o *Out) Close() { o.b.Close() }

// In moves frames read from the kernel into mbufs on a from_kernel ring. It
// implements bridge.AppIn.
type In struct {
	b     *burst.In
	takes bool // the app declared TSO
}

var (
	_ bridge.AppIn  = (*In)(nil)
	_ bridge.AppTSO = (*In)(nil)
)

// In returns a burst writer for this queue's from_kernel ring with batch
// slots of stride bytes (the largest frame it can carry).
func (q *Queue) In(batch, stride int) (*In, error) {
	info := &q.port.info
	cfg := burst.InConfig{
		Ops:    unsafe.Pointer(&C.kb_ring_burst_ops),
		Ctx:    unsafe.Pointer(info.from_kernel[q.id]),
		Pool:   unsafe.Pointer(info.pool),
		Batch:  batch,
		Stride: stride,
	}
	takes, maxSegs := q.port.AppTSO()
	if takes {
		cfg.TSOMaxSegs = maxSegs
	}
	cfg.Held = q.held(true)
	b, err := burst.NewIn(cfg)
	if err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	return &In{b: b, takes: takes}, nil
}

// TakesTSO reports whether the app declared KBRIDGE_APP_TSO.
func (in *In) TakesTSO() bool { return in.takes }

// PutTSO queues one TCP super-frame as one TSO mbuf chain.
func (in *In) PutTSO(frame []byte, t bridge.TSOFrame) (bridge.PutResult, error) {
	return in.b.PutTSO(frame, t)
}

// Cap returns the number of slots.
func (in *In) Cap() int { return in.b.Cap() }

// Slot returns slot i, a buffer of stride bytes.
func (in *In) Slot(i int) []byte { return in.b.Slot(i) }

// Put queues slots 0..len(lens)-1 with those frame lengths.
func (in *In) Put(lens []int) bridge.PutResult { return in.b.Put(lens) }

// Close frees the buffer.
func (in *In) Close() { in.b.Close() }

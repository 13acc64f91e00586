package ring

// Control-plane protection in the burst core (burst.c's kb_out_police over
// kbridge_classify.h and burst_policer.c): an out buffer classifies each burst's frames,
// polices them per class and frees what its policers refuse inside the
// burst's one cgo call, before a frame reaches Go or costs a syscall. This
// file puts a copp.Config in force and reads the counters; classify,
// classifyBatch and policer drive the pure C from the package's tests and
// benchmarks (cgo is not allowed in _test.go files), unexported so that
// they are no API.

/*
#include <errno.h>
#include <stdlib.h>
#include "burst.h"

static unsigned int
kb_classify_batch(const uint8_t *buf, uint32_t stride, const uint32_t *lens, uint32_t n,
		  uint32_t rounds, const struct kbridge_class_match *mg, uint8_t *classes)
{
	unsigned int sum = 0;
	uint32_t r, i;
	uint8_t why;

	for (r = 0; r < rounds; r++)
		for (i = 0; i < n; i++) {
			classes[i] = (uint8_t)kbridge_classify(buf + (size_t)i * stride, lens[i], mg, &why);
			sum += classes[i];
		}
	return sum;
}

static void
kb_in_set_reserve(struct kb_in *b, uint8_t on)
{
	__atomic_store_n(&b->reserve_on, on, __ATOMIC_RELAXED);
}

static uint64_t
kb_in_load(const uint64_t *v)
{
	return __atomic_load_n(v, __ATOMIC_RELAXED);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/copp"
)

// The C classes and reasons are copp's.
var (
	_ [C.KBRIDGE_CLASSES - copp.NumClasses]struct{}
	_ [copp.NumClasses - C.KBRIDGE_CLASSES]struct{}
	_ [C.KBRIDGE_HDR_WHYS - copp.NumWhys]struct{}
	_ [copp.NumWhys - C.KBRIDGE_HDR_WHYS]struct{}
	_ [C.KBRIDGE_MATCH_MAX_PORTS - copp.MaxPorts]struct{}
	_ [C.KBRIDGE_MATCH_MAX_ETHERTYPES - copp.MaxEthertypes]struct{}
	_ [C.KBRIDGE_MATCH_MAX_PROTOS - copp.MaxProtocols]struct{}
	_ [C.KBRIDGE_MATCH_MAX_PREFIXES - copp.MaxSources]struct{}
)

// ErrCoPP means a copp.Config that Validate would refuse.
var ErrCoPP = errors.New("copp configuration out of range")

// coppC turns c into the burst core's form.
func coppC(c copp.Config) (C.struct_kb_copp, error) {
	var k C.struct_kb_copp
	if err := c.Validate("copp"); err != nil {
		return k, fmt.Errorf("%w: %w", ErrCoPP, err)
	}
	if c.Enabled {
		k.on = 1
	}
	for i, r := range c.Rates() {
		k.rate[i] = C.struct_kb_rate{pps: C.uint64_t(r.PPS), burst: C.uint64_t(r.Burst),
			bps: C.uint64_t(r.Bytes), burst_bytes: C.uint64_t(r.BurstBytes)}
	}
	m := &k.match
	mg := c.Management
	for i, p := range mg.Ports {
		m.ports[i] = C.uint16_t(p)
	}
	for i, e := range mg.Ethertypes {
		m.ethertypes[i] = C.uint16_t(e)
	}
	for i, p := range mg.Protocols {
		m.protos[i] = C.uint8_t(p)
	}
	m.nports, m.nethertypes, m.nprotos = C.uint8_t(len(mg.Ports)), C.uint8_t(len(mg.Ethertypes)), C.uint8_t(len(mg.Protocols))
	for i, p := range c.Prefixes() {
		px := &m.prefixes[i]
		a := p.Addr().AsSlice()
		for j, b := range a {
			px.addr[j] = C.uint8_t(b)
		}
		px.len = C.uint8_t(p.Bits())
		if p.Addr().Is6() {
			px.v6 = 1
		}
		m.nprefixes++
	}
	return k, nil
}

// SetCoPP hands c to the buffer's worker, which puts it in force at its next
// burst with full buckets (Enabled false turns it off); the counters go on.
// Any goroutine may call it.
func (o *outBuf) SetCoPP(c copp.Config) error {
	k, err := coppC(c)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.b == nil {
		return nil
	}
	if C.kb_out_set_copp(o.b, &k) != 0 {
		return ErrNoMemory
	}
	return nil
}

// CoPP copies the classifier's and policers' counters into dst; false after
// Close.
func (o *outBuf) CoPP(dst *copp.Snapshot) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.b == nil {
		return false
	}
	s := &o.b.copp_stats
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	now := uint64(ts.Nano())
	dst.Policing = dst.Policing[:0]
	for i := range dst.Passed {
		dst.Passed[i] = uint64(s.passed[i])
		dst.Policed[i] = uint64(s.policed[i])
		if at := uint64(s.policed_at[i]); at != 0 && now-at < uint64(copp.PolicingWindow) {
			dst.Policing = append(dst.Policing, copp.ClassNames[i])
		}
	}
	for i := range dst.Unparsed {
		dst.Unparsed[i] = uint64(s.why[i])
	}
	for i := range dst.Unwanted {
		dst.Unwanted[i] = uint64(s.unwanted[i])
	}
	return true
}

// SetReserve keeps (or no longer keeps) the last KBRIDGE_RESERVE slots of
// the app's side for control and neighbour frames; any goroutine may call
// it, the worker sees it at its next burst.
func (in *inBuf) SetReserve(on bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.b == nil {
		return
	}
	var v C.uint8_t
	if on {
		v = 1
	}
	C.kb_in_set_reserve(in.b, v)
}

// Reserve adds what the reserve did to dst: the frames it took and those
// the room refused, by class; false after Close.
func (in *inBuf) Reserve(dst *copp.Snapshot) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.b == nil {
		return false
	}
	dst.FromKernelReserved = uint64(C.kb_in_load(&in.b.reserved))
	for i := range dst.FromKernelRoom {
		dst.FromKernelRoom[i] = uint64(C.kb_in_load(&in.b.room_dropped[i]))
	}
	return true
}

// Policed is how many frames of the last Next's burst the policers freed:
// work done, though Next did not return them.
func (o *outBuf) Policed() int { return int(o.b.last_policed) }

// classify returns the class (copp.Control...) of frame under c's
// management match, and why its headers could not be read to their end
// (copp.Parsed when they could): the burst core's classifier, for the
// package's tests (cgo cannot be called from a _test.go file).
func classify(frame []byte, c copp.Config) (class, why int, err error) {
	return classifyAs(frame, c, false)
}

// classifyHost is classify for a frame the host sends (the reserve toward
// the app, kbridge_classify_host): its ports alone make it control.
func classifyHost(frame []byte, c copp.Config) (class, why int, err error) {
	return classifyAs(frame, c, true)
}

func classifyAs(frame []byte, c copp.Config, host bool) (class, why int, err error) {
	k, err := coppC(c)
	if err != nil {
		return 0, 0, err
	}
	var w C.uint8_t
	var p *C.uint8_t
	if len(frame) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&frame[0]))
	}
	var cls C.uint
	if host {
		cls = C.kbridge_classify_host(p, C.uint32_t(len(frame)), &k.match, &w)
	} else {
		cls = C.kbridge_classify(p, C.uint32_t(len(frame)), &k.match, &w)
	}
	return int(cls), int(w), nil
}

// classifyBatch classifies frames lens[i] bytes long at buf[i*stride:]
// rounds times over, in one cgo call, and leaves the classes in classes:
// for measuring the classifier's cost per frame (BenchmarkClassifier).
func classifyBatch(buf []byte, stride int, lens []uint32, rounds int, c copp.Config, classes []uint8) error {
	k, err := coppC(c)
	if err != nil {
		return err
	}
	if len(lens) == 0 || len(classes) < len(lens) || len(buf) < (len(lens)-1)*stride+int(lens[len(lens)-1]) {
		return fmt.Errorf("ring: classifyBatch: %d frames of stride %d in %d bytes", len(lens), stride, len(buf))
	}
	C.kb_classify_batch((*C.uint8_t)(unsafe.Pointer(&buf[0])), C.uint32_t(stride),
		(*C.uint32_t)(unsafe.Pointer(&lens[0])), C.uint32_t(len(lens)), C.uint32_t(rounds),
		&k.match, (*C.uint8_t)(unsafe.Pointer(&classes[0])))
	return nil
}

// policer is the burst core's token bucket (burst_policer.h) for one class, on a
// clock the caller gives: for the package's tests.
type policer struct{ p C.struct_kb_policer }

// newPolicer returns a policer with r's rates and full buckets at now (ns).
func newPolicer(r copp.Rate, now uint64) *policer {
	p := &policer{}
	cr := C.struct_kb_rate{pps: C.uint64_t(r.PPS), burst: C.uint64_t(r.Burst),
		bps: C.uint64_t(r.Bytes), burst_bytes: C.uint64_t(r.BurstBytes)}
	C.kb_policer_init(&p.p, &cr, C.uint64_t(now))
	return p
}

// take reports whether a frame of n bytes passes at now (ns), taking its
// tokens if so.
func (p *policer) take(n int, now uint64) bool {
	return C.kb_policer_take(&p.p, C.uint32_t(n), C.uint64_t(now)) != 0
}

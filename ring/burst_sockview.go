package ring

// The view of the host's sockets in the burst core (burst_sockview.c): Go reads
// it (package sockview) and publishes it here; the workers read it once a
// burst. One per process, as the host's socket table is one per network
// namespace and kbridge serves one interface.

/*
#include <stdlib.h>
#include "burst_sockview.h"

// kb_sv_class_one classes one frame against the published view, as the
// burst core does: for tests.
static unsigned int
kb_sv_class_one(const uint8_t *p, uint32_t len, uint32_t pkt_len, unsigned int c, uint64_t now,
		uint64_t *why)
{
	int slot;
	const struct kb_sv_view *v = kb_sv_enter(now, &slot);

	c = kb_sv_class(v, c, p, len, pkt_len, why);
	kb_sv_leave(slot);
	return c;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/sockview"
	"golang.org/x/sys/unix"
)

// The view's bounds and the reasons' order are burst_sockview.h's.
var (
	_ [C.KB_SV_WHYS - copp.NumUnwantedWhys]struct{}
	_ [copp.NumUnwantedWhys - C.KB_SV_WHYS]struct{}
	_ [C.KBRIDGE_CLASS_UNWANTED - copp.Unwanted]struct{}
	_ [copp.Unwanted - C.KBRIDGE_CLASS_UNWANTED]struct{}
)

// MaxLocalPrefixes and MaxBGPSessions bound what a published view holds;
// its filters are sockview's bounds.
const (
	MaxLocalPrefixes = C.KB_SV_MAX_LOCAL
	MaxBGPSessions   = C.KB_SV_MAX_BGP
)

var (
	_ [C.KB_SV_MAX_FILTERS - sockview.MaxFilters]struct{}
	_ [sockview.MaxFilters - C.KB_SV_MAX_FILTERS]struct{}
	_ [C.KB_SV_MAX_INSNS - sockview.MaxFilterInsns]struct{}
	_ [sockview.MaxFilterInsns - C.KB_SV_MAX_INSNS]struct{}
)

// ErrSockView means a view beyond the burst core's bounds.
var ErrSockView = errors.New("ring: socket view out of bounds")

// svWriter orders the writers: the C side has one.
var svWriter sync.Mutex

// SockViewFilter says which protocols' frames a published view classes
// unwanted.
type SockViewFilter struct{ TCP, UDP bool }

// RotateSockView is called before each reading of the host's sockets: what
// the host sends from now on is learned apart, kept until a reading begun
// after it is published. It reports whether a frame since the last call
// suggested a TCP connection the view lacks (a segment to a port no socket
// holds, other than a SYN or a reset; one of port 179 of no session the
// view lists): the reading should walk the connections.
func RotateSockView() (missed bool) {
	svWriter.Lock()
	defer svWriter.Unlock()
	return C.kb_sv_rotate() != 0
}

// SockViewUsed reports whether a burst of frames toward the kernel has
// wanted the view since the last call (whether one was in force or not):
// the reader of the host's sockets may read less often while none has.
func SockViewUsed() bool {
	return C.kb_sv_used() != 0
}

// PublishSockView puts v in force for the workers' next bursts, classing
// unwanted frames of the protocols f names, until expires (CLOCK_MONOTONIC,
// as MonotonicNow): a view not published again by then is not used. It
// waits for a worker still reading the view it replaces (a burst). Prefixes
// beyond MaxLocalPrefixes make it refuse (ErrSockView); sessions beyond
// MaxBGPSessions are left out (their frames keep the class their headers
// earn). The ports learned from the host's TCP frames are forgotten only
// with a view that walked the connections (v.Walked).
func PublishSockView(v sockview.View, f SockViewFilter, expires time.Duration) error {
	if len(v.Local) > MaxLocalPrefixes {
		return fmt.Errorf("%w: %d local prefixes, at most %d", ErrSockView, len(v.Local), MaxLocalPrefixes)
	}
	// The arrays are C's: the spec points at them and C copies them.
	var pin runtime.Pinner
	defer pin.Unpin()
	spec := C.struct_kb_sv_spec{expires: C.uint64_t(expires)}
	if !v.Walked {
		spec.keep_tcp = 1
	}
	if len(v.TCP) > 0 {
		pin.Pin(&v.TCP[0])
		spec.tcp, spec.ntcp = (*C.uint16_t)(unsafe.Pointer(&v.TCP[0])), C.uint32_t(len(v.TCP))
	}
	if len(v.UDP) > 0 {
		pin.Pin(&v.UDP[0])
		spec.udp, spec.nudp = (*C.uint16_t)(unsafe.Pointer(&v.UDP[0])), C.uint32_t(len(v.UDP))
	}
	local := make([]C.struct_kb_sv_prefix, len(v.Local))
	for i, p := range v.Local {
		a := p.Addr().AsSlice()
		for j, b := range a {
			local[i].addr[j] = C.uint8_t(b)
		}
		local[i].len = C.uint8_t(p.Bits())
		if p.Addr().Is6() {
			local[i].v6 = 1
		}
	}
	if len(local) > 0 {
		pin.Pin(&local[0])
		spec.local, spec.nlocal = &local[0], C.uint32_t(len(local))
	}
	sessions := make([]C.struct_kb_sv_session, 0, min(len(v.BGP), MaxBGPSessions))
	for _, s := range v.BGP {
		if len(sessions) == MaxBGPSessions {
			break
		}
		l, r := s.Local.Addr().Unmap(), s.Remote.Addr().Unmap()
		if l.Is6() != r.Is6() {
			continue
		}
		var cs C.struct_kb_sv_session
		for j, b := range l.AsSlice() {
			cs.laddr[j] = C.uint8_t(b)
		}
		for j, b := range r.AsSlice() {
			cs.raddr[j] = C.uint8_t(b)
		}
		cs.lport, cs.rport = C.uint16_t(s.Local.Port()), C.uint16_t(s.Remote.Port())
		if l.Is6() {
			cs.v6 = 1
		}
		sessions = append(sessions, cs)
	}
	if len(sessions) > 0 {
		pin.Pin(&sessions[0])
		spec.bgp, spec.nbgp = &sessions[0], C.uint32_t(len(sessions))
	}
	if len(v.Filters) > sockview.MaxFilters {
		return fmt.Errorf("%w: %d packet filters, at most %d", ErrSockView, len(v.Filters), sockview.MaxFilters)
	}
	filters := make([]C.struct_kb_sv_filter, len(v.Filters))
	for i, f := range v.Filters {
		if len(f.Insns) == 0 || len(f.Insns) > sockview.MaxFilterInsns {
			return fmt.Errorf("%w: a packet filter of %d instructions", ErrSockView, len(f.Insns))
		}
		for j, in := range f.Insns {
			filters[i].insn[j] = C.struct_kb_cbpf_insn{code: C.uint16_t(in.Code), jt: C.uint8_t(in.Jt), jf: C.uint8_t(in.Jf), k: C.uint32_t(in.K)}
		}
		filters[i].n, filters[i].proto = C.uint16_t(len(f.Insns)), C.uint16_t(f.Proto)
		if f.Dgram {
			filters[i].dgram = 1
		}
	}
	if len(filters) > 0 {
		pin.Pin(&filters[0])
		spec.filters, spec.nfilters = &filters[0], C.uint32_t(len(filters))
	}
	if f.TCP {
		spec.filter |= C.KB_SV_TCP
	}
	if f.UDP {
		spec.filter |= C.KB_SV_UDP
	}
	svWriter.Lock()
	defer svWriter.Unlock()
	if rc := C.kb_sv_publish(&spec); rc != 0 {
		return fmt.Errorf("%w: %w", ErrSockView, unix.Errno(-rc))
	}
	return nil
}

// WithdrawSockView stops classing frames by the host's sockets: no frame
// is unwanted, BGP frames keep the class their headers earn.
func WithdrawSockView() {
	svWriter.Lock()
	defer svWriter.Unlock()
	C.kb_sv_withdraw()
}

// MonotonicNow is CLOCK_MONOTONIC, the clock PublishSockView's expiry is
// on.
func MonotonicNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// sockViewClass returns the class the burst core gives frame, whose headers
// earned class c (classify), under the view published now, and why it is
// unwanted (a copp.Unwanted* reason) when it is: for the package's tests.
func sockViewClass(frame []byte, c int) (class, why int) {
	return sockViewClassOfChain(frame, len(frame), c)
}

// sockViewClassOfChain is sockViewClass for a frame of pktLen bytes whose
// first segment is first: for the package's tests.
func sockViewClassOfChain(first []byte, pktLen, c int) (class, why int) {
	var w [C.KB_SV_WHYS]C.uint64_t
	var p *C.uint8_t
	if len(first) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&first[0]))
	}
	class = int(C.kb_sv_class_one(p, C.uint32_t(len(first)), C.uint32_t(pktLen), C.uint(c), C.uint64_t(MonotonicNow()), &w[0]))
	why = -1
	for i, n := range w {
		if n != 0 {
			why = i
		}
	}
	return class, why
}

// runCBPF runs prog on frame as the burst core runs a packet socket's
// filter (burst_cbpf.h): the bytes it would capture, 0 for none. For the
// package's tests.
func runCBPF(prog []sockview.Insn, frame []byte) uint32 {
	if len(prog) == 0 {
		return 1
	}
	insns := make([]C.struct_kb_cbpf_insn, len(prog))
	for i, in := range prog {
		insns[i] = C.struct_kb_cbpf_insn{code: C.uint16_t(in.Code), jt: C.uint8_t(in.Jt), jf: C.uint8_t(in.Jf), k: C.uint32_t(in.K)}
	}
	var p *C.uint8_t
	if len(frame) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&frame[0]))
	}
	return uint32(C.kb_cbpf_run(&insns[0], C.uint16_t(len(insns)), p, C.uint32_t(len(frame))))
}

// learnSockView learns from frames as if the host sent them through the
// TAP: for the package's tests.
func learnSockView(frames ...[]byte) {
	const stride = 256
	buf := C.malloc(C.size_t(stride * max(len(frames), 1)))
	defer C.free(buf)
	lens := make([]C.uint32_t, len(frames)+1)
	b := unsafe.Slice((*byte)(buf), stride*max(len(frames), 1))
	for i, f := range frames {
		lens[i] = C.uint32_t(copy(b[i*stride:(i+1)*stride], f))
	}
	C.kb_sv_learn((*C.uint8_t)(buf), stride, &lens[0], C.uint16_t(len(frames)))
}

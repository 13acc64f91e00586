package ring

/*
#include "port.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RequestType is what a request asks the app to change on its port
// (KBRIDGE_REQ_* in kbridge.h).
type RequestType uint32

// The request types; their values are kbridge.h's.
const (
	RequestMTU      RequestType = C.KBRIDGE_REQ_MTU
	RequestLink     RequestType = C.KBRIDGE_REQ_LINK
	RequestMAC      RequestType = C.KBRIDGE_REQ_MAC
	RequestPromisc  RequestType = C.KBRIDGE_REQ_PROMISC
	RequestAllmulti RequestType = C.KBRIDGE_REQ_ALLMULTI
)

// Request is one change the kernel interface saw, for the app to apply.
type Request struct {
	Type  RequestType
	Value uint32           // the MTU; 1 or 0 for link, promisc, allmulticast
	MAC   net.HardwareAddr // RequestMAC
}

// ErrNoAnswer means the app did not answer a request in time.
var ErrNoAnswer = errors.New("the app did not answer")

// RefusedError is the app's refusal of a request: the errno its port gave.
type RefusedError struct{ Errno unix.Errno }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the app refused it: %v (-%d)", e.Errno, int(e.Errno))
}

// Requests returns which request types the app serves and the largest MTU
// it declared (0: none of its own). None for an app of a header before
// version 5, or one that did not call kbridge_port_serve_requests().
func (p *Port) Requests() (serves func(RequestType) bool, maxMTU int) {
	var mtu C.uint32_t
	p.mu.RLock()
	var mask uint32
	if !p.released {
		mask = uint32(C.kb_port_requests(p.info.ctl, p.info.version, &mtu))
	}
	p.mu.RUnlock()
	return func(t RequestType) bool { return t < 32 && mask&(1<<t) != 0 }, int(mtu)
}

// AppMAC returns the MAC the app recorded for its port
// (kbridge_port_set_mac); ok is false when it recorded none.
func (p *Port) AppMAC() (mac net.HardwareAddr, ok bool) {
	var b [6]C.uint8_t
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released || C.kb_port_app_mac(p.info.ctl, p.info.version, &b[0]) == 0 {
		return nil, false
	}
	return C.GoBytes(unsafe.Pointer(&b[0]), 6), true
}

// ErrNoRequests means the app's kbridge.h has no request mailbox (before
// version 5).
var ErrNoRequests = errors.New("the app's kbridge.h takes no requests")

// post puts r in the mailbox and returns its seq.
func (p *Port) post(r Request) (C.uint32_t, error) {
	var mac [6]C.uint8_t
	for i := 0; i < len(r.MAC) && i < 6; i++ {
		mac[i] = C.uint8_t(r.MAC[i])
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case p.released:
		return 0, fmt.Errorf("%w: the port is released", ErrNoAnswer)
	case p.info.version < 5:
		return 0, ErrNoRequests
	}
	return C.kb_port_post(p.info.ctl, C.uint32_t(r.Type), C.uint32_t(r.Value), &mac[0]), nil
}

// ErrUndoUnseen means a request was not posted: the app has not yet taken
// the value that replaced its last unanswered request (Supersede), and the
// mailbox holds one request, so a new one would overwrite it and the app
// would keep what kbridge set back.
var ErrUndoUnseen = errors.New("the app has not yet taken the value kbridge set back after its last unanswered request")

// pending is a request the app must answer before Ask posts another: the
// value a Supersede put in place of an unanswered request, or the MTU told
// at start (KeepUnanswered). Only the caller of Ask, Supersede and
// KeepUnanswered, which serializes them, touches it.
type pending struct {
	seq C.uint32_t // 0: none
	req Request
	// by is when waiting for its answer stops: Ask waits until then, and
	// after it only looks, so that one interface event asks at most
	// requests.timeout of the keeper for it.
	by time.Time
}

// Supersede posts r in place of a request the app did not answer within
// timeout, and does not wait: an app that polls late applies r (the value
// kbridge set the interface back to), never the request kbridge gave up
// on. Ask posts nothing else until the app has answered r; a kbridge that
// takes the port over leaves r for the app too (TakeOverRequest).
func (p *Port) Supersede(r Request, timeout time.Duration) error {
	var mac [6]C.uint8_t
	for i := 0; i < len(r.MAC) && i < 6; i++ {
		mac[i] = C.uint8_t(r.MAC[i])
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released || p.info.version < 5 {
		return fmt.Errorf("%w: the port is released", ErrNoAnswer)
	}
	seq := C.kb_port_post_undo(p.info.ctl, C.uint32_t(r.Type), C.uint32_t(r.Value), &mac[0])
	p.undo = pending{seq: seq, req: r, by: time.Now().Add(timeout)}
	return nil
}

// KeepUnanswered leaves the request Ask posted last and gave up on in the
// mailbox as the value the app must take before any other: the caller
// keeps the interface at that value (the interface's MTU, told at start).
func (p *Port) KeepUnanswered() {
	p.undo = p.last
	p.undo.by = time.Now()
}

// TakeOverRequest deals with what the previous kbridge left in the
// mailbox: an unanswered undo stays for the app, and Ask waits for its
// answer as for one of this kbridge's (up to timeout from now); any other
// unanswered request is withdrawn, since it was about an interface that
// went with that kbridge. Call it once, after Claim.
func (p *Port) TakeOverRequest(timeout time.Duration) (kept bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released {
		return false
	}
	if seq := C.kb_port_takeover_request(p.info.ctl, p.info.version); seq != 0 {
		p.undo = pending{seq: seq, by: time.Now().Add(timeout)}
		return true
	}
	return false
}

// UndoRefused returns, once, the app's refusal of a value Supersede posted
// (the port then keeps what kbridge gave up on: kb0 and the port differ),
// or nil.
func (p *Port) UndoRefused() error {
	err := p.undoRefused
	p.undoRefused = nil
	return err
}

// requestPoll is how often Ask looks for the app's answer: the app polls
// its side every few milliseconds, so a finer poll here buys nothing.
const requestPoll = time.Millisecond

// Ask posts r for the app and waits for its answer until timeout or ctx
// ends: nil when the app applied it, a *RefusedError when its port refused
// it, ErrNoAnswer (wrapped) when no answer came. While a pending value
// (Supersede, KeepUnanswered, TakeOverRequest) waits for the app, Ask first
// waits for that answer, until its own deadline, and returns ErrUndoUnseen
// (wrapped) without posting r if it does not come. One request at a time:
// the caller serializes (the interface's keeper does).
func (p *Port) Ask(ctx context.Context, r Request, timeout time.Duration) error {
	if u := p.undo; u.seq != 0 {
		res, err := p.answer(ctx, u.seq, u.by)
		if err != nil {
			// Not ErrNoAnswer: nothing was posted, so nothing is to be
			// superseded.
			return ErrUndoUnseen
		}
		p.undo = pending{}
		switch {
		case res == 0 && u.req.Type != 0:
			p.RecordAccepted(u.req)
		case res != 0:
			p.undoRefused = &RefusedError{Errno: unix.Errno(max(res, -res))}
		}
	}
	seq, err := p.post(r)
	if err != nil {
		return err
	}
	p.last = pending{seq: seq, req: r}
	res, err := p.answer(ctx, seq, time.Now().Add(timeout))
	switch {
	case err != nil && ctx.Err() == nil:
		return fmt.Errorf("%w within %v", err, timeout)
	case err != nil:
		return err
	case res == 0:
		return nil
	}
	return &RefusedError{Errno: unix.Errno(max(res, -res))}
}

// answer waits for the app's answer to request seq until deadline or ctx
// ends; ErrNoAnswer (wrapped) when none came.
func (p *Port) answer(ctx context.Context, seq C.uint32_t, deadline time.Time) (C.int32_t, error) {
	for {
		var res C.int32_t
		p.mu.RLock()
		answered := !p.released && C.kb_port_answer(p.info.ctl, seq, &res) == 1
		released := p.released
		p.mu.RUnlock()
		switch {
		case answered:
			return res, nil
		case released:
			return 0, fmt.Errorf("%w: the port is released", ErrNoAnswer)
		case time.Now().After(deadline):
			return 0, ErrNoAnswer
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %w", ErrNoAnswer, ctx.Err())
		case <-time.After(requestPoll):
		}
	}
}

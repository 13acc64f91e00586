package ringtest

/*
#include "primary.h"
*/
import "C"

import "unsafe"

// Mailbox is kbridge.h's request mailbox (version 5) on a control block in
// plain memory, with both sides of the protocol: kbridge's post and answer,
// the app's poll and reply. No EAL or root is needed.
type Mailbox struct{ p *C.struct_kbridge_port }

// Req is a request as the app's poll returns it.
type Req struct {
	Seq, Type, Value uint32
	MAC              [6]byte
}

// NewMailbox makes an empty control block; Free releases it.
func NewMailbox() *Mailbox { return &Mailbox{p: C.kbt_mailbox_new()} }

// Free releases the control block.
func (m *Mailbox) Free() { C.kbt_mailbox_free(m.p) }

// Serve is the app's kbridge_port_serve_requests.
func (m *Mailbox) Serve(types, maxMTU uint32) {
	C.kbt_mailbox_serve(m.p, C.uint32_t(types), C.uint32_t(maxMTU))
}

// Post is kbridge's side: posts a request and returns its seq.
func (m *Mailbox) Post(typ, value uint32, mac [6]byte) uint32 {
	return uint32(C.kbt_mailbox_post(m.p, C.uint32_t(typ), C.uint32_t(value), (*C.uint8_t)(unsafe.Pointer(&mac[0]))))
}

// Answer is kbridge's side: the app's result once it answered seq.
func (m *Mailbox) Answer(seq uint32) (result int32, ok bool) {
	var r C.int32_t
	ok = C.kbt_mailbox_answer(m.p, C.uint32_t(seq), &r) == 1
	return int32(r), ok
}

// Poll is the app's kbridge_port_poll_request.
func (m *Mailbox) Poll() (r Req, ok bool) {
	var seq, typ, val C.uint32_t
	ok = C.kbt_mailbox_poll(m.p, &seq, &typ, &val, (*C.uint8_t)(unsafe.Pointer(&r.MAC[0]))) == 1
	r.Seq, r.Type, r.Value = uint32(seq), uint32(typ), uint32(val)
	return r, ok
}

// Reply is the app's kbridge_port_reply.
func (m *Mailbox) Reply(seq uint32, result int) {
	C.kbt_mailbox_reply(m.p, C.uint32_t(seq), C.int(result))
}

// Tear leaves the mailbox as a kbridge killed while posting would.
func (m *Mailbox) Tear() { C.kbt_mailbox_tear(m.p) }

// Withdraw is kbridge's withdrawal of an unanswered request (a takeover).
func (m *Mailbox) Withdraw() { C.kbt_mailbox_withdraw(m.p) }

package ring

/*
#include "port.h"
*/
import "C"

import "net"

// Accepted is what the app's port accepted of kbridge's requests since the
// app created the port: the MAC, admin state and flags the port has now
// because an administrator set them on the interface. The control block
// keeps it (kbridge_ctl.accepted, kbridge's own), so that the next kbridge
// makes its interface as the port is instead of as it was at start: a
// port left with another MAC would filter the interface's traffic, a port
// left down would stay down under an interface that comes up. The MTU is
// not kept here: the keeper tells the app the interface's MTU at start.
type Accepted struct {
	MAC      net.HardwareAddr // nil: none accepted
	Up       *bool            // admin state; nil: none accepted
	Promisc  *bool
	Allmulti *bool
}

// Any reports whether anything was accepted.
func (a Accepted) Any() bool {
	return a.MAC != nil || a.Up != nil || a.Promisc != nil || a.Allmulti != nil
}

// The bits of kbridge_ctl.accepted: a flag saying a value is recorded, and
// the value's bit.
const (
	acceptedMAC        = uint64(C.KBRIDGE_ACCEPTED_MAC)
	acceptedLink       = uint64(C.KBRIDGE_ACCEPTED_LINK)
	acceptedUp         = uint64(C.KBRIDGE_ACCEPTED_UP)
	acceptedPromisc    = uint64(C.KBRIDGE_ACCEPTED_PROMISC)
	acceptedPromiscOn  = uint64(C.KBRIDGE_ACCEPTED_PROMISC_ON)
	acceptedAllmulti   = uint64(C.KBRIDGE_ACCEPTED_ALLMULTI)
	acceptedAllmultiOn = uint64(C.KBRIDGE_ACCEPTED_ALLMULTI_ON)
)

// encode is a as one word of kbridge_ctl.accepted.
func (a Accepted) encode() uint64 {
	var v uint64
	if len(a.MAC) == 6 {
		var m uint64
		for _, b := range a.MAC {
			m = m<<8 | uint64(b)
		}
		v |= acceptedMAC | m
	}
	flag := func(p *bool, known, on uint64) {
		if p != nil {
			v |= known
			if *p {
				v |= on
			}
		}
	}
	flag(a.Up, acceptedLink, acceptedUp)
	flag(a.Promisc, acceptedPromisc, acceptedPromiscOn)
	flag(a.Allmulti, acceptedAllmulti, acceptedAllmultiOn)
	return v
}

// decodeAccepted reads one word of kbridge_ctl.accepted.
func decodeAccepted(v uint64) Accepted {
	var a Accepted
	if v&acceptedMAC != 0 {
		a.MAC = make(net.HardwareAddr, 6)
		for i := range 6 {
			a.MAC[i] = byte(v >> (8 * (5 - i)))
		}
	}
	flag := func(known, on uint64) *bool {
		if v&known == 0 {
			return nil
		}
		b := v&on != 0
		return &b
	}
	a.Up = flag(acceptedLink, acceptedUp)
	a.Promisc = flag(acceptedPromisc, acceptedPromiscOn)
	a.Allmulti = flag(acceptedAllmulti, acceptedAllmultiOn)
	return a
}

// Accepted returns what the app's port accepted of the requests of this
// and earlier kbridges (nothing for an app of a header before version 5).
func (p *Port) Accepted() Accepted {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released {
		return Accepted{}
	}
	return decodeAccepted(uint64(C.kb_port_accepted(p.info.ctl, p.info.version)))
}

// RecordAccepted records that the app applied r, for the next kbridge. MTU
// requests are not recorded (see Accepted). Only the keeper, one request at
// a time, calls it.
func (p *Port) RecordAccepted(r Request) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released {
		return
	}
	a := decodeAccepted(uint64(C.kb_port_accepted(p.info.ctl, p.info.version)))
	on := r.Value != 0
	switch r.Type {
	case RequestMAC:
		a.MAC = append(net.HardwareAddr(nil), r.MAC...)
	case RequestLink:
		a.Up = &on
	case RequestPromisc:
		a.Promisc = &on
	case RequestAllmulti:
		a.Allmulti = &on
	default:
		return
	}
	C.kb_port_set_accepted(p.info.ctl, p.info.version, C.uint64_t(a.encode()))
}

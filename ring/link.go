package ring

/*
#include "port.h"
*/
import "C"

// Link is the app port's link as the app reported it with
// kbridge_port_set_link (kbridge.h version 4).
type Link struct {
	Up         bool
	SpeedMbps  uint32 // 0: unknown
	FullDuplex bool
}

// Link returns the app's last link report; ok is false when the app never
// reported one (an app of an older header, or one that does not call it)
// or the port is released.
func (p *Port) Link() (l Link, ok bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released {
		return Link{}, false
	}
	v := uint64(C.kb_port_link(p.info.ctl, p.info.version))
	if v&C.KBRIDGE_LINK_REPORTED == 0 {
		return Link{}, false
	}
	return Link{Up: v&C.KBRIDGE_LINK_UP != 0, SpeedMbps: uint32(v), FullDuplex: v&C.KBRIDGE_LINK_FULL_DUPLEX != 0}, true
}

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

// The bits of kbridge_ctl.link (KBRIDGE_LINK_* in kbridge.h).
const (
	linkReported   = 1 << 32
	linkUp         = 1 << 33
	linkFullDuplex = 1 << 34
)

// The Go constants are kbridge.h's: a mismatch does not compile.
var _ = [1]struct{}{}[linkReported-C.KBRIDGE_LINK_REPORTED+linkUp-C.KBRIDGE_LINK_UP+
	linkFullDuplex-C.KBRIDGE_LINK_FULL_DUPLEX]

// Link returns the app's last link report; ok is false when the app never
// reported one (an app of an older header, or one that does not call it)
// or the port is released.
func (p *Port) Link() (l Link, ok bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released {
		return Link{}, false
	}
	return decodeLink(uint64(C.kb_port_link(p.info.ctl, p.info.version)))
}

// decodeLink reads the control block's link word.
func decodeLink(v uint64) (Link, bool) {
	if v&linkReported == 0 {
		return Link{}, false
	}
	return Link{Up: v&linkUp != 0, SpeedMbps: uint32(v), FullDuplex: v&linkFullDuplex != 0}, true
}

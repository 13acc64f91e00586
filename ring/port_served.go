package ring

/*
#include <stdlib.h>
#include "port.h"
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What a kbridge serving every port of an app tells the app and hears
// from it (kbridge.h version 7): whether it serves a port, and why not;
// the interface the app wants for a port; the doorbell the app rings when
// it creates or frees a port.

// SetServed tells the app that kbridge serves the port (kbridge_port_wait_served()
// returns 0): its interface exists and its workers run.
func (p *Port) SetServed() {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.released {
		C.kb_port_set_served(p.info.ctl, C.uint32_t(p.info.version), C.KBRIDGE_SERVED_YES, nil)
		p.served = true
	}
}

// Refuse tells the app that kbridge will not serve the port as it is, and
// why (kbridge_port_wait_served() returns -ECONNREFUSED with it).
func (p *Port) Refuse(why string) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.released {
		return
	}
	cwhy := C.CString(why)
	defer C.free(unsafe.Pointer(cwhy))
	C.kb_port_set_served(p.info.ctl, C.uint32_t(p.info.version), C.KBRIDGE_SERVED_REFUSED, cwhy)
}

// RefusePort is Refuse for a port kbridge could not open: it writes only
// into a version-7 block that no live kbridge owns and that the app is not
// freeing. It returns why it did not.
func RefusePort(name, why string) error {
	cname, cwhy := C.CString(name), C.CString(why)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cwhy))
	if rc := C.kb_port_refuse(cname, cwhy); rc < 0 {
		return fmt.Errorf("ring: port %q: %w", name, unix.Errno(-rc))
	}
	return nil
}

// Hints are what the app wants of the interface a kbridge that discovers
// the port makes (kbridge_port_set_interface()): MTU 0 and Up nil leave
// the configuration's.
type Hints struct {
	MTU int
	Up  *bool
}

// Hints reads what the app wants of the port's interface.
func (p *Port) Hints() Hints {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var h Hints
	if p.released || p.info.version < 7 {
		return h
	}
	h.MTU = int(p.info.ctl.if_mtu)
	if f := p.info.ctl.if_flags; f&C.KBRIDGE_IF_UP_SET != 0 {
		up := f&C.KBRIDGE_IF_UP != 0
		h.Up = &up
	}
	return h
}

// Doorbell hands the app an eventfd it writes whenever it creates or frees
// a port (kbridge.h version 7), and returns it to read. It fails when the
// app has no port yet (its header registers the action with its first) or
// an older header.
func Doorbell() (*os.File, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("ring: doorbell: %w", err)
	}
	if rc := C.kb_send_doorbell(C.int(fd)); rc < 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("ring: doorbell: the app did not take it: %w", unix.Errno(-rc))
	}
	return os.NewFile(uintptr(fd), "kbridge-doorbell"), nil
}

package faults

import (
	"github.com/vishvananda/netlink"

	"github.com/kbridge/kbridge/ring/ringtest"
)

var optsNone = ringtest.InjectOpts{}

// netlinkLink looks an interface up in the test namespace.
type netlinkLink struct{ name string }

func (l netlinkLink) get() (netlink.Link, error) {
	var link netlink.Link
	err := inNS(func() (err error) {
		link, err = netlink.LinkByName(l.name)
		return err
	})
	return link, err
}

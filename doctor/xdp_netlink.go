package doctor

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// netlinkXDP reads IFLA_XDP from the live host through rtnetlink.
type netlinkXDP struct{}

// IFLA_XDP_ATTACHED values (include/uapi/linux/if_link.h).
var xdpModes = map[uint32]string{1: "native", 2: "generic", 3: "offload", 4: "multi"}

func (netlinkXDP) LinkXDP(ctx context.Context, ifname string) (XDPState, error) {
	if err := ctx.Err(); err != nil {
		return XDPState{}, err
	}
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return XDPState{}, fmt.Errorf("%s: %w", ifname, ErrNoLink)
		}
		return XDPState{}, fmt.Errorf("netlink link %s: %w", ifname, err)
	}
	x := link.Attrs().Xdp
	if x == nil || !x.Attached {
		return XDPState{}, nil
	}
	mode, ok := xdpModes[x.AttachMode]
	if !ok {
		mode = fmt.Sprintf("mode %d", x.AttachMode)
	}
	return XDPState{Attached: true, Mode: mode, ProgID: x.ProgId}, nil
}

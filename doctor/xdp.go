package doctor

import (
	"context"
	"errors"
	"fmt"
)

// XDPState is what the kernel reports about a link's XDP program.
type XDPState struct {
	Attached bool
	// Mode is "native" (driver), "generic" (skb), "offload" (hardware)
	// or "multi" (programs in several modes).
	Mode   string
	ProgID uint32
}

// XDPInspector reads a link's XDP state. The live implementation uses
// netlink; tests use doctortest.FakeXDP.
type XDPInspector interface {
	LinkXDP(ctx context.Context, ifname string) (XDPState, error)
}

// ErrNoLink is returned by an XDPInspector for a link that does not exist.
var ErrNoLink = errors.New("no such link")

// checkXDP reports XDP programs on the NIC and on the kernel-side
// interface. Even an XDP_PASS program costs the kernel path: on mlx5,
// kernel TCP fell from 33 to 26 Gbit/s once any program was attached.
func checkXDP(ctx context.Context, e *env) []Result {
	insp := e.opts.XDP
	if insp == nil {
		if e.root != "/" {
			return []Result{{Check: CheckXDP, Status: Skip,
				Evidence: "root " + e.root + " is not the live host and no XDP inspector was given"}}
		}
		insp = netlinkXDP{}
	}
	var out []Result
	for _, l := range []struct{ name, role string }{{e.opts.NIC, "NIC"}, {e.opts.Interface, "kernel-side interface"}} {
		if l.name == "" {
			continue
		}
		out = append(out, xdpResult(ctx, insp, l.name, l.role))
	}
	if len(out) == 0 {
		out = append(out, Result{Check: CheckXDP, Status: Skip, Evidence: "no NIC netdev or interface configured"})
	}
	return out
}

func xdpResult(ctx context.Context, insp XDPInspector, name, role string) Result {
	r := Result{Check: CheckXDP}
	st, err := insp.LinkXDP(ctx, name)
	switch {
	case errors.Is(err, ErrNoLink):
		r.Status = Skip
		if role == "NIC" {
			r.Evidence = fmt.Sprintf("NIC %s has no netdev (bound to DPDK?)", name)
		} else {
			r.Evidence = fmt.Sprintf("%s %s does not exist (kbridge not running?)", role, name)
		}
		return r
	case err != nil:
		r.Status, r.Evidence, r.Fix = Warn, fmt.Sprintf("netlink %s: %v", name, err), "run kbridge doctor as root"
		return r
	case !st.Attached:
		r.Status = Pass
		r.Evidence = fmt.Sprintf("netlink %s (%s): no XDP program, the kernel path runs at full speed", name, role)
		return r
	}
	r.Evidence = fmt.Sprintf("netlink %s (%s): XDP program id %d in %s mode", name, role, st.ProgID, st.Mode)
	detach := fmt.Sprintf("ip link set dev %s xdp off", name)
	switch st.Mode {
	case "offload":
		r.Status = Pass
		r.Evidence += ": runs on the NIC, no host CPU cost"
	case "generic":
		r.Status = Warn
		r.Evidence += ": generic XDP runs after the skb is built, slower than no XDP at all and no redirect fast path"
		r.Fix = "load it in native mode on a driver that supports XDP, or " + detach
	default:
		r.Status = Warn
		r.Evidence += ": even XDP_PASS slows kernel TCP (mlx5 33 -> 26 Gbit/s), expected only with kbridge's XDP path"
		r.Fix = "keep it only if the XDP redirect path is in use; otherwise " + detach
	}
	return r
}

package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kbridge/kbridge/copp"
)

// The sockets check says whether a running kbridge judges frames by the
// host's sockets (copp.unwanted: frames for the host's own addresses to a
// port no socket holds, classed unwanted and policed before a syscall), why
// not when it does not (tcpdump on the interface, a raw socket, NAT), and
// how many such frames arrive now, by reason.

// SocketsState is what a running kbridge says of its view of the host's
// sockets: per protocol "on" or why not, and the frames classed unwanted
// so far by reason (copp.UnwantedWhyNames), summed over its queues.
type SocketsState struct {
	TCP, UDP string
	Unwanted [copp.NumUnwantedWhys]uint64
}

// SocketsReader reads a running kbridge's SocketsState. It fails with
// ErrNoInstance when no kbridge runs and ErrCoPPOff when copp is off.
type SocketsReader interface {
	Sockets(ctx context.Context) (SocketsState, error)
}

// sockOn is the state of a protocol whose frames are judged.
const sockOn = "on"

func checkSockets(ctx context.Context, e *env) []Result {
	r := e.opts.Sockets
	if r == nil {
		return []Result{{Check: CheckSockets, Status: Skip, Evidence: "no running kbridge to read (no control socket given)"}}
	}
	before, after, window, err := readTwice(ctx, e.opts.CoPPWindow, r.Sockets)
	switch {
	case errors.Is(err, ErrNoInstance), errors.Is(err, ErrCoPPOff):
		return []Result{{Check: CheckSockets, Status: Skip, Evidence: err.Error()}}
	case err != nil:
		return []Result{{Check: CheckSockets, Status: Warn, Evidence: "cannot read the sockets' state: " + err.Error()}}
	}
	return socketsNow(before, after, window)
}

// socketsNow turns two readings into one result per protocol whose frames
// are not judged (warn, with what takes them), or one pass naming the
// unwanted frames per second by reason.
func socketsNow(before, after SocketsState, window time.Duration) []Result {
	var out []Result
	for _, p := range []struct{ name, state string }{{"TCP", after.TCP}, {"UDP", after.UDP}} {
		if p.state == sockOn {
			continue
		}
		st, fix := Warn, "stop it when done (tcpdump), or accept that such frames cost the kernel's answer each"
		if strings.Contains(p.state, "copp.unwanted.enabled") || strings.Contains(p.state, "copp.enabled") {
			st, fix = Skip, "set copp.unwanted.enabled: true to free them before a syscall (docs/CONFIG.md)"
		}
		out = append(out, Result{Check: CheckSockets, Status: st,
			Evidence: fmt.Sprintf("%s frames to ports no socket holds reach the kernel: %s", p.name, p.state), Fix: fix})
	}
	var parts []string
	var total float64
	for k, name := range copp.UnwantedWhyNames {
		d := float64(0)
		if after.Unwanted[k] > before.Unwanted[k] {
			d = float64(after.Unwanted[k]-before.Unwanted[k]) / window.Seconds()
		}
		total += d
		parts = append(parts, fmt.Sprintf("%s %.0f", name, d))
	}
	if len(out) < 2 {
		out = append(out, Result{Check: CheckSockets, Status: Pass,
			Evidence: fmt.Sprintf("frames no socket wants are classed unwanted: %.0f/s over %v (%s)", total, window, strings.Join(parts, ", "))})
	}
	return out
}

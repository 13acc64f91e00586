package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kbridge/kbridge/ring"
)

// closingPoll is how often the ring path looks for the app freeing the port.
const closingPoll = 20 * time.Millisecond

// Recovery is what this kbridge found and put right of a predecessor when
// it claimed the port: `kbridge stats` shows it as "recovery" (mode ring).
type Recovery struct {
	// TakenOverFrom is the pid of the gone owner taken over, 0 for none.
	TakenOverFrom int `json:"taken_over_from"`
	// HeldToKernel and HeldFromKernel are the mbufs the held record named
	// (a burst dequeued, mbufs allocated for the app): freed (kbridge.h
	// version 7: put on the app's spent ring for it to free).
	HeldToKernel   int `json:"held_to_kernel_freed"`
	HeldFromKernel int `json:"held_from_kernel_freed"`
	// Rings is what the dead kbridge's ring operations left (Reconcile).
	Rings ring.Recovered `json:"rings"`
}

// claimPort makes this kbridge the port's one owner before it touches a
// ring or sends an eventfd (kbridge.h version 2), puts each ring's kbridge
// side back in step with itself and frees what a killed predecessor's
// workers held, in that order (ring.Port.Reconcile leaves what the records
// name to FreeHeld). Stop (Port.Release) gives the port up.
func claimPort(port *ring.Port, reqTimeout time.Duration, log *slog.Logger) (Recovery, error) {
	if w := port.Warning(); w != "" {
		log.Warn(w, "port", port.Name())
	}
	c, err := port.Claim()
	if err != nil {
		return Recovery{}, err
	}
	if !c.Enforced {
		log.Warn("the DPDK app uses kbridge.h version 1: one kbridge per port cannot be enforced, and mbufs a killed kbridge held are not recovered; rebuild the app with this kbridge's kbridge.h",
			"port", port.Name())
		return Recovery{}, nil
	}
	var r Recovery
	if c.Previous != nil {
		r.TakenOverFrom = c.Previous.PID
		log.Warn("taking the port over from a kbridge that is gone", "port", port.Name(), "previous_pid", c.Previous.PID,
			"previous", c.Previous.Fate())
	}
	// A request the previous kbridge posted and no one answered is about
	// an interface that went with it: the app must not apply it now; but a
	// value it set its interface back to (an undo) is what the port must
	// take before anything else, and stays.
	if port.TakeOverRequest(reqTimeout) {
		log.Info("the previous kbridge's undo waits for the app: the next request waits for its answer", "port", port.Name())
	}
	if r.Rings, err = port.Reconcile(); err != nil {
		// Rings the app made itself, multi-producer or -consumer: their
		// heads are not kbridge's alone to put back.
		log.Warn("not reconciling the rings with what a killed kbridge left", "port", port.Name(), "err", err)
	}
	if r.Rings.Any() {
		rr := r.Rings
		log.Warn("reconciled the rings with what a killed kbridge's ring operation left", "port", port.Name(),
			"to_kernel_reclaimed", rr.ToKernelReclaimed, "to_kernel_freed", rr.ToKernelFreed,
			"from_kernel_discarded", rr.FromKernelDiscarded, "from_kernel_freed", rr.FromKernelFreed,
			"from_kernel_published", rr.FromKernelPublished,
			"fresh_reclaimed", rr.FreshReclaimed, "fresh_freed", rr.FreshFreed,
			"spent_discarded", rr.SpentDiscarded, "spent_freed", rr.SpentFreed, "spent_published", rr.SpentPublished,
			"inconsistent", rr.Inconsistent)
	}
	r.HeldToKernel, r.HeldFromKernel = port.FreeHeld()
	if c.Previous != nil || r.HeldToKernel+r.HeldFromKernel > 0 {
		log.Info("freed the mbufs a previous kbridge held", "port", port.Name(), "to_kernel", r.HeldToKernel, "from_kernel", r.HeldFromKernel)
	}
	return r, nil
}

// watchClosing ends the path when the app frees the port
// (kbridge_port_free): Stop then stops the workers and releases the port,
// which is what the app waits for before it drains the rings. On the same
// tick it makes the interface's carrier follow the link the app reports
// (kbridge_port_set_link), as a NIC's driver makes its interface's. A port
// set ticks all its ports from one ticker instead (portset.go).
func (d *Ring) watchClosing() {
	go func() {
		t := time.NewTicker(closingPoll)
		defer t.Stop()
		var l linkFollow
		for {
			select {
			case <-d.done:
				return
			case <-t.C:
				if d.tick(&l) {
					return
				}
			}
		}
	}()
}

// linkFollow is what the tick remembers of the app port's link.
type linkFollow struct {
	last              ring.Link
	reported, failing bool
}

// tick is one look at the port: the carrier follows the app's link, and a
// port the app is freeing ends the path (true: it did).
func (d *Ring) tick(f *linkFollow) bool {
	// A link not followed (SetCarrier failed, as while the interface is
	// being made again) is tried again on the next tick, and logged once.
	if l, ok := d.port.Link(); ok && (!f.reported || l != f.last) {
		err := d.followLink(l)
		if err != nil && !f.failing {
			d.log.Warn("the interface's carrier does not follow the app's link yet: trying again every tick",
				"interface", d.cfg.Interface.Name, "link_up", l.Up, "err", err)
		}
		f.failing = err != nil
		if err == nil {
			f.last, f.reported = l, true
		}
	}
	if d.port.Closing() {
		d.log.Warn("the DPDK app is freeing the port: stopping", "port", d.port.Name())
		d.finish(fmt.Errorf("%w %s: kbridge stops (restart it once the app recreated the port)", ErrAppFreesPort, d.port.Name()))
		return true
	}
	return false
}

// followLink sets the interface's carrier to the app port's link, and its
// speed and duplex when the app knows them. It returns why the carrier
// could not be set: the caller tries again.
func (d *Ring) followLink(l ring.Link) error {
	if err := d.dev.SetCarrier(l.Up); err != nil {
		return err
	}
	if l.SpeedMbps != 0 {
		if err := d.dev.SetSpeed(l.SpeedMbps, l.FullDuplex); err != nil {
			d.log.Warn("the interface's speed does not follow the app's link", "interface", d.cfg.Interface.Name,
				"speed_mbps", l.SpeedMbps, "err", err)
		}
	}
	d.log.Info("carrier follows the app's link", "interface", d.cfg.Interface.Name, "carrier", l.Up,
		"speed_mbps", l.SpeedMbps, "full_duplex", l.FullDuplex)
	return nil
}

package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kbridge/kbridge/ring"
)

// closingPoll is how often the ring path looks for the app freeing the port.
const closingPoll = 20 * time.Millisecond

// claimPort makes this kbridge the port's one owner before it touches a
// ring or sends an eventfd (kbridge.h version 2), and frees what a killed
// predecessor's workers held. Stop (Port.Release) gives the port up.
func claimPort(port *ring.Port, log *slog.Logger) error {
	if w := port.Warning(); w != "" {
		log.Warn(w, "port", port.Name())
	}
	c, err := port.Claim()
	if err != nil {
		return err
	}
	if !c.Enforced {
		log.Warn("the DPDK app uses kbridge.h version 1: one kbridge per port cannot be enforced, and mbufs a killed kbridge held are not recovered; rebuild the app with this kbridge's kbridge.h",
			"port", port.Name())
		return nil
	}
	if c.Previous != nil {
		log.Warn("taking the port over from a kbridge that is gone", "port", port.Name(), "previous_pid", c.Previous.PID,
			"previous", c.Previous.Fate())
	}
	out, in := port.FreeHeld()
	if c.Previous != nil || out+in > 0 {
		log.Info("freed the mbufs a previous kbridge held", "port", port.Name(), "to_kernel", out, "from_kernel", in)
	}
	return nil
}

// watchClosing ends the path when the app frees the port
// (kbridge_port_free): Stop then stops the workers and releases the port,
// which is what the app waits for before it drains the rings.
func (d *Ring) watchClosing() {
	go func() {
		t := time.NewTicker(closingPoll)
		defer t.Stop()
		for {
			select {
			case <-d.done:
				return
			case <-t.C:
				if d.port.Closing() {
					d.log.Warn("the DPDK app is freeing the port: stopping", "port", d.port.Name())
					d.finish(fmt.Errorf("the DPDK app is freeing port %s: kbridge stops (restart it once the app recreated the port)", d.port.Name()))
					return
				}
			}
		}
	}()
}

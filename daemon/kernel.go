package daemon

import "github.com/kbridge/kbridge/tap"

// keepInterface repairs what others do to the TAP interface while the
// bridge runs (tap.Device.Keep): a deleted interface is made again and its
// new queues take the old fd numbers under the running workers, which are
// then poked so that their next park watches the new fds; routes come back
// after a down/up; a changed MTU is set back. If the interface cannot be
// made again, the path stops with the cause and kbridge exits non-zero, so
// that systemd's Restart=on-failure brings it back.
func (d *Ring) keepInterface() {
	stop, err := d.dev.Keep(tap.KeepOptions{
		Log: d.log,
		Recreated: func() {
			for _, w := range d.workers {
				w.Poke()
			}
		},
		Lost: func(err error) {
			d.log.Error("stopping", "err", err)
			d.finish(err)
		},
	})
	if err != nil {
		d.log.Warn("not watching the interface: a deleted interface will not be made again, nor routes re-applied after a down/up", "err", err)
		return
	}
	d.stopKeep = stop
}

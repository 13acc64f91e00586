package daemon

import (
	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/ring"
)

// Status is what the control socket serves and `kbridge stats` shows.
type Status struct {
	Port      string `json:"port"`
	Interface string `json:"interface"`
	// Carrier is the interface's carrier as kbridge set it (mode vhost:
	// on while a frontend's device runs).
	Carrier bool `json:"carrier"`
	// CarrierRestored counts the times the keeper set the carrier back
	// after something else turned it.
	CarrierRestored uint64 `json:"carrier_restored"`
	// EALAttachRetries counts the starts of EAL this kbridge made before
	// the one that attached, each refused at the app's addresses and
	// followed by an exec of kbridge (mode ring; daemon/reattach.go).
	EALAttachRetries int     `json:"eal_attach_retries"`
	AppPID           int     `json:"app_pid"`
	PoolInUse        int     `json:"pool_in_use"`
	PoolSize         int     `json:"pool_size"`
	Queues           []Queue `json:"queues"`
	// ResidenceBoundsNs[i] is the upper bound of Queues[].Residence[i].
	ResidenceBoundsNs []uint64 `json:"residence_bounds_ns"`
	// Recovery is what this kbridge put right of a killed predecessor
	// when it started (mode ring; nil otherwise).
	Recovery *Recovery `json:"recovery,omitempty"`
	// Adopted is the interface this kbridge adopted rather than made
	// (modes ring and vhost); nil: it made it.
	Adopted *Adopted `json:"adopted,omitempty"`
	// Sockets is the view of the host's sockets CoPP judges frames by
	// (nil while copp.enabled is off).
	Sockets *Sockets `json:"sockets,omitempty"`
}

// Queue is one queue's counters: the worker's and, in ring mode, the app's
// (App: what the app counts in the port's control block; nil in mode vhost,
// whose app keeps no such counters).
type Queue struct {
	bridge.Snapshot
	App     *ring.AppCounters `json:"app,omitempty"`
	CanKick bool              `json:"can_kick"`
	CPU     int               `json:"cpu"`
	// CoPP is what the classifier, the policers and the reserves did
	// (nil while copp.enabled is off).
	CoPP *copp.Snapshot `json:"copp,omitempty"`
}

// Status is what the control socket serves: a Snapshot.
func (d *Ring) Status() any { return d.Snapshot() }

// Snapshot reads every counter now. It is safe after the workers stopped:
// a stopped worker's residence histogram then reads as zeros.
func (d *Ring) Snapshot() Status {
	cfg := d.Config()
	s := d.status(cfg, func(q int, qs *Queue) {
		qs.Residence = make([]uint64, ring.HistBuckets)
		d.workers[q].Residence(qs.Residence)
		if rq, err := d.port.Queue(q); err == nil {
			app := rq.AppCounters()
			qs.App = &app
			if qs.CoPP != nil {
				app.RoomDrops(qs.CoPP)
			}
		}
	})
	s.Port = cfg.Port
	s.AppPID = d.port.AppPID()
	s.EALAttachRetries = d.ealRetries
	s.PoolInUse, s.PoolSize = d.port.PoolInUse(), d.port.PoolSize()
	r := d.recovery
	s.Recovery = &r
	for i := 0; i < ring.HistBuckets; i++ {
		s.ResidenceBoundsNs = append(s.ResidenceBoundsNs, ring.HistBound(i))
	}
	return s
}

package daemon

import (
	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/ring"
)

// Status is what the control socket serves and `kbridge stats` shows.
type Status struct {
	Port      string  `json:"port"`
	Interface string  `json:"interface"`
	AppPID    int     `json:"app_pid"`
	PoolInUse int     `json:"pool_in_use"`
	PoolSize  int     `json:"pool_size"`
	Queues    []Queue `json:"queues"`
	// ResidenceBoundsNs[i] is the upper bound of Queues[].Residence[i].
	ResidenceBoundsNs []uint64 `json:"residence_bounds_ns"`
}

// Queue is one queue's counters: the worker's and the app's.
type Queue struct {
	bridge.Snapshot
	App     ring.AppCounters `json:"app"`
	CanKick bool             `json:"can_kick"`
	CPU     int              `json:"cpu"`
}

// Status is what the control socket serves: a Snapshot.
func (d *Ring) Status() any { return d.Snapshot() }

// Snapshot reads every counter now. It is safe after the workers stopped:
// a stopped worker's residence histogram then reads as zeros.
func (d *Ring) Snapshot() Status {
	cfg := d.Config()
	s := Status{
		Port:      cfg.Port,
		Interface: cfg.Interface.Name,
		AppPID:    d.port.AppPID(),
		PoolInUse: d.port.PoolInUse(),
		PoolSize:  d.port.PoolSize(),
	}
	for i := 0; i < ring.HistBuckets; i++ {
		s.ResidenceBoundsNs = append(s.ResidenceBoundsNs, ring.HistBound(i))
	}
	for q, w := range d.workers {
		snap := w.Counters().Snapshot()
		snap.Queue = q
		snap.Mode = string(w.Policy().Mode)
		snap.Residence = make([]uint64, ring.HistBuckets)
		w.Residence(snap.Residence)
		qs := Queue{Snapshot: snap, CanKick: w.CanKick(), CPU: cfg.WorkerCPU(q)}
		if rq, err := d.port.Queue(q); err == nil {
			qs.App = rq.AppCounters()
		}
		s.Queues = append(s.Queues, qs)
	}
	return s
}

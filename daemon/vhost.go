package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap"
	"github.com/kbridge/kbridge/vhost"
)

// Vhost is the running vhost path: kbridge is the vhost-user backend of the
// app's virtio-user port, one worker per queue pair between its vrings and
// the TAP interface. A frontend may come, go and come back: the path runs
// on (and Done stays open) until Stop or until every worker has died.
type Vhost struct {
	*tapPath
	backend *ring.VhostBackend
	queues  []*ring.VhostQueue // the app sides, by queue; appended by appSide
	// linkMu orders the carrier's changes: the frontend's and the end of
	// an adoption's grace (awaitFrontend); frontendUp is the last.
	linkMu     sync.Mutex
	frontendUp bool
}

var _ Runner = (*Vhost)(nil)

// vhostDataRoom is the data room of kbridge's mbufs: a frame of the MTU in
// one mbuf, and a 64 KiB TSO packet from the app in maxSegs of them.
func vhostDataRoom(mtu, maxSegs int) int {
	const tsoMax = 1<<16 + 18 // IP packet, Ethernet header, one VLAN tag
	room := max(2048, tap.FrameLen(mtu), (tsoMax+maxSegs-1)/maxSegs)
	room = (room + 511) &^ 511
	return min(room, 0xffff-128) // uint16 with RTE_PKTMBUF_HEADROOM
}

// startVhost starts kbridge's own EAL and mbuf pool, creates the TAP
// interface, starts one worker per queue pair and serves the vhost-user
// socket. On error nothing is left behind but the EAL, which cannot be left.
// It adopts the interface opts names (adopt.go): handed over by the kbridge
// serving the same socket (opts.Takeover), which stops its backend first
// (in server mode it removes the socket, which this one then serves), or
// kept in systemd's fd store. An adopted interface keeps its carrier while
// a frontend may come back (frontendGrace).
func startVhost(cfg config.Config, log *slog.Logger, progress func(string), opts StartOpts) (*Vhost, error) {
	if progress == nil {
		progress = func(string) {}
	}
	adopt, store, had := storedAdoption(opts, cfg.Interface.Name, log)
	defer func() { adopt.close() }() // what was not adopted
	if !cfg.Vhost.Client && !opts.Takeover {
		// Before the EAL and the TAP: a socket kbridge may not serve
		// there (an unsafe directory, another backend's) fails the start
		// at once. ring.StartVhost checks again right before it binds.
		if err := vhost.PrepareSocket(cfg.VhostSocket()); err != nil {
			return nil, err
		}
	}
	progress("starting kbridge's EAL (mode vhost)")
	if err := ring.InitVhostEAL(ring.VhostEALConfig{CPU: cfg.WorkerCPU(0), ControlCPUs: cfg.WorkerCPUs(), Args: cfg.Vhost.EALArgs}); err != nil {
		return nil, err
	}
	room := vhostDataRoom(cfg.Interface.MTU, cfg.Workers.MaxSegments)
	if err := ring.CreateVhostPool(cfg.Vhost.PoolSize, room); err != nil {
		return nil, err
	}
	var handedAt time.Time
	if opts.Takeover {
		// After the EAL, which takes the longest: the old kbridge
		// serves until here.
		progress("asking the kbridge on " + cfg.Stats.Socket + " to hand over")
		adopt.close()
		var err error
		if adopt, err = takeOver(cfg, cfg.VhostSocket(), log); err != nil {
			return nil, err
		}
		handedAt = time.Now()
	}
	nq := cfg.Vhost.Queues
	p, err := newTapPath(cfg, nq, cfg.Interface.MTU, log, adopt)
	if err != nil {
		return nil, err
	}
	p.store = store
	d := &Vhost{tapPath: p}
	if p.adopted == nil || !p.dev.Carrier() {
		// No frontend, no link: kb0's carrier is off until a device runs.
		err = p.dev.SetCarrier(false)
	}
	if err == nil {
		err = d.startWorkers(d.appSide)
	}
	if err == nil {
		d.backend, err = ring.StartVhost(ring.VhostConfig{Path: cfg.VhostSocket(), Client: cfg.Vhost.Client, Queues: nq, Log: log,
			Mode: cfg.Vhost.VhostSocketMode(), Group: cfg.Vhost.SocketGroup, AllowUIDs: cfg.Vhost.AllowUIDs,
			Link: d.frontendLink})
	}
	if err == nil {
		err = adopt.confirm(log)
	}
	if err != nil {
		return nil, errors.Join(err, d.Stop())
	}
	if !handedAt.IsZero() {
		log.Info("handover: the workers run again", "after", time.Since(handedAt).Round(time.Microsecond).String())
	}
	p.storeFds(had)
	d.keepInterface()
	if p.adopted != nil && p.dev.Carrier() {
		d.awaitFrontend(frontendGrace)
	}
	log.Info("bridge running", "mode", config.ModeVhost, "socket", cfg.VhostSocket(), "client", cfg.Vhost.Client,
		"interface", cfg.Interface.Name, "queues", nq, "policy", cfg.Policy.Mode, "mbuf_room", room,
		"pool", cfg.Vhost.PoolSize, "offload", cfg.Interface.Offload, "coalescing", p.dev.Queue(0).Merging())
	return d, nil
}

// frontendGrace is how long an adopted interface keeps its carrier for a
// frontend to come back: librte_vhost's client retries once a second, and
// a server=1 virtio-user port is back within one retry.
const frontendGrace = 5 * time.Second

// awaitFrontend keeps the carrier of an adopted interface on while a
// frontend may come back, and turns it off, loudly, once grace passed
// without one: what a successor cannot serve must not look up to the host.
func (d *Vhost) awaitFrontend(grace time.Duration) {
	if !d.cfg.Vhost.Client {
		d.log.Warn("kbridge serves the vhost-user socket: DPDK's virtio-user client (22.11, 24.11) does not reconnect to a new backend, "+
			"so the app's port stays down until the app restarts; for a replacement the app does not notice, give its port server=1 "+
			"and kbridge vhost.client: true", "socket", d.cfg.VhostSocket(), "interface", d.cfg.Interface.Name)
	}
	time.AfterFunc(grace, func() {
		d.linkMu.Lock()
		defer d.linkMu.Unlock()
		if d.frontendUp || d.stopping.Load() {
			return
		}
		d.log.Warn("no vhost-user frontend came back to the adopted interface: carrier off until one connects",
			"interface", d.cfg.Interface.Name, "after", grace.String())
		if err := d.dev.SetCarrier(false); err != nil {
			d.log.Warn("the interface's carrier does not follow the frontend", "interface", d.cfg.Interface.Name, "carrier", false, "err", err)
		}
	})
}

// appSide is queue pair q's app side: its two vrings.
func (d *Vhost) appSide(q int) (bridge.App, error) {
	out, err := ring.NewVhostQueue(q, d.cfg.Workers.Batch, d.cfg.Workers.MaxSegments)
	if err != nil {
		return bridge.App{}, err
	}
	in, err := ring.NewVhostIn(q, d.cfg.Workers.Batch, tap.FrameLen(d.cfg.Interface.MTU))
	if err != nil {
		out.Close()
		return bridge.App{}, err
	}
	d.queues = append(d.queues, out)
	return ring.VhostApp(out, in), nil
}

// frontendLink makes kb0's carrier follow the frontend's device, as a NIC's
// interface follows its link: on while it runs, off once it is gone; but
// a frontend that goes because this kbridge stops leaves the carrier as it
// is, for the kbridge that adopts kb0 (a handover, the unit's fd store
// across a restart); with no queue held the kernel drops it.
func (d *Vhost) frontendLink(up bool) {
	d.linkMu.Lock()
	defer d.linkMu.Unlock()
	d.frontendUp = up
	if !up && d.stopping.Load() {
		d.log.Info("the frontend went with this kbridge's stop: the carrier stays for the next kbridge", "interface", d.cfg.Interface.Name)
		return
	}
	if err := d.dev.SetCarrier(up); err != nil {
		d.log.Warn("the interface's carrier does not follow the frontend", "interface", d.cfg.Interface.Name, "carrier", up, "err", err)
		return
	}
	d.log.Info("carrier follows the frontend", "interface", d.cfg.Interface.Name, "carrier", up)
}

// handOver hands the socket and the interface over (handOverer): the
// backend stops first, so that the successor can serve the socket; asked
// for another socket or interface it refuses.
func (d *Vhost) handOver(sock, iface string) (Handover, []int, func(), error) {
	cfg := d.Config()
	if sock != cfg.VhostSocket() || iface != cfg.Interface.Name {
		return Handover{}, nil, nil, fmt.Errorf("%w: this kbridge serves socket %s and interface %s, not %s and %s",
			ErrTakeoverRefused, cfg.VhostSocket(), cfg.Interface.Name, sock, iface)
	}
	fds, release, err := d.handOff(d.stopBackend, func() {
		d.log.Info("handing over: backend and workers stopped", "pool_in_use", ring.VhostPoolInUse(), "queues", len(d.workers))
	})
	if err != nil {
		return Handover{}, nil, nil, err
	}
	return Handover{PID: os.Getpid(), Port: sock, Interface: iface, Index: d.dev.Index(), Queues: len(fds)}, fds, release, nil
}

// stopBackend closes the socket (librte_vhost destroys the device; the
// workers see it go between bursts).
func (d *Vhost) stopBackend() error {
	if d.backend != nil {
		return d.backend.Stop()
	}
	return nil
}

// Summary is the one-line STATUS= for systemd.
func (d *Vhost) Summary() string {
	return "vhost-user " + d.cfg.VhostSocket() + " <-> " + d.cfg.Interface.Name
}

// Collector exports the counters to Prometheus, as in mode ring.
func (d *Vhost) Collector() prometheus.Collector { return newCollector(d) }

// Backend returns the vhost-user backend (nil once a start failed).
func (d *Vhost) Backend() *ring.VhostBackend { return d.backend }

// VhostStatus is what the control socket serves in mode vhost: the ring
// shape (Port is the socket, the pool kbridge's own) and the frontend.
type VhostStatus struct {
	Status
	Mode        config.Mode `json:"mode"`
	Socket      string      `json:"socket"`
	Client      bool        `json:"client"`
	Connected   bool        `json:"connected"`
	Features    []string    `json:"features"`
	Connects    uint64      `json:"connects"`
	Disconnects uint64      `json:"disconnects"`
	// What kbridge refused of hostile or broken frontends (each also logged).
	RefusedMemTables uint64 `json:"refused_mem_tables"`
	RefusedChains    uint64 `json:"refused_chains"`
	RefusedRequests  uint64 `json:"refused_requests"`
	RefusedPeers     uint64 `json:"refused_peers"`
	RefusedVrings    uint64 `json:"refused_vrings"`
	GuestMemFaults   uint64 `json:"guest_memory_faults"`
}

// Status is what the control socket serves.
func (d *Vhost) Status() any {
	s := VhostStatus{Status: d.Snapshot(), Mode: config.ModeVhost, Socket: d.cfg.VhostSocket(), Client: d.cfg.Vhost.Client}
	if d.backend != nil {
		var f uint64
		s.Connected, f = d.backend.Connected()
		s.Features = vhost.FeatureNames(f)
		s.Connects, s.Disconnects = d.backend.Connects()
		s.RefusedMemTables, s.RefusedChains = d.backend.Refused()
		s.RefusedRequests, s.RefusedPeers = d.backend.RefusedRequests(), d.backend.RefusedPeers()
		s.RefusedVrings, s.GuestMemFaults = d.backend.RefusedVrings(), d.backend.GuestMemoryFaults()
	}
	return s
}

// Snapshot reads every counter now, in the ring Status shape: the TAP
// path's, the pool's and what the app side counts itself (the guest's
// partial checksums kbridge finished).
func (d *Vhost) Snapshot() Status {
	cfg := d.Config()
	s := d.status(cfg, func(q int, qs *Queue) {
		if q < len(d.queues) {
			qs.Offload.CsumToKernel += d.queues[q].CsumCompleted()
		}
	})
	s.Port = cfg.VhostSocket()
	s.PoolInUse, s.PoolSize = ring.VhostPoolInUse(), ring.VhostPoolSize()
	return s
}

// Stop closes the socket first (librte_vhost destroys the device; the
// workers see it go between bursts), then stops the path (tapPath.stop: the
// keeper, the workers, which free every mbuf they hold, the TAP interface).
// The backend's stop removes the socket file.
func (d *Vhost) Stop() error {
	return d.stop(d.stopBackend, func() {
		d.log.Info("stopped", "pool_in_use", ring.VhostPoolInUse(), "queues", len(d.workers))
	})
}

package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/bridge"
	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/tap"
)

// Ring is the running ring path: the app's DPDK rings <-> the TAP
// interface, one worker per queue (tapPath). It is a Runner.
type Ring struct {
	*tapPath
	port     *ring.Port
	stopApp  func()   // ends the app watch
	recovery Recovery // what claimPort found of a predecessor
	maxMTU   int      // the largest MTU the app's side can carry (appRequests)
	// reqTimeout bounds the wait for the app's answer (requests.timeout).
	reqTimeout time.Duration
	// ealRetries counts the starts of EAL before the one that attached
	// (StartOpts.EALAttempt).
	ealRetries int
}

var _ Runner = (*Ring)(nil)

// startRing joins the DPDK primary, opens the port, creates the TAP
// interface (or adopts the one opts names: adopt.go), starts the workers
// and watches the app's process. On error nothing is left behind but the
// EAL, which cannot be left.
func startRing(ctx context.Context, cfg config.Config, log *slog.Logger, progress func(string), opts StartOpts) (*Ring, error) {
	deadline, err := joinApp(ctx, cfg, log, progress, opts.EALAttempt)
	if err != nil {
		return nil, reattachStored(err, opts, cfg.Interface.Name, opts.Stored, log)
	}
	d, err := openRing(ctx, cfg, log, progress, opts, deadline)
	if err != nil {
		return nil, err
	}
	d.watchClosing()
	d.watchApp()
	return d, nil
}

// joinApp waits for the DPDK primary and joins it as a secondary (the EAL,
// once a process), the start of EAL after attempt others under this pid
// (StartOpts.EALAttempt). It returns the deadline dpdk.wait set, which the
// wait for a port shares; a failure is the caller's to pass to
// reattachStored, which knows the queues to carry.
func joinApp(ctx context.Context, cfg config.Config, log *slog.Logger, progress func(string), attempt int) (time.Time, error) {
	progress("joining the DPDK primary (file prefix " + cfg.DPDK.FilePrefix + ")")
	deadline := time.Now().Add(cfg.DPDK.Wait)
	if err := waitFor(ctx, deadline, log, progress, "the DPDK primary with --file-prefix="+cfg.DPDK.FilePrefix,
		func() error { return ring.PrimaryAlive(cfg.DPDK.RuntimeDir, cfg.DPDK.FilePrefix) }); err != nil {
		return deadline, err
	}
	// Before EAL: a secondary of another DPDK fails inside rte_eal_init
	// with a line of EAL's log; this says which versions and what to do.
	if err := ring.CheckPrimaryVersion(cfg.DPDK.RuntimeDir, cfg.DPDK.FilePrefix); err != nil {
		return deadline, err
	}
	// The owner rule and the app's exit watch exchange pids: refuse a
	// primary whose process kbridge cannot see, rather than misread them.
	if err := ring.CheckPrimaryVisible(cfg.DPDK.RuntimeDir, cfg.DPDK.FilePrefix); err != nil {
		return deadline, err
	}
	return deadline, ring.InitSecondary(ring.EALConfig{
		FilePrefix:  cfg.DPDK.FilePrefix,
		RuntimeDir:  cfg.DPDK.RuntimeDir,
		CPU:         cfg.WorkerCPU(0),
		ControlCPUs: cfg.WorkerCPUs(),
		Args:        cfg.DPDK.EALArgs,
		Attempt:     attempt,
	})
}

// openRing serves port cfg.Port of the app joined already, waiting for it
// up to deadline: it claims the port, recovers what a dead owner held,
// makes or adopts the interface and starts the workers and the keeper. The
// watch of the port's closing and link (tick) and of the app's exit are
// the caller's: one port's own, or the port set's for all.
func openRing(ctx context.Context, cfg config.Config, log *slog.Logger, progress func(string), opts StartOpts, deadline time.Time) (*Ring, error) {
	// The stored queues are this interface's or nobody's.
	adopt, store, had := storedAdoption(opts, cfg.Interface.Name, log)
	defer func() { adopt.close() }() // what was not adopted
	var port *ring.Port
	if err := cancelled(ctx); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, deadline, log, progress, "kbridge port "+cfg.Port+" in the DPDK app", func() (err error) {
		port, err = ring.OpenPort(cfg.Port)
		return err
	}); err != nil {
		return nil, err
	}
	if err := cancelled(ctx); err != nil {
		return nil, err
	}
	var handedAt time.Time // when the old kbridge's workers had stopped
	if opts.Takeover {
		// The port is the old kbridge's until it answers: it releases
		// the port, then hands the queues over.
		progress("asking the kbridge on " + cfg.Stats.Socket + " to hand over")
		adopt.close()
		var err error
		if adopt, err = takeOver(cfg, cfg.Port, log); err != nil {
			port.Release()
			return nil, err
		}
		handedAt = time.Now()
	}
	recovery, err := claimPort(port, cfg.Requests.Timeout, log)
	if err != nil {
		return nil, err
	}
	hints := port.Hints()
	if opts.hinted {
		cfg.Interface = withHints(cfg.Interface, hints)
		if err := cfg.Interface.Validate("the app's kbridge_port_set_interface(): interface"); err != nil {
			port.Release()
			return nil, err
		}
	}
	mtu := cfg.Interface.MTU
	if frame, room := tap.FrameLen(mtu), port.DataRoom()*cfg.Workers.MaxSegments; frame > room {
		port.Release()
		return nil, &ConfigError{conferr.Errorf("interface.mtu", mtu, "frames of that size need %d bytes, but %d segments of the app's %d-byte mbufs hold %d (raise workers.max_segments)",
			frame, cfg.Workers.MaxSegments, port.DataRoom(), room)}
	}
	// The interface as it is made: the configured one, with what the app's
	// port says. The path keeps the file's configuration, which a reload
	// compares with.
	made := cfg
	accepted := port.Accepted()
	if accepted.Any() {
		made.Interface = asAccepted(made.Interface, accepted, log)
	}
	if mac, ok := port.AppMAC(); ok && made.Interface.MAC == "" && usableMAC(mac) {
		if other := linkWithMAC(mac, made.Interface.Name); other != "" {
			log.Warn("the app port's MAC is also kernel interface "+other+"'s (a PMD on a kernel interface, such as net_af_packet): "+
				"the interface keeps a MAC of its own, else the kernel would take frames for it on both; set interface.mac to choose one",
				"mac", mac.String(), "kernel_interface", other)
		} else {
			made.Interface.MAC = mac.String()
			log.Info("the interface takes the app port's MAC", "mac", made.Interface.MAC)
		}
	}
	serves, maxMTU := appRequests(port, cfg)
	p, err := newTapPath(made, port.NumQueues(), maxMTU, log, adopt)
	if err != nil {
		port.Release()
		return nil, err
	}
	p.store = store
	p.cfg = cfg
	p.mtuFromApp = opts.hinted && hints.MTU != 0
	if a := accepted; p.adopted == nil && (a.Promisc != nil || a.Allmulti != nil) { // an adopted one has its own
		if err := p.dev.SetFlags(a.Promisc != nil && *a.Promisc, a.Allmulti != nil && *a.Allmulti); err != nil {
			log.Warn("the interface does not take the flags the app's port accepted", "err", err)
		}
	}
	d := &Ring{tapPath: p, port: port, stopApp: func() {}, recovery: recovery, maxMTU: maxMTU,
		reqTimeout: cfg.Requests.Timeout, ealRetries: opts.EALAttempt}
	if serves != nil {
		p.asks, p.ask = serves, d.askApp
		log.Info("the app takes the interface's changes as requests", "max_mtu", maxMTU)
	}
	if err := d.startWorkers(d.appSide); err != nil {
		return nil, errors.Join(err, d.Stop())
	}
	if err := adopt.confirm(log); err != nil {
		return nil, errors.Join(err, d.Stop())
	}
	if !handedAt.IsZero() {
		log.Info("handover: the workers run again", "after", time.Since(handedAt).Round(time.Microsecond).String())
	}
	p.storeFds(had)
	d.keepInterface()
	port.SetServed()
	// The workers hand the app their eventfds as they start (bridge.Worker.Run):
	// the app's allocation did not wait for it; the log does.
	<-d.workers[0].Registered()
	log.Info("bridge running", "port", cfg.Port, "interface", cfg.Interface.Name,
		"queues", port.NumQueues(), "app_pid", port.AppPID(), "app_dpdk", port.AppDPDK(), "mbufs", mbufModel(port),
		"pool_handler", port.PoolHandler(), "mode", cfg.Policy.Mode,
		"wakeups", d.workers[0].CanKick(), "offload", cfg.Interface.Offload, "coalescing", p.dev.Queue(0).Merging())
	return d, nil
}

// withHints is ifc with the MTU and admin state the app wants of its port's
// interface, where it says.
func withHints(ifc tap.Config, h ring.Hints) tap.Config {
	if h.MTU != 0 {
		ifc.MTU = h.MTU
	}
	if h.Up != nil {
		ifc.Up = *h.Up
	}
	return ifc
}

// mbufModel says who allocates and frees the app's mbufs, for the log.
func mbufModel(port *ring.Port) string {
	if port.AppAllocates() {
		return "the app's, on its fresh and spent rings"
	}
	return "kbridge, through its handler of the app's pool (kbridge.h version 6 or older)"
}

// asAccepted is the interface as the app's port now is: what the port
// accepted of an earlier kbridge's requests (ring.Port.Accepted) in place
// of the configured MAC and admin state, so that the port does not filter
// the interface's frames, and a port an administrator set down is not
// under an interface that is up. Each difference is logged.
func asAccepted(ifc tap.Config, a ring.Accepted, log *slog.Logger) tap.Config {
	if a.MAC != nil && usableMAC(a.MAC) && a.MAC.String() != ifc.MAC {
		log.Info("the interface takes the MAC the app's port accepted from an earlier kbridge's interface",
			"mac", a.MAC.String(), "configured", ifc.MAC)
		ifc.MAC = a.MAC.String()
	}
	if a.Up != nil && *a.Up != ifc.Up {
		log.Warn("the interface starts with the admin state the app's port accepted from an earlier kbridge's interface, not interface.up",
			"up", *a.Up, "interface_up", ifc.Up)
		ifc.Up = *a.Up
	}
	if a.Promisc != nil || a.Allmulti != nil {
		log.Info("the interface takes the flags the app's port accepted from an earlier kbridge's interface",
			"promisc", a.Promisc != nil && *a.Promisc, "allmulticast", a.Allmulti != nil && *a.Allmulti)
	}
	return ifc
}

// usableMAC reports whether an interface can take mac: a unicast address
// that is not all zeros (a port of a PMD without a MAC of its own reports
// zeros, net_null's for one).
func usableMAC(mac net.HardwareAddr) bool {
	return len(mac) == 6 && mac[0]&1 == 0 && !bytes.Equal(mac, make(net.HardwareAddr, 6))
}

// linkWithMAC names a kernel interface other than self in this namespace
// that has mac, or returns "". The interfaces of this kbridge's other ports
// do not count: the KNIs of one device share its MAC (DPVS's VLAN KNIs do,
// as KNI let them), and the kernel takes from a TAP only what kbridge
// writes, never a frame off a wire.
func linkWithMAC(mac net.HardwareAddr, self string) string {
	for _, i := range kernelLinks.read(time.Now()) {
		if i.Name != self && bytes.Equal(i.HardwareAddr, mac) && !tap.MadeHere(i.Name) {
			return i.Name
		}
	}
	return ""
}

// kernelLinks is the namespace's interfaces as read at most a second ago.
// A dump of the links costs about a millisecond once an app has dozens of
// ports (docs/runs/2026-12-07-64-knis.md), and a port set serves one port
// after another: what linkWithMAC looks for, a kernel interface under a PMD
// (net_af_packet's), was there before the app started its port.
var kernelLinks linkCache

type linkCache struct {
	mu   sync.Mutex
	at   time.Time
	ifs  []net.Interface
	dump func() ([]net.Interface, error) // nil: net.Interfaces
}

// linkCacheFor is how long a reading of the links serves.
const linkCacheFor = time.Second

func (c *linkCache) read(now time.Time) []net.Interface {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ifs != nil && now.Sub(c.at) < linkCacheFor && !now.Before(c.at) {
		return c.ifs
	}
	dump := c.dump
	if dump == nil {
		dump = net.Interfaces
	}
	ifs, err := dump()
	if err != nil {
		return nil
	}
	c.ifs, c.at = ifs, now
	return ifs
}

// appRequests says which of the interface's changes the app takes as requests
// (nil: none, an app of an older kbridge.h or one that did not ask for
// them) and the largest MTU the app's side can carry: what the app
// declared, and what workers.max_segments of its mbufs hold. Without MTU
// requests the MTU stays interface.mtu.
func appRequests(port *ring.Port, cfg config.Config) (func(tap.ChangeKind) bool, int) {
	serves, declared := port.Requests()
	some := false
	for _, t := range requestTypes {
		some = some || serves(t)
	}
	if !some {
		return nil, cfg.Interface.MTU
	}
	asks := func(k tap.ChangeKind) bool { t, ok := requestTypes[k]; return ok && serves(t) }
	if !serves(ring.RequestMTU) {
		return asks, cfg.Interface.MTU
	}
	maxMTU := min(port.DataRoom()*cfg.Workers.MaxSegments-tap.FrameLen(0), jumboMTU)
	if declared > 0 {
		maxMTU = min(maxMTU, declared)
	}
	return asks, max(maxMTU, cfg.Interface.MTU)
}

// jumboMTU is the largest MTU taken live unless interface.mtu is larger:
// the usual jumbo frame. Each queue's buffers are sized for it at start
// (many PMDs declare a max_mtu far beyond what any link carries).
const jumboMTU = 9216

// requestTypes are the app's request types for the interface's changes.
var requestTypes = map[tap.ChangeKind]ring.RequestType{
	tap.ChangeMTU: ring.RequestMTU, tap.ChangeLink: ring.RequestLink, tap.ChangeMAC: ring.RequestMAC,
	tap.ChangePromisc: ring.RequestPromisc, tap.ChangeAllmulti: ring.RequestAllmulti,
}

// request is a change of the interface as the app's request: the MTU, the
// MAC, or 1/0 for up, promiscuous, all-multicast.
func request(c tap.Change) (ring.Request, error) {
	t, ok := requestTypes[c.Kind]
	if !ok {
		return ring.Request{}, fmt.Errorf("no request for %v", c.Kind)
	}
	r := ring.Request{Type: t, MAC: c.MAC}
	switch {
	case c.Kind == tap.ChangeMTU:
		r.Value = uint32(c.MTU)
	case c.On:
		r.Value = 1
	}
	return r, nil
}

// askApp hands one change of the interface to the app as a request and
// waits for its answer, up to requests.timeout. An accepted change is
// recorded in the port for the next kbridge (ring.Port.Accepted). With no
// answer in time, old (the value the keeper sets the interface back to)
// takes the request's place in the mailbox: an app that polls late applies
// old, not what kbridge gave up on; and until the app has taken old, the
// next change is set back unasked (ring.ErrUndoUnseen) rather than posted
// over it.
func (d *Ring) askApp(ctx context.Context, c, old tap.Change) error {
	r, err := request(c)
	if err != nil {
		return err
	}
	err = d.port.Ask(ctx, r, d.reqTimeout)
	if rerr := d.port.UndoRefused(); rerr != nil {
		d.log.Warn("the app refused a value kbridge set the interface back to after an unanswered request: "+
			"its port may keep the value kbridge gave up on, which the interface does not have", "answer", rerr.Error())
	}
	switch {
	case err == nil:
		d.port.RecordAccepted(r)
	case errors.Is(err, ring.ErrNoAnswer):
		back, berr := request(old)
		switch {
		case berr != nil:
		case back.Type == r.Type && back.Value == r.Value && bytes.Equal(back.MAC, r.MAC):
			d.port.KeepUnanswered() // the MTU told at start: what stays posted is the value kept
		default:
			if serr := d.port.Supersede(back, d.reqTimeout); serr != nil {
				d.log.Warn("could not replace the unanswered request", "err", serr)
			}
		}
	}
	return err
}

// waitFor retries try until it succeeds or the deadline passes, saying what
// it waits for at once and every few seconds. The last error is returned.
// It gives up at once when ctx ends.
func waitFor(ctx context.Context, deadline time.Time, log *slog.Logger, progress func(string), what string, try func() error) error {
	err := try()
	if err == nil || !time.Now().Before(deadline) {
		return err
	}
	msg := "waiting for " + what
	log.Info(msg, "until", deadline.Format(time.TimeOnly), "cause", err)
	progress(msg)
	next := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return cancelled(ctx)
		case <-time.After(100 * time.Millisecond):
		}
		if err = try(); err == nil {
			return nil
		}
		if time.Now().After(next) {
			log.Info("still "+msg, "cause", err)
			next = time.Now().Add(5 * time.Second)
		}
	}
	return fmt.Errorf("gave up after dpdk.wait: %w", err)
}

// cancelled returns ErrStartCancelled, with the cause, once ctx ended.
func cancelled(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrStartCancelled, context.Cause(ctx))
}

// appSide is queue q's app side: the port's rings.
func (d *Ring) appSide(q int) (bridge.App, error) {
	queue, err := d.port.Queue(q)
	if err != nil {
		return bridge.App{}, err
	}
	out, err := queue.Out(d.cfg.Workers.Batch, d.cfg.Workers.MaxSegments)
	if err != nil {
		return bridge.App{}, err
	}
	in, err := queue.In(d.cfg.Workers.Batch, tap.FrameLen(d.maxMTU))
	if err != nil {
		out.Close()
		return bridge.App{}, err
	}
	return queue.App(out, in), nil
}

// watchApp ends the path when the DPDK app's process exits.
func (d *Ring) watchApp() {
	pid := d.port.AppPID()
	app := appName(pid)
	if pid <= 0 {
		d.log.Warn("the port does not say the DPDK app's pid: kbridge cannot notice the app exiting", "app_pid", pid)
		return
	}
	gone, stop, err := watchPID(pid)
	if errors.Is(err, unix.ESRCH) {
		d.finish(fmt.Errorf("%s %w", app, ErrAppExited))
		return
	}
	if err != nil {
		d.log.Warn("not watching the DPDK app", "app", app, "err", err)
		return
	}
	d.stopApp = stop
	go func() {
		select {
		case <-gone:
			d.finish(fmt.Errorf("%s %w", app, ErrAppExited))
		case <-d.done:
		}
	}()
}

// appName names the DPDK app by its pid, or says the pid is unknown.
func appName(pid int) string {
	if pid <= 0 {
		return "the DPDK app (pid unknown)"
	}
	return fmt.Sprintf("the DPDK app (pid %d)", pid)
}

// Done is closed when the path stops by itself (every worker returned, or
// the app exited; Err says which) and once Stop has stopped it.
func (d *Ring) Done() <-chan struct{} { return d.done }

// Summary is the one-line STATUS= for systemd.
func (d *Ring) Summary() string {
	return "bridging " + d.cfg.Port + " <-> " + d.cfg.Interface.Name
}

// Collector exports the counters to Prometheus.
func (d *Ring) Collector() prometheus.Collector { return newCollector(d) }

// Port returns the exception port.
func (d *Ring) Port() *ring.Port { return d.port }

// Stop stops the app watch, then the path (tapPath.stop: the keeper, the
// workers, which free every mbuf they hold, the TAP interface), then
// releases the port. It returns what the workers failed with too. It may be
// called more than once.
func (d *Ring) Stop() error {
	return d.stop(func() error { d.stopApp(); return nil }, func() {
		if d.port != nil {
			d.log.Info("stopped", "pool_in_use", d.port.PoolInUse(), "queues", len(d.workers))
			d.port.Release()
		}
	})
}

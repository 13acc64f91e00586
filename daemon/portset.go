package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/ring"
)

// How often a port set looks at the app's ports (discover) and, while it
// knows no pid of the app, at the primary; and how long a port that failed
// waits before it is tried again while the app keeps it.
var (
	scanEvery = time.Second
	failRetry = 10 * time.Second
)

// PortSet is mode ring serving several ports of one app (`ports:`,
// `discover`): one EAL, one ring path per port (a Ring: its interface,
// workers, keeper, CoPP buckets and reserve, held record), one ticker for
// every port's link and closing, one scan of the app's ports and one watch
// of the app's process. A port the app frees goes (its workers stop, the
// port is released at once, its interface closes in the background); with
// discover the set goes on without it, and a port that fails is recorded
// and tried again later; without discover either ends the set, as one
// port's end ends a Ring. The app's exit ends it. It is a Runner.
type PortSet struct {
	log    *slog.Logger
	ctx    context.Context // ends at Stop: a start under way gives up
	cancel context.CancelFunc

	mu      sync.Mutex
	cfg     config.Config          // in force, with the live keys
	ports   map[string]*setPort    // by port name
	failed  map[string]portFailure // ports discover could not serve, by name
	going   map[string]chan struct{}
	stored  []ListenFd // the fd store's queues no port has taken yet
	store   fdStore
	appPID  int
	stopApp func()
	// ealAttempt is StartOpts.EALAttempt: each port's status says it.
	ealAttempt int

	done     chan struct{}
	doneOnce sync.Once
	err      error
	stopping atomic.Bool
	stopOnce sync.Once
	stopErr  error
	quit     chan struct{} // ends the tick and the scan
	rescan   chan struct{} // a scan now
	poke     chan struct{} // a tick now
	doorbell *os.File      // the app rings it on each create and free; nil: none
	rang     bool          // the doorbell was tried
	loops    sync.WaitGroup
	bg       sync.WaitGroup // ports stopping in the background
}

// setPort is one port of the set.
type setPort struct {
	spec       config.PortSpec
	r          *Ring
	discovered bool
	link       linkFollow // the ticker's alone
}

// portFailure is why a port could not be served, and since when.
type portFailure struct {
	err   string
	since time.Time
	tried time.Time
}

var _ Runner = (*PortSet)(nil)

// startPortSet joins the app and serves the ports cfg names, waiting for
// each up to dpdk.wait, then (discover) every other port the app has.
func startPortSet(ctx context.Context, cfg config.Config, log *slog.Logger, progress func(string), opts StartOpts) (*PortSet, error) {
	if opts.Takeover {
		closeStored(opts.Stored, log)
		return nil, &ConfigError{errors.New("--takeover: a kbridge serving several ports (ports:, discover) hands none over: stop it and start the next")}
	}
	specs, err := cfg.PortSpecs()
	if err != nil {
		closeStored(opts.Stored, log)
		return nil, &ConfigError{err}
	}
	s := &PortSet{log: log, cfg: cfg, ports: map[string]*setPort{}, failed: map[string]portFailure{},
		going: map[string]chan struct{}{}, stored: opts.Stored, store: newFdStore(log), stopApp: func() {},
		done: make(chan struct{}), quit: make(chan struct{}), rescan: make(chan struct{}, 1), poke: make(chan struct{}, 1),
		ealAttempt: opts.EALAttempt}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, s.cancel) // a stop during start-up
	defer stop()
	deadline, err := joinApp(ctx, cfg, log, progress, opts.EALAttempt)
	if err != nil {
		// Another start of EAL carries one interface's queues: the
		// first port's (the file's port), the others' are dropped.
		err = reattachStored(err, opts, cfg.Interface.Name, s.takeStored(cfg.Interface.Name), log)
		s.dropStored()
		return nil, err
	}
	for _, spec := range specs {
		if err := s.add(spec, false, deadline, progress); err != nil {
			return nil, errors.Join(err, s.Stop())
		}
	}
	if cfg.Discover {
		progress("discovering the app's ports")
		s.scan()
	}
	s.dropStored()
	s.loops.Add(2)
	go s.every(s.tickEvery, s.poke, s.tickAll)
	go s.every(func() time.Duration { return scanEvery }, s.rescan, s.look)
	log.Info("serving the app's ports", "ports", len(s.ports), "discover", cfg.Discover)
	return s, nil
}

// add serves one port: it waits for an interface of that name still going,
// then opens the port as a Ring whose ticks and app watch are the set's.
func (s *PortSet) add(spec config.PortSpec, discovered bool, deadline time.Time, progress func(string)) error {
	// Before the first port is served: the app, told it is, makes its
	// next port at once, and must find the doorbell there to ring.
	s.takeDoorbell()
	s.waitGone(spec.Interface.Name)
	cfg := s.Config().ForPort(spec)
	log := s.log.With("port", spec.Port)
	r, err := openRing(s.ctx, cfg, log, progress, StartOpts{Stored: s.takeStored(spec.Interface.Name), hinted: discovered,
		EALAttempt: s.ealAttempt}, deadline)
	if err != nil {
		// The app may wait for an answer (kbridge_port_wait_served()).
		if rerr := ring.RefusePort(spec.Port, err.Error()); rerr == nil {
			log.Debug("told the app that kbridge refuses the port")
		}
		return fmt.Errorf("port %s: %w", spec.Port, err)
	}
	r.releaseFirst = true
	s.mu.Lock()
	if s.stopping.Load() {
		s.mu.Unlock()
		return errors.Join(errStopping, r.Stop())
	}
	s.ports[spec.Port] = &setPort{spec: spec, r: r, discovered: discovered}
	s.mu.Unlock()
	s.watchApp(r.port.AppPID())
	go s.watchPort(spec.Port, r)
	s.takeDoorbell() // a port named in the file, which the app made only now
	return nil
}

// takeDoorbell hands the app a doorbell (ring.Doorbell), once it has a
// port (its header registers the doorbell with its first; the scan saw
// one), and rings the tick and the scan whenever the app rings it: a port
// it creates is served, one it frees let go of, and a link it reports
// followed at once rather than at the next look.
func (s *PortSet) takeDoorbell() {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Asked before the app has a port, its DPDK would log that it has no
	// such action and leave kbridge waiting for an answer.
	if s.rang || len(ring.PortNames()) == 0 {
		return
	}
	s.rang = true
	f, err := ring.Doorbell()
	if err != nil {
		s.log.Info("no doorbell from the app: kbridge looks for new ports every second, and for freed ones and links every 20 ms", "err", err)
		return
	}
	s.doorbell = f
	s.Rescan() // what the app made before it had the doorbell
	go func() {
		var b [8]byte
		for {
			if _, err := f.Read(b[:]); err != nil {
				return // closed by Stop
			}
			for _, ch := range []chan struct{}{s.poke, s.rescan} {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
}

// waitGone waits until the interface name, of a port that went, is closed:
// the kernel takes tens of milliseconds to remove a TAP interface.
func (s *PortSet) waitGone(name string) {
	s.mu.Lock()
	gone := s.going[name]
	s.mu.Unlock()
	if gone != nil {
		select {
		case <-gone:
		case <-s.ctx.Done():
		}
	}
}

// watchPort takes a port out of the set when its path ends by itself (the
// app freed it, a worker failed, its interface was lost).
func (s *PortSet) watchPort(name string, r *Ring) {
	<-r.Done()
	if s.stopping.Load() {
		return
	}
	err := r.Err()
	s.mu.Lock()
	sp := s.ports[name]
	if sp == nil || sp.r != r {
		s.mu.Unlock()
		return
	}
	discover := s.cfg.Discover
	if !discover {
		s.mu.Unlock()
		s.finish(fmt.Errorf("port %s: %w", name, err))
		return
	}
	delete(s.ports, name)
	freed := errors.Is(err, ErrAppFreesPort)
	if !freed {
		now := time.Now()
		s.failed[name] = portFailure{err: err.Error(), since: now, tried: now}
	}
	ifname := sp.spec.Interface.Name
	gone := make(chan struct{})
	s.going[ifname] = gone
	s.mu.Unlock()
	if freed {
		s.log.Info("the app freed the port: its interface goes", "port", name, "interface", ifname)
	} else {
		s.log.Error("the port stopped: kbridge serves the others and tries it again while the app keeps it",
			"port", name, "retry_after", failRetry.String(), "err", err)
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		r.unstore()
		if err := r.Stop(); err != nil && freed {
			s.log.Warn("the port's path stopped with an error", "port", name, "err", err)
		}
		s.mu.Lock()
		delete(s.going, ifname)
		s.mu.Unlock()
		close(gone)
	}()
}

// watchApp ends the set when the app's process exits, watched from the
// first pid a port names.
func (s *PortSet) watchApp(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appPID != 0 || pid <= 0 {
		return
	}
	s.appPID = pid
	gone, stop, err := watchPID(pid)
	if errors.Is(err, unix.ESRCH) {
		s.finish(fmt.Errorf("%s %w", appName(pid), ErrAppExited))
		return
	}
	if err != nil {
		s.log.Warn("not watching the DPDK app: the scan notices its exit", "app", appName(pid), "err", err)
		s.appPID = 0
		return
	}
	s.stopApp = stop
	go func() {
		select {
		case <-gone:
			s.finish(fmt.Errorf("%s %w", appName(pid), ErrAppExited))
		case <-s.quit:
		}
	}()
}

// every runs f every d() (asked again after each run), and at once when
// kick fires (nil: never), until the set stops or f returns false.
func (s *PortSet) every(d func() time.Duration, kick <-chan struct{}, f func() bool) {
	defer s.loops.Done()
	t := time.NewTimer(d())
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		case <-kick:
		}
		if !f() {
			return
		}
		t.Reset(d())
	}
}

// tickEvery is how often the tick looks at every port: every closingPoll
// until the app has the doorbell, which it rings when it frees a port or
// reports a link (kbridge_port_free, kbridge_port_set_link), and from then
// on every scanEvery only, for a ring lost. A tick of 64 ports every 20 ms
// was most of what an idle port set cost (docs/runs/2026-12-07-64-knis.md).
func (s *PortSet) tickEvery() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.doorbell != nil {
		return scanEvery
	}
	return closingPoll
}

// tickAll follows every port's link and notices a port the app frees: one
// ticker for all.
func (s *PortSet) tickAll() bool {
	for _, sp := range s.served() {
		select {
		case <-sp.r.Done(): // going: watchPort takes it out
		default:
			sp.r.tick(&sp.link)
		}
	}
	return true
}

// look looks at the app: its ports (discover) and, while no pid of it is
// known, whether it still runs. Every scanEvery, or at once when asked
// (Rescan).
func (s *PortSet) look() bool {
	cfg := s.Config()
	s.mu.Lock()
	known := s.appPID != 0
	s.mu.Unlock()
	if !known {
		if err := ring.PrimaryAlive(cfg.DPDK.RuntimeDir, cfg.DPDK.FilePrefix); err != nil {
			s.finish(fmt.Errorf("the DPDK app %w (%w)", ErrAppExited, err))
			return false
		}
	}
	if cfg.Discover {
		s.scan()
	}
	return true
}

// Rescan asks for a scan of the app's ports now: the app created or freed
// one.
func (s *PortSet) Rescan() {
	select {
	case s.rescan <- struct{}{}:
	default:
	}
}

// scan serves the app's ports that no port of the set serves: a port the
// file names as the file says, any other as discover's template. A port
// that failed is tried again after failRetry while the app keeps it, and
// forgotten once the app freed it.
func (s *PortSet) scan() {
	cfg := s.Config()
	names := ring.PortNames()
	specs, _ := cfg.PortSpecs()
	now := time.Now()
	var todo []string
	s.mu.Lock()
	for name := range s.failed {
		if !slices.Contains(names, name) {
			delete(s.failed, name)
		}
	}
	for _, name := range names {
		f, failed := s.failed[name]
		if s.ports[name] == nil && (!failed || now.Sub(f.tried) >= failRetry) {
			todo = append(todo, name)
		}
	}
	s.mu.Unlock()
	for _, name := range todo {
		if s.ctx.Err() != nil {
			return
		}
		spec, named := cfg.DiscoveredSpec(name), false
		if i := slices.IndexFunc(specs, func(p config.PortSpec) bool { return p.Port == name }); i >= 0 {
			spec, named = specs[i], true
		}
		start := time.Now()
		err := s.add(spec, !named, start, func(string) {})
		s.mu.Lock()
		f, failed := s.failed[name]
		switch {
		case err == nil:
			delete(s.failed, name)
		case failed:
			f.tried = time.Now()
			s.failed[name] = f
		default:
			s.failed[name] = portFailure{err: err.Error(), since: start, tried: time.Now()}
		}
		s.mu.Unlock()
		switch {
		case err == nil:
			s.log.Info("serving a port the app created", "port", name, "interface", spec.Interface.Name,
				"took", time.Since(start).Round(time.Microsecond).String())
		case !failed || f.err != err.Error():
			s.log.Error("not serving a port of the app: kbridge tries again while the app keeps it",
				"port", name, "retry_after", failRetry.String(), "err", err)
			if failed {
				s.mu.Lock()
				f.err = err.Error()
				s.failed[name] = f
				s.mu.Unlock()
			}
		}
	}
}

// served returns the ports served now, in no order.
func (s *PortSet) served() []*setPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*setPort, 0, len(s.ports))
	for _, sp := range s.ports {
		out = append(out, sp)
	}
	return out
}

// takeStored takes the fd store's queues of interface name off the fds no
// port has taken.
func (s *PortSet) takeStored(name string) []ListenFd {
	s.mu.Lock()
	defer s.mu.Unlock()
	var mine, rest []ListenFd
	for _, f := range s.stored {
		if q, ok := strings.CutPrefix(f.Name, name+".q"); ok && strconv.Itoa(atoiOr(q)) == q {
			mine = append(mine, f)
		} else {
			rest = append(rest, f)
		}
	}
	s.stored = rest
	return mine
}

func atoiOr(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// dropStored closes the fd store's queues no port took at start, and drops
// them from the store: their interfaces go.
func (s *PortSet) dropStored() {
	s.mu.Lock()
	left := s.stored
	s.stored = nil
	s.mu.Unlock()
	for _, f := range left {
		s.log.Warn("systemd passed the queue of an interface no port of the app has: closed and dropped from the fd store", "fdname", f.Name)
		unix.Close(f.Fd)
		s.store.remove(f.Name)
	}
}

// finish ends the set by itself, once, with the reason.
func (s *PortSet) finish(err error) {
	s.doneOnce.Do(func() {
		s.err = err
		close(s.done)
	})
}

// Done is closed when the set ends by itself (the app exited; without
// discover, a port's end) and once Stop ran.
func (s *PortSet) Done() <-chan struct{} { return s.done }

// Err says why Done closed by itself; nil otherwise.
func (s *PortSet) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Config returns the configuration in force, with the live keys.
func (s *PortSet) Config() config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Alive reports whether every port's workers advanced since the last call.
func (s *PortSet) Alive() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	alive := true
	for _, sp := range s.served() {
		alive = sp.r.Alive() && alive
	}
	return alive
}

// Reload applies the live keys to every port, each with its own
// configuration (ForPort); `ports` and `discover` need a restart.
func (s *PortSet) Reload(cfg config.Config) error {
	old := s.Config()
	if err := checkReload(old, cfg); err != nil {
		return err
	}
	specs, err := cfg.PortSpecs()
	if err != nil {
		return &ConfigError{err}
	}
	var keys []string
	for _, sp := range s.served() {
		spec := sp.spec
		if i := slices.IndexFunc(specs, func(p config.PortSpec) bool { return p.Port == spec.Port }); i >= 0 {
			spec = specs[i]
		} else if sp.discovered {
			spec = cfg.DiscoveredSpec(spec.Port)
		}
		if sp.discovered {
			// What the app wanted of the interface stays (withHints).
			running := sp.r.Config().Interface
			spec.Interface.MTU, spec.Interface.Up = running.MTU, running.Up
		}
		err := sp.r.Reload(cfg.ForPort(spec))
		var re *RestartError
		switch {
		case err == nil:
		case errors.As(err, &re):
			keys = append(keys, re.Keys...)
		default:
			return fmt.Errorf("port %s: %w", spec.Port, err)
		}
	}
	s.mu.Lock()
	s.cfg.Policy, s.cfg.CoPP = cfg.Policy, cfg.CoPP
	s.cfg.Interface.Offload, s.cfg.Interface.OnStop = cfg.Interface.Offload, cfg.Interface.OnStop
	now := s.cfg
	s.mu.Unlock()
	var re *RestartError
	if errors.As(restartNeeded(now, cfg), &re) {
		keys = append(keys, re.Keys...)
	}
	slices.Sort(keys)
	if keys = slices.Compact(keys); len(keys) > 0 {
		return &RestartError{Keys: keys}
	}
	return nil
}

// SetStatus is what a port set's control socket serves: each port's Status
// and the ports discover could not serve.
type SetStatus struct {
	AppPID   int          `json:"app_pid"`
	Discover bool         `json:"discover"`
	Ports    []Status     `json:"ports"`
	Failed   []PortFailed `json:"failed,omitempty"`
}

// PortFailed is a port of the app kbridge does not serve, and why.
type PortFailed struct {
	Port  string    `json:"port"`
	Err   string    `json:"error"`
	Since time.Time `json:"since"`
}

// Status is what the control socket serves: a SetStatus.
func (s *PortSet) Status() any { return s.Snapshot() }

// Snapshot reads every port's counters now, the ports in name order.
func (s *PortSet) Snapshot() SetStatus {
	ports := s.served()
	slices.SortFunc(ports, func(a, b *setPort) int { return strings.Compare(a.spec.Port, b.spec.Port) })
	s.mu.Lock()
	st := SetStatus{AppPID: s.appPID, Discover: s.cfg.Discover, Ports: make([]Status, 0, len(ports))}
	for name, f := range s.failed {
		st.Failed = append(st.Failed, PortFailed{Port: name, Err: f.err, Since: f.since})
	}
	s.mu.Unlock()
	slices.SortFunc(st.Failed, func(a, b PortFailed) int { return strings.Compare(a.Port, b.Port) })
	for _, sp := range ports {
		st.Ports = append(st.Ports, sp.r.Snapshot())
	}
	return st
}

// Summary is the one-line STATUS= for systemd.
func (s *PortSet) Summary() string {
	n := len(s.served())
	s.mu.Lock()
	pid := s.appPID
	s.mu.Unlock()
	return fmt.Sprintf("bridging %d ports of %s", n, appName(pid))
}

// Stop stops the scan and the ticks, then every port at once (each frees
// what its workers hold, releases its port and closes its interface), and
// waits for the ports that went before. It may be called more than once.
func (s *PortSet) Stop() error {
	s.stopOnce.Do(func() {
		s.stopping.Store(true)
		s.cancel()
		close(s.quit)
		s.loops.Wait()
		s.mu.Lock()
		s.stopApp()
		if s.doorbell != nil {
			_ = s.doorbell.Close()
		}
		ports := make([]*setPort, 0, len(s.ports))
		for _, sp := range s.ports {
			ports = append(ports, sp)
		}
		s.mu.Unlock()
		errs := make([]error, len(ports))
		var wg sync.WaitGroup
		for i, sp := range ports {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := sp.r.Stop(); err != nil {
					errs[i] = fmt.Errorf("port %s: %w", sp.spec.Port, err)
				}
			}()
		}
		wg.Wait()
		s.bg.Wait()
		s.dropStored()
		s.finish(nil)
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// Collector exports every port's counters, each with a port label, and
// how many ports are served and failed.
func (s *PortSet) Collector() prometheus.Collector {
	return newSetCollector(func() ([]portSnapshot, int) {
		served := s.served()
		ports := make([]portSnapshot, len(served))
		for i, sp := range served {
			ports[i] = portSnapshot{sp.spec.Port, sp.r}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return ports, len(s.failed)
	})
}

// portSnapshot is one port of a set, for its collector.
type portSnapshot struct {
	port string
	snap snapshotter
}

// setCollector is a port set's collector: unchecked (it describes nothing
// ahead), since its ports come and go. Each scrape collects each port
// through the ring collector, labelled with its port.
type setCollector struct {
	ports func() (served []portSnapshot, failed int)
	count *prometheus.Desc
}

func newSetCollector(ports func() ([]portSnapshot, int)) *setCollector {
	return &setCollector{ports: ports,
		count: prometheus.NewDesc("kbridge_ports", "Ports of the app by state: served, or failed (discover: "+
			"kbridge could not serve it and tries again while the app keeps it).", []string{"state"}, nil)}
}

func (c *setCollector) Describe(chan<- *prometheus.Desc) {}

func (c *setCollector) Collect(ch chan<- prometheus.Metric) {
	ports, failed := c.ports()
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(len(ports)), "served")
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(failed), "failed")
	for _, p := range ports {
		newLabelledCollector(p.snap, prometheus.Labels{"port": p.port}).Collect(ch)
	}
}

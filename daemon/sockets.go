package daemon

import (
	"slices"
	"sync"
	"time"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/ring"
	"github.com/kbridge/kbridge/sockview"
)

// Sockets is what the view of the host's sockets, which classes unwanted
// frames and BGP sessions in the burst core, says now: `kbridge stats`'
// "sockets".
type Sockets struct {
	// TCP and UDP are "on" while that protocol's frames are judged by
	// their ports, else why not ("copp.unwanted.enabled is false", a
	// packet socket on the interface, a raw socket, NAT, IPVS, no view).
	TCP string `json:"tcp"`
	UDP string `json:"udp"`
	// Ports in use by TCP and UDP sockets, the host's own address
	// prefixes and BGP sessions, as last read.
	TCPPorts      int `json:"tcp_ports"`
	UDPPorts      int `json:"udp_ports"`
	LocalPrefixes int `json:"local_prefixes"`
	BGPSessions   int `json:"bgp_sessions"`
	// PacketFilters are the packet sockets on the interface whose filters
	// are run on a frame before it is judged unwanted.
	PacketFilters int `json:"packet_filters"`
	// Readings counts the readings published, Walks those that walked
	// the TCP connections too, Idle the refreshes that read nothing
	// because no frame asked for the view, Errors the readings that
	// failed; LastError is the last failure, ReadUs how long the last
	// reading took.
	Readings  uint64 `json:"readings"`
	Walks     uint64 `json:"walks"`
	Idle      uint64 `json:"idle"`
	Errors    uint64 `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	ReadUs    int64  `json:"read_us"`
}

// The filter's state when it judges a protocol's frames.
const sockOn = "on"

// idleRefresh is how often the host's sockets are read while no frame
// toward the kernel asks for the view (copp.unwanted.refresh when that is
// longer). The first frames after an idle spell are judged by a view up to
// this old: a listener opened meanwhile is unwanted for them (policed, not
// dropped outright), until the reading their burst triggers, a refresh
// later.
const idleRefresh = time.Second

// sockWatch keeps the burst core's view of the host's sockets current while
// the paths run: every copp.unwanted.refresh it reads them
// (sockview.Reader) and publishes them (ring.PublishSockView), or, while no
// frame toward the kernel has asked for the view since the last tick, once
// every idleRefresh: an idle kbridge does not read the host's sockets ten
// times a second for nobody. A view lives three of the longer of the two
// (3 s by default): a reader that fails or stalls lets it expire, and the
// burst core then judges no frame by sockets rather than by a stale view.
// One per process, as the burst core's view is: the paths of a port set
// share it (joinSockets).
type sockWatch struct {
	cfg      func() copp.Config
	ifindexs func() []int
	log      logger
	stop     chan struct{}
	done     chan struct{}

	mu sync.Mutex // guards st
	st Sockets
}

// logger is what sockWatch logs with (a *slog.Logger).
type logger interface {
	Warn(msg string, args ...any)
	Info(msg string, args ...any)
}

// sockUser is a path that the process's sockWatch reads for: its
// configuration and its interface's index.
type sockUser struct {
	cfg     func() copp.Config
	ifindex func() int
	log     logger
}

// sockShare is the process's one sockWatch and the paths it reads for (a
// port set runs a path per port): one reader keeps the one view for every
// interface, and the view is withdrawn when the last path stops, not when
// any does. mu orders joins and leaves (a leave that stops the watch ends
// before a join starts the next); umu guards users, which the watch reads
// at each refresh.
var sockShare struct {
	mu    sync.Mutex
	w     *sockWatch
	umu   sync.Mutex
	users []*sockUser
	last  copp.Config // the configuration of the last reading, for a watch left with no path
}

// joinSockets adds u to the paths the process's sockWatch reads for,
// starting it for the first, and returns it.
func joinSockets(u *sockUser) *sockWatch {
	sockShare.mu.Lock()
	defer sockShare.mu.Unlock()
	sockShare.umu.Lock()
	sockShare.users = append(sockShare.users, u)
	sockShare.umu.Unlock()
	if sockShare.w == nil {
		sockShare.w = watchSockets(sharedCoPP, sharedIfindexes, u.log)
	}
	return sockShare.w
}

// leaveSockets takes u off; the last path's leave stops the watch, which
// withdraws the view.
func leaveSockets(u *sockUser) {
	sockShare.mu.Lock()
	defer sockShare.mu.Unlock()
	sockShare.umu.Lock()
	sockShare.users = slices.DeleteFunc(sockShare.users, func(o *sockUser) bool { return o == u })
	left := len(sockShare.users)
	sockShare.umu.Unlock()
	if left == 0 && sockShare.w != nil {
		sockShare.w.Stop()
		sockShare.w = nil
	}
}

// sharedCoPP is the first path's CoPP section: a port set's paths share the
// file's.
func sharedCoPP() copp.Config {
	sockShare.umu.Lock()
	defer sockShare.umu.Unlock()
	if len(sockShare.users) > 0 {
		sockShare.last = sockShare.users[0].cfg()
	}
	return sockShare.last
}

// sharedIfindexes are the interfaces of every path.
func sharedIfindexes() []int {
	sockShare.umu.Lock()
	defer sockShare.umu.Unlock()
	out := make([]int, 0, len(sockShare.users))
	for _, u := range sockShare.users {
		out = append(out, u.ifindex())
	}
	return out
}

// watchSockets starts a sockWatch reading the configuration cfg returns
// at each refresh, for the interfaces ifindexs returns.
func watchSockets(cfg func() copp.Config, ifindexs func() []int, log logger) *sockWatch {
	w := &sockWatch{cfg: cfg, ifindexs: ifindexs, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	w.st.TCP, w.st.UDP = "no view read yet", "no view read yet"
	go w.run()
	return w
}

func (w *sockWatch) run() {
	defer close(w.done)
	defer ring.WithdrawSockView()
	var r *sockview.Reader
	defer func() {
		if r != nil {
			r.Close()
		}
	}()
	failing := false
	var last time.Time // the last reading published
	for {
		c := w.cfg()
		refresh := c.Unwanted.Refresh
		if refresh <= 0 {
			refresh = copp.DefaultConfig().Unwanted.Refresh
		}
		// Read whether a burst wanted the view since the last tick
		// even when the reading is due anyway: the next tick then
		// asks about this tick's interval alone.
		used := ring.SockViewUsed()
		if !c.Enabled {
			ring.WithdrawSockView()
			w.set(func(s *Sockets) { s.TCP, s.UDP = "copp.enabled is false", "copp.enabled is false" })
			last = time.Time{}
		} else if !used && !failing && !last.IsZero() && time.Since(last) < idleRefresh-refresh/2 {
			w.set(func(s *Sockets) { s.Idle++ })
		} else {
			var err error
			if r == nil {
				r, err = sockview.Open()
			}
			if err == nil {
				err = w.read(r, c, refresh)
			}
			if err == nil {
				last = time.Now()
			}
			switch {
			case err != nil && !failing:
				w.log.Warn("cannot read the host's sockets: frames are not judged by them until a reading succeeds", "err", err)
			case err == nil && failing:
				w.log.Info("reading the host's sockets again")
			}
			failing = err != nil
			if err != nil {
				w.set(func(s *Sockets) { s.Errors++; s.LastError = err.Error() })
			}
		}
		select {
		case <-w.stop:
			return
		case <-time.After(refresh):
		}
	}
}

// read takes one reading and publishes it.
func (w *sockWatch) read(r *sockview.Reader, c copp.Config, refresh time.Duration) error {
	start := time.Now()
	// Ports learned from what the host sends are forgotten only once a
	// reading begun after them is published (TCP's: one that walked the
	// connections).
	missed := ring.RotateSockView()
	walk := r.WalkDue(start, missed)
	v, err := r.Read(w.ifindexs(), walk)
	if err != nil {
		return err
	}
	f := ring.SockViewFilter{TCP: v.TCPOff == "", UDP: v.UDPOff == ""}
	tcp, udp := onOr(v.TCPOff), onOr(v.UDPOff)
	if !c.Unwanted.Enabled {
		f = ring.SockViewFilter{}
		tcp, udp = "copp.unwanted.enabled is false", "copp.unwanted.enabled is false"
	}
	if len(v.Local) > ring.MaxLocalPrefixes {
		// More addresses than the burst core looks through: judge
		// nothing rather than some.
		why := "more local address prefixes than the view holds"
		v.Local, f, tcp, udp = nil, ring.SockViewFilter{}, why, why
	}
	if err := ring.PublishSockView(v, f, ring.MonotonicNow()+3*max(refresh, idleRefresh)); err != nil {
		return err
	}
	took := time.Since(start)
	w.set(func(s *Sockets) {
		s.TCP, s.UDP = tcp, udp
		s.TCPPorts, s.UDPPorts, s.LocalPrefixes = len(v.TCP), len(v.UDP), len(v.Local)
		s.BGPSessions = min(len(v.BGP), ring.MaxBGPSessions)
		s.PacketFilters = len(v.Filters)
		s.Readings++
		if walk {
			s.Walks++
		}
		s.ReadUs = took.Microseconds()
	})
	return nil
}

func onOr(why string) string {
	if why == "" {
		return sockOn
	}
	return why
}

func (w *sockWatch) set(f func(*Sockets)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.st)
}

// Status is the view's state now.
func (w *sockWatch) Status() Sockets {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st
}

// Stop ends the readings and withdraws the view: no frame is judged by
// sockets from then on.
func (w *sockWatch) Stop() {
	close(w.stop)
	<-w.done
}

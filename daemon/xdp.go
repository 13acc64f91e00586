package daemon

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/xdp"
)

// XDP is a running XDP redirect path: no DPDK, no worker, only the kernel.
// It is a Runner.
type XDP struct {
	Path *xdp.Path
	log  *slog.Logger

	mu       sync.Mutex
	cfg      config.Config // the configuration in force, for Reload to compare with
	done     chan struct{}
	stopOnce sync.Once
	stopErr  error
}

var _ Runner = (*XDP)(nil)

// startXDP attaches the steering program and creates the exception veth.
func startXDP(cfg config.Config, log *slog.Logger) (*XDP, error) {
	x := cfg.XDPConfig()
	x.Logger = log
	p, err := xdp.Attach(x)
	if err != nil {
		return nil, err
	}
	log.Info("xdp path attached", "nic", x.NIC, "interface", x.Exception, "mode", p.Mode(),
		"return_mode", p.ReturnMode(), "loader", p.Config().Loader, "fast_path_rules", len(x.FastPath))
	return &XDP{Path: p, log: log, cfg: cfg, done: make(chan struct{})}, nil
}

// Reload applies xdp.fast_path, xdp.xsk_fallback and interface.on_stop
// live. See Runner.
func (x *XDP) Reload(cfg config.Config) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := checkReload(x.cfg, cfg); err != nil {
		return err
	}
	xc := cfg.XDPConfig().WithDefaults()
	if err := x.Path.SetRules(xc.FastPath, xc.XSKFallback); err != nil {
		return err
	}
	x.cfg.XDP.FastPath, x.cfg.XDP.XSKFallback = cfg.XDP.FastPath, cfg.XDP.XSKFallback
	x.Path.SetKeepVeth(cfg.Interface.Keep())
	x.cfg.Interface.OnStop = cfg.Interface.OnStop
	return restartNeeded(x.cfg, cfg, "xdp.fast_path", "xdp.xsk_fallback", "interface.on_stop")
}

// Alive reports whether the path still works: its counters can be read
// and, unless the DPDK app loads the program (loader pmd), the NIC still
// has an XDP program attached.
func (x *XDP) Alive() bool {
	if _, err := x.Path.Stats(); err != nil {
		return false
	}
	c := x.Path.Config()
	if c.Loader == xdp.LoaderPMD {
		return true
	}
	l, err := netlink.LinkByName(c.NIC)
	return err == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
}

// Done is closed once Stop has detached the path; the XDP path never stops
// by itself.
func (x *XDP) Done() <-chan struct{} { return x.done }

// Err is nil: the XDP path never stops by itself.
func (x *XDP) Err() error { return nil }

// Summary is the one-line STATUS= for systemd.
func (x *XDP) Summary() string {
	c := x.Path.Config()
	return "steering " + c.NIC + " -> " + c.Exception
}

// Stop detaches the path and removes what it created.
func (x *XDP) Stop() error {
	x.stopOnce.Do(func() {
		x.stopErr = x.Path.Close()
		close(x.done)
		x.log.Info("stopped: xdp path detached")
	})
	return x.stopErr
}

// XDPStatus is what the control socket serves in mode xdp.
type XDPStatus struct {
	Mode       config.Mode            `json:"mode"`
	NIC        string                 `json:"nic"`
	Interface  string                 `json:"interface"`
	AttachMode string                 `json:"attach_mode"`
	Actions    map[string]xdp.Counter `json:"actions"`
	Error      string                 `json:"error,omitempty"`
}

// Status is what the control socket serves: a Snapshot.
func (x *XDP) Status() any { return x.Snapshot() }

// Snapshot reads the per-action counters, summed over CPUs.
func (x *XDP) Snapshot() XDPStatus {
	c := x.Path.Config()
	s := XDPStatus{Mode: config.ModeXDP, NIC: c.NIC, Interface: c.Exception, AttachMode: string(x.Path.Mode())}
	if c.Loader == xdp.LoaderPMD {
		s.AttachMode = "pmd (the DPDK app attaches kbridge's object)"
	}
	st, err := x.Path.Stats()
	if err != nil {
		s.Error = err.Error()
		return s
	}
	s.Actions = st.Map()
	return s
}

// Collector exports the per-action counters to Prometheus.
func (x *XDP) Collector() prometheus.Collector { return xdpCollector{x} }

type xdpCollector struct{ x *XDP }

var (
	xdpPackets = prometheus.NewDesc("kbridge_xdp_packets_total", "Frames per XDP action.", []string{"action"}, nil)
	xdpBytes   = prometheus.NewDesc("kbridge_xdp_bytes_total", "Bytes per XDP action.", []string{"action"}, nil)
)

func (c xdpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- xdpPackets; ch <- xdpBytes }

func (c xdpCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.x.Path.Stats()
	if err != nil {
		return
	}
	for action, v := range st.Map() {
		ch <- prometheus.MustNewConstMetric(xdpPackets, prometheus.CounterValue, float64(v.Packets), action)
		ch <- prometheus.MustNewConstMetric(xdpBytes, prometheus.CounterValue, float64(v.Bytes), action)
	}
}

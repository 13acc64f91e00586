package daemon

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/xdp"
)

// XDP is a running XDP redirect path: no DPDK, no worker, only the kernel.
type XDP struct {
	cfg  config.Config
	Path *xdp.Path
}

// StartXDP attaches the steering program and creates the exception veth.
func StartXDP(cfg config.Config, log *slog.Logger) (*XDP, error) {
	x := cfg.XDPConfig()
	x.Logger = log
	p, err := xdp.Attach(x)
	if err != nil {
		return nil, err
	}
	log.Info("xdp path attached", "nic", x.NIC, "interface", x.Exception, "mode", p.Mode(),
		"return_mode", p.ReturnMode(), "loader", p.Config().Loader, "fast_path_rules", len(x.FastPath))
	return &XDP{cfg: cfg, Path: p}, nil
}

// XDPStatus is what the control socket serves in mode xdp.
type XDPStatus struct {
	Mode       string                 `json:"mode"`
	NIC        string                 `json:"nic"`
	Interface  string                 `json:"interface"`
	AttachMode string                 `json:"attach_mode"`
	Actions    map[string]xdp.Counter `json:"actions"`
	Error      string                 `json:"error,omitempty"`
}

// Status reads the per-action counters, summed over CPUs.
func (x *XDP) Status() XDPStatus {
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

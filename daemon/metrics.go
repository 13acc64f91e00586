package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/policy"
	"github.com/kbridge/kbridge/ring"
)

// collector exports the daemon's counters to Prometheus. It reads them when
// scraped, so the workers pay nothing for it.
type collector struct {
	d                         snapshotter
	packets, bytes, drops     *prometheus.Desc
	parks, wakeups, timeouts  *prometheus.Desc
	sleeps, spin, residence   *prometheus.Desc
	mode, poolInUse, appKicks *prometheus.Desc
	appDropped, canKick       *prometheus.Desc
	recovery                  *prometheus.Desc
	coppPackets, coppUnparsed *prometheus.Desc
	adopted, backlog          *prometheus.Desc
	coppRoomDropped           *prometheus.Desc
	coppReserved              *prometheus.Desc
	coppPolicing              *prometheus.Desc
	offload                   map[string]*prometheus.Desc // by bridge.Event name
	carrierRestored           *prometheus.Desc
	coppUnwanted, sockFilter  *prometheus.Desc
	sockReadings              *prometheus.Desc
	ealAttachRetries          *prometheus.Desc
}

// offloadMetric is the metric of one offload event (bridge.OffloadSnapshot's
// Events): each counts one unit, writes, packets or frames, so that no sum
// across a label mixes them. The two checksum completions share one metric,
// frames by direction.
type offloadMetric struct{ name, help, direction string }

var offloadMetrics = map[string]offloadMetric{
	"merged_writes":  {"offload_merged_writes_total", "GSO writes to the TAP that coalesced the app's TCP segments.", ""},
	"merged_packets": {"offload_merged_packets_total", "App packets written in merged (GSO) writes.", ""},
	"lro_writes":     {"offload_lro_writes_total", "App LRO packets (mode vhost: TSO packets) written as GSO frames.", ""},
	"lro_merged":     {"offload_lro_merged_packets_total", "App LRO packets merged with other packets of their flow (in offload_merged_packets_total too).", ""},
	"split_reads":    {"offload_split_reads_total", "Kernel super-frames read and cut into MTU frames.", ""},
	"split_frames":   {"offload_split_frames_total", "MTU frames cut from kernel super-frames.", ""},
	"tso_to_app":     {"offload_tso_to_app_frames_total", "Kernel super-frames handed whole to an app that takes TSO.", ""},
	"csum_completed_from_kernel": {"offload_csum_completed_frames_total",
		"Frames whose partial checksum kbridge finished, by direction (to_kernel: mode vhost's app packets).", "from_kernel"},
	"csum_completed_to_kernel": {"offload_csum_completed_frames_total", "", "to_kernel"},
	"fallbacks":                {"offload_fallback_writes_total", "Merged or LRO writes the kernel refused (EINVAL), redone frame by frame.", ""},
	"split_writes":             {"offload_split_write_packets_total", "App LRO/TSO packets cut into MTU frames in software and written plainly.", ""},
	"split_write_frames":       {"offload_split_write_frames_total", "MTU frames cut in software from app LRO/TSO packets.", ""},
	"coalesce_packets":         {"offload_coalesce_packets_total", "App packets offered to the coalescer.", ""},
	"coalesce_writes":          {"offload_coalesce_writes_total", "Writes the coalescer planned.", ""},
	"coalesce_bad_csum":        {"offload_coalesce_bad_csum_packets_total", "App packets with a wrong IPv4 or TCP checksum, written alone for the kernel to drop.", ""},
	"coalesce_csum_trusted": {"offload_coalesce_csum_trusted_packets_total",
		"App packets taken with their checksums verified (by the app's NIC, or completed by kbridge), not checked again.", ""},
}

// adoptedHow turns Adopted.How into a label value: a token, no spaces.
var adoptedHow = map[string]string{HowHanded: "handed_over", HowStored: "fd_store", HowPersistent: "persistent", HowTakenBack: "taken_back"}

// snapshotter is a runner whose counters have the ring Status shape (*Ring,
// *Vhost).
type snapshotter interface{ Snapshot() Status }

func newCollector(d snapshotter) *collector { return newLabelledCollector(d, nil) }

// newLabelledCollector is newCollector with labels of constant value on
// every metric: a port set's port label.
func newLabelledCollector(d snapshotter, cl prometheus.Labels) *collector {
	q := []string{"queue"}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("kbridge_"+name, help, append(q, labels...), cl)
	}
	c := &collector{
		d:          d,
		packets:    desc("packets_total", "Packets moved, by direction (to_kernel, from_kernel).", "direction"),
		bytes:      desc("bytes_total", "Bytes moved, by direction.", "direction"),
		drops:      desc("drops_total", "Packets dropped by kbridge, by reason.", "reason"),
		parks:      desc("parks_total", "Times the worker blocked in epoll."),
		wakeups:    desc("wakeups_total", "Parks ended by the app's kick or kernel data."),
		timeouts:   desc("park_timeouts_total", "Parks ended by their timeout."),
		sleeps:     desc("sleeps_total", "Precise sleeps (adaptive backoff, fixed interval, policed_sleep)."),
		spin:       desc("spin_seconds_total", "Time the worker polled with nothing to move."),
		residence:  desc("residence_seconds", "Time from the app's enqueue to the TAP write."),
		mode:       desc("policy_mode", "The polling policy in force (1 for the active mode).", "mode"),
		appKicks:   desc("app_kicks_total", "Eventfd writes by the app to wake a parked worker (ring mode)."),
		appDropped: desc("app_to_kernel_dropped_total", "Packets the app freed because the to_kernel ring was full (ring mode)."),
		canKick:    desc("wakeup_registered", "1 when the app holds the worker's eventfd."),
		coppPackets: desc("copp_packets_total", "Frames toward the kernel by control-plane class ("+strings.Join(copp.ClassNames[:], ", ")+
			") and what its policer did: passed or policed (freed before a TAP write); while copp.enabled is on.", "class", "verdict"),
		coppUnwanted: desc("copp_unwanted_total", "Frames toward the kernel classed unwanted (TCP or UDP for one of the "+
			"host's own addresses, to a port no socket holds), by reason: udp, tcp_syn, tcp; passed or policed as the "+
			"class unwanted.", "reason"),
		coppUnparsed: desc("copp_unparsed_total", "Frames whose headers the classifier could not read to their end, "+
			"classed default, by reason: truncated, malformed, deep_ipv6_extensions.", "reason"),
		coppRoomDropped: desc("copp_room_dropped_total", "Frames freed for want of room in the app's room, by direction (to_kernel: "+
			"the app's to_kernel ring, mode ring; from_kernel: the from_kernel ring or the app's RX vring) and class.", "direction", "class"),
		coppReserved: desc("copp_reserved_total", "Control and neighbour frames taken into the control plane's reserve of the app's room, "+
			"by direction.", "direction"),
		coppPolicing: desc("copp_policing", "1 while the class's policer refused a frame within the last second.", "class"),
		poolInUse: prometheus.NewDesc("kbridge_mempool_in_use", "Mbufs of the app's mempool in use (absent for an app of "+
			"kbridge.h version 7, whose pool kbridge never calls).", nil, cl),
		sockFilter: prometheus.NewDesc("kbridge_copp_sockets_filter", "1 while the protocol's frames are judged by the "+
			"host's sockets (copp.unwanted), 0 while they are not: kbridge stats' sockets says why.", []string{"protocol"}, cl),
		sockReadings: prometheus.NewDesc("kbridge_copp_sockets_readings_total", "Readings of the host's sockets, by "+
			"result: ok (published to the burst core) or error.", []string{"result"}, cl),
		recovery: prometheus.NewDesc("kbridge_takeover_recovered_total", "What this kbridge put right of a killed predecessor "+
			"when it started, by what: held_to_kernel_freed and held_from_kernel_freed (mbufs its held record named), "+
			"to_kernel_reclaimed (entries it had claimed and not released, dequeued again), to_kernel_freed (mbufs it had "+
			"dequeued and not recorded), from_kernel_discarded (slots it had reserved and not published), from_kernel_freed "+
			"(mbufs of that enqueue); for an app of kbridge.h version 7 fresh_reclaimed, fresh_freed, spent_discarded and "+
			"spent_freed, the same of its fresh and spent rings, and what is freed goes to its spent ring (ring mode).", []string{"what"}, cl),
		adopted: prometheus.NewDesc("kbridge_interface_adopted", "1 when this kbridge adopted its interface rather than "+
			"made it, by how: handed_over (--takeover), fd_store (systemd's, across a restart), persistent (interface.on_stop: keep), taken_back (a takeover not confirmed).",
			[]string{"how"}, cl),
		backlog: prometheus.NewDesc("kbridge_adopted_backlog_frames_total", "Frames an adopted interface's queues held "+
			"when it was adopted (sent by the kernel while no kbridge read them), delivered since.", nil, cl),
		carrierRestored: prometheus.NewDesc("kbridge_carrier_restored_total", "Times kbridge set the interface's carrier "+
			"back after something else turned it (TUNSETCARRIER from another queue, ip link set carrier).", nil, cl),
		ealAttachRetries: prometheus.NewDesc("kbridge_eal_attach_retries_total", "Starts of EAL this kbridge made before the one "+
			"that attached, each refused because something of its own sat at one of the app's memory addresses, and followed by "+
			"an exec of kbridge for a fresh layout (ring mode).", nil, cl),
	}
	c.offload = make(map[string]*prometheus.Desc, len(offloadMetrics))
	byName := map[string]*prometheus.Desc{}
	for event, m := range offloadMetrics {
		if byName[m.name] == nil {
			var labels []string
			if m.direction != "" {
				labels = []string{"direction"}
			}
			help := m.help
			if help == "" { // the metric's other event has it
				help = offloadMetrics["csum_completed_from_kernel"].help
			}
			byName[m.name] = desc(m.name, help, labels...)
		}
		c.offload[event] = byName[m.name]
	}
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.drops, c.parks, c.wakeups, c.timeouts,
		c.sleeps, c.spin, c.residence, c.mode, c.appKicks, c.appDropped, c.canKick, c.poolInUse, c.recovery,
		c.coppPackets, c.coppUnparsed, c.adopted, c.backlog, c.coppRoomDropped, c.coppReserved, c.coppPolicing, c.carrierRestored,
		c.coppUnwanted, c.sockFilter, c.sockReadings, c.ealAttachRetries} {
		ch <- d
	}
	seen := map[*prometheus.Desc]bool{}
	for _, d := range c.offload {
		if !seen[d] {
			seen[d] = true
			ch <- d
		}
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.d.Snapshot()
	if st.PoolInUse >= 0 { // -1: not read (kbridge.h version 7)
		ch <- prometheus.MustNewConstMetric(c.poolInUse, prometheus.GaugeValue, float64(st.PoolInUse))
	}
	ch <- prometheus.MustNewConstMetric(c.carrierRestored, prometheus.CounterValue, float64(st.CarrierRestored))
	if a := st.Adopted; a != nil {
		how := adoptedHow[a.How]
		if how == "" {
			how = "other"
		}
		ch <- prometheus.MustNewConstMetric(c.adopted, prometheus.GaugeValue, 1, how)
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.CounterValue, float64(a.Backlog))
	}
	if so := st.Sockets; so != nil {
		for proto, state := range map[string]string{"tcp": so.TCP, "udp": so.UDP} {
			on := 0.0
			if state == sockOn {
				on = 1
			}
			ch <- prometheus.MustNewConstMetric(c.sockFilter, prometheus.GaugeValue, on, proto)
		}
		ch <- prometheus.MustNewConstMetric(c.sockReadings, prometheus.CounterValue, float64(so.Readings), "ok")
		ch <- prometheus.MustNewConstMetric(c.sockReadings, prometheus.CounterValue, float64(so.Errors), "error")
	}
	if r := st.Recovery; r != nil {
		ch <- prometheus.MustNewConstMetric(c.ealAttachRetries, prometheus.CounterValue, float64(st.EALAttachRetries))
		for _, v := range []struct {
			what string
			n    int
		}{
			{"held_to_kernel_freed", r.HeldToKernel}, {"held_from_kernel_freed", r.HeldFromKernel},
			{"to_kernel_reclaimed", r.Rings.ToKernelReclaimed}, {"to_kernel_freed", r.Rings.ToKernelFreed},
			{"from_kernel_discarded", r.Rings.FromKernelDiscarded}, {"from_kernel_freed", r.Rings.FromKernelFreed},
			{"fresh_reclaimed", r.Rings.FreshReclaimed}, {"fresh_freed", r.Rings.FreshFreed},
			{"spent_discarded", r.Rings.SpentDiscarded}, {"spent_freed", r.Rings.SpentFreed},
		} {
			ch <- prometheus.MustNewConstMetric(c.recovery, prometheus.CounterValue, float64(v.n), v.what)
		}
	}
	for _, q := range st.Queues {
		id := strconv.Itoa(q.Queue)
		counter := func(d *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{id}, labels...)...)
		}
		counter(c.packets, q.ToKernelPackets, "to_kernel")
		counter(c.packets, q.FromKernelPackets, "from_kernel")
		counter(c.bytes, q.ToKernelBytes, "to_kernel")
		counter(c.bytes, q.FromKernelBytes, "from_kernel")
		for reason, v := range q.Drops {
			counter(c.drops, v, reason)
		}
		counter(c.parks, q.Parks)
		counter(c.wakeups, q.Wakeups)
		counter(c.timeouts, q.Timeouts)
		counter(c.sleeps, q.Sleeps)
		if q.App != nil { // ring mode: what the app counts
			counter(c.appKicks, q.App.Kicks)
			counter(c.appDropped, q.App.ToKernelDropped)
		}
		for _, e := range q.Offload.Events() {
			if m := offloadMetrics[e.Name]; m.direction != "" {
				counter(c.offload[e.Name], e.Value, m.direction)
			} else if d := c.offload[e.Name]; d != nil {
				counter(d, e.Value)
			}
		}
		if cs := q.CoPP; cs != nil {
			for k, name := range copp.ClassNames {
				counter(c.coppPackets, cs.Passed[k], name, "passed")
				counter(c.coppPackets, cs.Policed[k], name, "policed")
			}
			for k, v := range cs.Unparsed[copp.Parsed+1:] {
				counter(c.coppUnparsed, v, copp.WhyNames[copp.Parsed+1+k])
			}
			for k, v := range cs.Unwanted {
				counter(c.coppUnwanted, v, copp.UnwantedWhyNames[k])
			}
			c.collectRoom(ch, id, cs)
		}
		ch <- prometheus.MustNewConstMetric(c.spin, prometheus.CounterValue, float64(q.SpinNanos)/1e9, id)
		kick := 0.0
		if q.CanKick {
			kick = 1
		}
		ch <- prometheus.MustNewConstMetric(c.canKick, prometheus.GaugeValue, kick, id)
		for _, m := range policy.Modes {
			v := 0.0
			if string(m) == q.Mode {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.mode, prometheus.GaugeValue, v, id, string(m))
		}
		if len(q.Residence) > 0 {
			buckets := make(map[float64]uint64, len(q.Residence))
			var n uint64
			// The last bucket is open-ended: it only counts toward +Inf.
			for i, v := range q.Residence[:len(q.Residence)-1] {
				n += v
				buckets[float64(st.ResidenceBoundsNs[i])/1e9] = n
			}
			n += q.Residence[len(q.Residence)-1]
			ch <- prometheus.MustNewConstHistogram(c.residence, n, 0, buckets, id)
		}
	}
}

// NewRegistry returns what /metrics serves: the runner's collector c,
// kbridge_build_info (1, labelled with kbridge's version and the DPDK it
// was built against) and client_golang's Go and process collectors
// (go_*, process_*).
func NewRegistry(c prometheus.Collector, version string) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "kbridge_build_info",
		Help:        "1, labelled with kbridge's version and the DPDK it was built against (mode ring serves an app on that DPDK only).",
		ConstLabels: prometheus.Labels{"version": version, "dpdk": ring.BuiltWith().String()},
	})
	info.Set(1)
	for _, col := range []prometheus.Collector{c, info, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return reg, nil
}

// metricsRetry is how often StartMetrics tries again to listen.
var metricsRetry = 5 * time.Second

// StartMetrics serves g's metrics on addr (/metrics) until ctx ends. Its
// first attempt to listen is made before it returns, so a daemon that says
// it is ready after StartMetrics answers on addr when addr was free. An
// address it cannot listen on (busy, not there yet) is not fatal: it logs
// the error and tries again every 5 s, logging again only when the error
// changes. The function returned waits until serving ended.
func StartMetrics(ctx context.Context, addr string, g prometheus.Gatherer, log *slog.Logger) (wait func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	l, err := net.Listen("tcp", addr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lastErr := ""
		for {
			if err == nil {
				if lastErr != "" {
					log.Info("metrics: listening now", "addr", addr)
				}
				lastErr = ""
				if err = serveHTTP(ctx, l, mux); err == nil {
					return
				}
			}
			if msg := err.Error(); msg != lastErr {
				log.Error("metrics: not served; the bridge runs on, retrying every "+metricsRetry.String(),
					"key", "stats.metrics", "addr", addr, "err", err)
				lastErr = msg
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(metricsRetry):
			}
			l, err = net.Listen("tcp", addr)
		}
	}()
	return func() { <-done }
}

// serveHTTP serves h on l until ctx ends (nil) or serving fails.
func serveHTTP(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	err := srv.Serve(l)
	if ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// collectRoom exports one queue's reserve counters and which classes are
// being policed.
func (c *collector) collectRoom(ch chan<- prometheus.Metric, id string, cs *copp.Snapshot) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{id}, labels...)...)
	}
	for k, name := range copp.ClassNames {
		counter(c.coppRoomDropped, cs.ToKernelRoom[k], "to_kernel", name)
		counter(c.coppRoomDropped, cs.FromKernelRoom[k], "from_kernel", name)
		on := 0.0
		if slices.Contains(cs.Policing, name) {
			on = 1
		}
		ch <- prometheus.MustNewConstMetric(c.coppPolicing, prometheus.GaugeValue, on, id, name)
	}
	// The reserve takes control and neighbour frames, counted together.
	counter(c.coppReserved, cs.ToKernelReserved, "to_kernel")
	counter(c.coppReserved, cs.FromKernelReserved, "from_kernel")
}

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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/policy"
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
	offload, recovery         *prometheus.Desc
	coppPackets, coppUnparsed *prometheus.Desc
	adopted, backlog          *prometheus.Desc
	coppRoom, coppPolicing    *prometheus.Desc
	coppUnwanted, sockFilter  *prometheus.Desc
	sockReadings              *prometheus.Desc
}

// snapshotter is a runner whose counters have the ring Status shape (*Ring,
// *Vhost).
type snapshotter interface{ Snapshot() Status }

func newCollector(d snapshotter) *collector {
	q := []string{"queue"}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("kbridge_"+name, help, append(q, labels...), nil)
	}
	return &collector{
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
		offload: desc("offload_total", "What the kernel side's offloads did, by event: merged_writes and merged_packets "+
			"(TCP segments coalesced into one GSO write), lro_writes (an app's LRO packets, in mode vhost its TSO packets, "+
			"written in GSO frames), lro_merged (those of them merged with other packets), split_reads and split_frames (kernel super-frames "+
			"cut into MTU frames), tso_to_app (super-frames handed whole to an app that declared TSO), "+
			"csum_completed_from_kernel (kernel frames whose partial checksum kbridge finished), "+
			"csum_completed_to_kernel (app packets whose partial checksum kbridge finished, mode vhost), "+
			"fallbacks (merged writes the kernel refused, redone frame by frame), split_writes and split_write_frames "+
			"(app LRO/TSO packets cut into MTU frames in software, and the frames), coalesce_packets and coalesce_writes "+
			"(app packets the coalescer saw, writes it planned), coalesce_bad_csum (app packets with a wrong IPv4 or TCP "+
			"checksum, written alone for the kernel to drop), coalesce_csum_trusted (app packets that came with their "+
			"checksums verified, by the app's NIC or by kbridge completing them, and were not checked again).", "event"),
		coppPackets: desc("copp_packets_total", "Frames toward the kernel by control-plane class (control, neighbor, "+
			"management, default, management_syn, bgp, bfd, link, unwanted) and what its policer did: passed or policed "+
			"(freed before a TAP write); while copp.enabled is on.", "class", "verdict"),
		coppUnwanted: desc("copp_unwanted_total", "Frames toward the kernel classed unwanted (TCP or UDP for one of the "+
			"host's own addresses, to a port no socket holds), by reason: udp, tcp_syn, tcp; passed or policed as the "+
			"class unwanted.", "reason"),
		coppUnparsed: desc("copp_unparsed_total", "Frames whose headers the classifier could not read to their end, "+
			"classed default, by reason: truncated, malformed, deep_ipv6_extensions.", "reason"),
		coppRoom: desc("copp_room_total", "The control plane's reserve of the app's room, by direction (to_kernel: the app's "+
			"to_kernel ring, mode ring; from_kernel: the from_kernel ring or the app's RX vring) and class: what = reserved "+
			"(control and neighbor frames taken into it) or dropped (frames freed for want of room).", "direction", "class", "what"),
		coppPolicing: desc("copp_policing", "1 while the class's policer refused a frame within the last second.", "class"),
		poolInUse:    prometheus.NewDesc("kbridge_mempool_in_use", "Mbufs of the app's mempool in use.", nil, nil),
		sockFilter: prometheus.NewDesc("kbridge_copp_sockets_filter", "1 while the protocol's frames are judged by the "+
			"host's sockets (copp.unwanted), 0 while they are not: kbridge stats' sockets says why.", []string{"protocol"}, nil),
		sockReadings: prometheus.NewDesc("kbridge_copp_sockets_readings_total", "Readings of the host's sockets, by "+
			"result: ok (published to the burst core) or error.", []string{"result"}, nil),
		recovery: prometheus.NewDesc("kbridge_takeover_recovered_total", "What this kbridge put right of a killed predecessor "+
			"when it started, by what: held_to_kernel_freed and held_from_kernel_freed (mbufs its held record named), "+
			"to_kernel_reclaimed (entries it had claimed and not released, dequeued again), to_kernel_freed (mbufs it had "+
			"dequeued and not recorded), from_kernel_discarded (slots it had reserved and not published), from_kernel_freed "+
			"(mbufs of that enqueue) (ring mode).", []string{"what"}, nil),
		adopted: prometheus.NewDesc("kbridge_interface_adopted", "1 when this kbridge adopted its interface rather than "+
			"made it, by how (handed over, kept in systemd's fd store, left persistent) and the pid that served it before.",
			[]string{"how", "from_pid"}, nil),
		backlog: prometheus.NewDesc("kbridge_adopted_backlog_frames_total", "Frames an adopted interface's queues held "+
			"when it was adopted (sent by the kernel while no kbridge read them), delivered since.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.drops, c.parks, c.wakeups, c.timeouts,
		c.sleeps, c.spin, c.residence, c.mode, c.appKicks, c.appDropped, c.canKick, c.poolInUse, c.offload, c.recovery,
		c.coppPackets, c.coppUnparsed, c.adopted, c.backlog, c.coppRoom, c.coppPolicing, c.coppUnwanted,
		c.sockFilter, c.sockReadings} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.d.Snapshot()
	ch <- prometheus.MustNewConstMetric(c.poolInUse, prometheus.GaugeValue, float64(st.PoolInUse))
	if a := st.Adopted; a != nil {
		ch <- prometheus.MustNewConstMetric(c.adopted, prometheus.GaugeValue, 1, a.How, strconv.Itoa(a.From))
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
		for _, v := range []struct {
			what string
			n    int
		}{
			{"held_to_kernel_freed", r.HeldToKernel}, {"held_from_kernel_freed", r.HeldFromKernel},
			{"to_kernel_reclaimed", r.Rings.ToKernelReclaimed}, {"to_kernel_freed", r.Rings.ToKernelFreed},
			{"from_kernel_discarded", r.Rings.FromKernelDiscarded}, {"from_kernel_freed", r.Rings.FromKernelFreed},
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
			counter(c.offload, e.Value, e.Name)
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

// metricsRetry is how often ServeMetrics tries again to listen.
var metricsRetry = 5 * time.Second

// ServeMetrics serves the collector's metrics on addr (/metrics) until ctx
// ends. An address it cannot listen on (busy, not there yet) is not fatal:
// it logs the error and tries again every 5 s, logging again only when the
// error changes. It returns only when ctx ends, or at once if the collector
// cannot be registered.
func ServeMetrics(ctx context.Context, addr string, c prometheus.Collector, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	lastErr := ""
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			if lastErr != "" {
				log.Info("metrics: listening now", "addr", addr)
			}
			lastErr = ""
			err = serveHTTP(ctx, l, mux)
			if err == nil {
				return nil
			}
		}
		if msg := err.Error(); msg != lastErr {
			log.Error("metrics: not served; the bridge runs on, retrying every "+metricsRetry.String(),
				"key", "stats.metrics", "addr", addr, "err", err)
			lastErr = msg
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(metricsRetry):
		}
	}
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
	room := func(dir string, v uint64, class, what string) {
		ch <- prometheus.MustNewConstMetric(c.coppRoom, prometheus.CounterValue, float64(v), id, dir, class, what)
	}
	for k, name := range copp.ClassNames {
		room("to_kernel", cs.ToKernelRoom[k], name, "dropped")
		room("from_kernel", cs.FromKernelRoom[k], name, "dropped")
		on := 0.0
		if slices.Contains(cs.Policing, name) {
			on = 1
		}
		ch <- prometheus.MustNewConstMetric(c.coppPolicing, prometheus.GaugeValue, on, id, name)
	}
	// The reserve takes control and neighbour frames, counted together.
	room("to_kernel", cs.ToKernelReserved, "control_or_neighbor", "reserved")
	room("from_kernel", cs.FromKernelReserved, "control_or_neighbor", "reserved")
}

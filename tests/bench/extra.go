package main

// The workloads the targets add to the original set: the HTTP
// keep-alive server and wrk's output, the NFS bulk read, CPU per Gbit/s, the
// placement of every forwarder's threads, and the test bed's own ceiling
// (testpmd alone on kbt-nic, no kernel side).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

const httpPort = "8080"

// httpBody is what the bench's HTTP server answers: small, fixed.
var httpBody = []byte("kbridge test bed: hello\n")

// serveHTTP is `kbt-bench -serve-http ADDR`: a keep-alive HTTP server for wrk,
// started in kbt-peer by the benchmark.
func serveHTTP(addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(httpBody)))
		_, _ = w.Write(httpBody)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	return srv.ListenAndServe()
}

// HTTPStats is what wrk reports for one run.
type HTTPStats struct {
	P50, P99 float64 // round trip, us
	RPS      float64 // requests per second
	Requests int
	Errors   string // socket errors or non-2xx responses, if any
}

var (
	reWrkPct  = regexp.MustCompile(`^\s*(50|75|90|99)%\s+([0-9.]+)(us|ms|s|m)\s*$`)
	reWrkRPS  = regexp.MustCompile(`^Requests/sec:\s*([0-9.]+)`)
	reWrkReqs = regexp.MustCompile(`^\s*(\d+) requests in`)
	reWrkErr  = regexp.MustCompile(`^\s*(Socket errors:.*|Non-2xx or 3xx responses:.*)$`)
)

// parseWrk reads `wrk --latency` output.
func parseWrk(out string) (HTTPStats, error) {
	var h HTTPStats
	pct := map[string]float64{}
	var errs []string
	for _, line := range strings.Split(out, "\n") {
		if m := reWrkPct.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			pct[m[1]] = v * map[string]float64{"us": 1, "ms": 1e3, "s": 1e6, "m": 60e6}[m[3]]
		} else if m := reWrkRPS.FindStringSubmatch(line); m != nil {
			h.RPS, _ = strconv.ParseFloat(m[1], 64)
		} else if m := reWrkReqs.FindStringSubmatch(line); m != nil {
			h.Requests, _ = strconv.Atoi(m[1])
		} else if m := reWrkErr.FindStringSubmatch(line); m != nil {
			errs = append(errs, strings.TrimSpace(m[1]))
		}
	}
	h.Errors = strings.Join(errs, "; ")
	p50, ok1 := pct["50"]
	p99, ok2 := pct["99"]
	if !ok1 || !ok2 {
		return h, fmt.Errorf("no latency distribution in wrk output (last line: %q)", harness.LastLine(out))
	}
	h.P50, h.P99 = p50, p99
	if h.Requests == 0 || h.RPS == 0 {
		return h, fmt.Errorf("wrk completed no requests (%s)", or(h.Errors, harness.LastLine(out)))
	}
	return h, nil
}

// cpuPerGbit is a forwarder's CPU (% of one core) per Gbit/s moved; NaN
// without a rate or a CPU figure.
func cpuPerGbit(cpuPct, gbps float64) float64 {
	if gbps <= 0 || cpuPct < 0 || math.IsNaN(cpuPct) {
		return math.NaN()
	}
	return cpuPct / gbps
}

// mbPerSec is a transfer rate in MB/s (10^6 bytes).
func mbPerSec(bytes int64, sec float64) float64 {
	if sec <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / sec
}

// ---- thread placement --------------------------------------------------------

// Thread is one thread of a process and the CPUs it may run on.
type Thread struct{ Name, CPUs string }

// threadsOf reads /proc/PID/task/*/{comm,status}.
func threadsOf(pid int) ([]Thread, error) {
	if pid <= 0 {
		return nil, errors.New("no pid")
	}
	dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	if err != nil || len(dirs) == 0 {
		return nil, fmt.Errorf("pid %d: no threads", pid)
	}
	var ts []Thread
	for _, d := range dirs {
		comm, err1 := os.ReadFile(filepath.Join(d, "comm"))
		status, err2 := os.ReadFile(filepath.Join(d, "status"))
		if err1 != nil || err2 != nil {
			continue
		}
		ts = append(ts, Thread{Name: strings.TrimSpace(string(comm)), CPUs: cpusAllowed(string(status))})
	}
	return ts, nil
}

// cpusAllowed extracts Cpus_allowed_list from /proc/.../status.
func cpusAllowed(status string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// formatPlacement groups threads by CPU list: "CPU 1: lcore-worker-1; CPU 0:
// dpdk-testpmd, eal-intr-thread". Repeated names are counted ("kbridge x7");
// groups come in order of first appearance.
func formatPlacement(ts []Thread) string {
	if len(ts) == 0 {
		return "-"
	}
	var order []string
	names := map[string][]string{}
	count := map[string]map[string]int{}
	for _, t := range ts {
		if _, ok := names[t.CPUs]; !ok {
			order = append(order, t.CPUs)
			count[t.CPUs] = map[string]int{}
		}
		if count[t.CPUs][t.Name] == 0 {
			names[t.CPUs] = append(names[t.CPUs], t.Name)
		}
		count[t.CPUs][t.Name]++
	}
	var parts []string
	for _, c := range order {
		var ns []string
		for _, n := range names[c] {
			if k := count[c][n]; k > 1 {
				ns = append(ns, fmt.Sprintf("%s x%d", n, k))
			} else {
				ns = append(ns, n)
			}
		}
		parts = append(parts, fmt.Sprintf("CPU %s: %s", c, strings.Join(ns, ", ")))
	}
	return strings.Join(parts, "; ")
}

// Placement is where a forwarder's pieces ran, read from /proc during the run.
type Placement struct {
	Forwarder string // the forwarder process's threads (kbridge or testpmd)
	App       string // the reference app's threads (kbridge beds)
	Clients   string // taskset of the clients
	Servers   string // the peer's servers
}

func placementOf(pid int) string {
	ts, err := threadsOf(pid)
	if err != nil {
		return "?"
	}
	return formatPlacement(ts)
}

// serverPlacement lists the peer's servers and their CPUs: "sockperf 0,
// iperf3 0, ganesha.nfsd 0".
func serverPlacement(pids map[string]int) string {
	var names []string
	for n := range pids {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[n]))
		if err != nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", n, cpusAllowed(string(data))))
	}
	if len(parts) == 0 {
		return "?"
	}
	return strings.Join(parts, ", ")
}

// ---- the bed's ceiling ------------------------------------------------------

// Ceiling is the test bed's own limit: testpmd alone on kbt-nic through
// net_af_packet, no kernel side in kbt-dut.
type Ceiling struct {
	Ping     Latency // 5tswap: ping RTT / 2 (us)
	TxGbps   float64 // txonly: received by the peer
	TxMpps   float64
	TxCPU    float64 // testpmd's CPU during txonly
	PingErr  string
	TxErr    string
	Measured bool
}

var rePingTime = regexp.MustCompile(`icmp_seq=\d+ .*time=([0-9.]+) ms`)

// parsePing returns the RTTs (us) of `ping` output, one per reply line.
func parsePing(out string) ([]float64, error) {
	var rtt []float64
	for _, line := range strings.Split(out, "\n") {
		if m := rePingTime.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			rtt = append(rtt, v*1000)
		}
	}
	if len(rtt) == 0 {
		return nil, fmt.Errorf("no ping replies (last line: %q)", harness.LastLine(out))
	}
	return rtt, nil
}

// halfRTT summarises RTTs (us) as one-way figures, like sockperf's.
func halfRTT(rtt []float64) Latency {
	half := make([]float64, len(rtt))
	mx := 0.0
	for i, v := range rtt {
		half[i] = v / 2
		mx = math.Max(mx, half[i])
	}
	return Latency{P50: quantile(half, 0.5), P99: quantile(half, 0.99), P999: quantile(half, 0.999), Max: mx, N: len(half)}
}

// linkRx parses `ip -j -s link show DEV`: received bytes and packets.
func linkRx(out []byte) (bytes, packets uint64, err error) {
	var links []struct {
		Stats64 struct {
			Rx struct {
				Bytes   uint64 `json:"bytes"`
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return 0, 0, fmt.Errorf("ip -j -s link: %v", err)
	}
	if len(links) != 1 {
		return 0, 0, fmt.Errorf("ip -j -s link: %d links", len(links))
	}
	return links[0].Stats64.Rx.Bytes, links[0].Stats64.Rx.Packets, nil
}

// ceiling measures the bed with testpmd alone on kbt-nic: 5tswap bounces the
// peer's pings back (each ping crosses testpmd twice: the request comes back
// to the peer as a request from 198.18.0.2, the peer's reply comes back as the
// reply), then txonly floods the peer, whose kbt-wire counters give the rate.
func (rn *Runner) ceiling(ctx context.Context, f Forwarder, r *Result) {
	b := rn.bed
	c := &Ceiling{Measured: true}
	r.Ceiling = c
	stop := func() { _, _ = b.sh(context.Background(), time.Minute, nil, "testpmd-forwarder.sh", "stop") }
	start := func(mode string) error {
		stop()
		b.fwdPID = 0
		if _, err := b.sh(ctx, 2*time.Minute, []string{"KBT_TESTPMD_FWD=" + mode}, "testpmd-forwarder.sh", "start"); err != nil {
			return err
		}
		var err error
		b.fwdPID, err = readPID("testpmd")
		if err == nil {
			r.Place.Forwarder = placementOf(b.fwdPID)
		}
		return err
	}
	defer stop()

	// 5tswap: ping round trips.
	rn.log("%s: testpmd 5tswap on kbt-nic alone, ping from the peer ...", f.Name)
	c.PingErr = errStr(func() error {
		if err := start("5tswap"); err != nil {
			return err
		}
		mac, err := harness.Output(ctx, 5*time.Second, nil, "ip", "netns", "exec", nsDUT, "cat", "/sys/class/net/kbt-nic/address")
		if err != nil {
			return err
		}
		// 5tswap would turn an ARP request into garbage: a static entry for .2.
		if _, err := harness.Output(ctx, 5*time.Second, nil, "ip", "-n", "kbt-peer", "neigh", "replace", dutIP, "lladdr",
			strings.TrimSpace(string(mac)), "dev", "kbt-wire", "nud", "permanent"); err != nil {
			return err
		}
		defer harness.Output(context.Background(), 5*time.Second, nil, "ip", "-n", "kbt-peer", "neigh", "del", dutIP, "dev", "kbt-wire")
		n := int(rn.d.PP.Seconds() * 400)
		out, err := harness.Output(ctx, rn.d.PP+30*time.Second, nil, "ip", b.pin("kbt-peer", "ping", "-n", "-c", fmt.Sprint(n), "-i", "0.002", "-W", "1", dutIP)...)
		_ = os.WriteFile(filepath.Join(rn.rawDir, "bed-ceiling-ping.out"), out, 0o644)
		rtt, perr := parsePing(string(out))
		if perr != nil {
			return errors.Join(err, perr)
		}
		c.Ping = halfRTT(rtt)
		if len(rtt) < n*9/10 {
			return fmt.Errorf("only %d of %d pings answered", len(rtt), n)
		}
		return nil
	}())
	rn.log("%s: ping through 5tswap: p50 %.1f us, p99 %.1f us one-way%s", f.Name, c.Ping.P50, c.Ping.P99, prefixed(" ", c.PingErr))

	// txonly: what net_af_packet can push to the peer.
	rn.log("%s: testpmd txonly on kbt-nic alone ...", f.Name)
	c.TxErr = errStr(func() error {
		if err := start("txonly"); err != nil {
			return err
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
		rx := func() (uint64, uint64, error) {
			out, err := harness.Output(ctx, 5*time.Second, nil, "ip", "-j", "-s", "-n", "kbt-peer", "link", "show", "dev", "kbt-wire")
			if err != nil {
				return 0, 0, err
			}
			return linkRx(out)
		}
		b0, p0, err := rx()
		if err != nil {
			return err
		}
		t0 := time.Now()
		ticks0, _ := procTicks(b.fwdPID)
		if err := sleepCtx(ctx, rn.d.Iperf); err != nil {
			return err
		}
		b1, p1, err := rx()
		ticks1, _ := procTicks(b.fwdPID)
		wall := time.Since(t0).Seconds()
		if err != nil {
			return err
		}
		c.TxGbps = float64(b1-b0) * 8 / wall / 1e9
		c.TxMpps = float64(p1-p0) / wall / 1e6
		c.TxCPU = cpuPercent(ticks1-ticks0, rn.clkTck, wall)
		if p1 == p0 {
			return errors.New("the peer received nothing")
		}
		return nil
	}())
	rn.log("%s: txonly: %.2f Gbit/s, %.3f Mpps at the peer%s", f.Name, c.TxGbps, c.TxMpps, prefixed(" ", c.TxErr))
	b.fwdPID = 0
}

func errStr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

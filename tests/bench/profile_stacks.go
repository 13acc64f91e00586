package main

// The stacks of `make profile`: `perf script` text read into samples, each
// sample put in one share (kbridge's own code, its syscalls, kb0's TCP/IP,
// the clients, the peer, softirq, the bed, idle, other), and the stacks
// folded into "frame;frame;...;leaf count" lines for the flame graph.

import (
	"bufio"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Frame is one entry of a call chain.
type Frame struct {
	Sym    string
	Kernel bool
}

// Sample is one perf sample: who ran and its call chain, leaf first.
type Sample struct {
	Comm     string
	PID, TID int
	Period   uint64 // cpu-clock: nanoseconds the sample stands for
	Frames   []Frame
}

// `comm pid/tid [cpu] period` (perf script -F comm,pid,tid,cpu,period,ip,sym,dso);
// a comm may hold spaces, so the numbers are matched from the right.
// perf writes -1 for a sample whose task it could not name.
var sampleHead = regexp.MustCompile(`^(.*?)\s+(-?\d+)/(-?\d+)\s+\[\d+\]\s+(\d+)\s*$`)

// parsePerfScript reads `perf script -F comm,pid,tid,cpu,period,ip,sym,dso`
// output of a recording with call graphs.
func parsePerfScript(text string) ([]Sample, error) {
	var out []Sample
	var cur *Sample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			cur = nil
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			m := sampleHead.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("perf script: not a sample header: %q", line)
			}
			pid, _ := strconv.Atoi(m[2])
			tid, _ := strconv.Atoi(m[3])
			per, _ := strconv.ParseUint(m[4], 10, 64)
			out = append(out, Sample{Comm: strings.TrimSpace(m[1]), PID: pid, TID: tid, Period: per})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue
		}
		cur.Frames = append(cur.Frames, parseFrame(strings.TrimSpace(line)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("perf script: no samples")
	}
	return out, nil
}

// parseFrame reads "ffffffff8225f8ab pv_native_safe_halt ([kernel.kallsyms])".
func parseFrame(s string) Frame {
	addr, rest, _ := strings.Cut(s, " ")
	sym, dso := rest, ""
	if i := strings.LastIndex(rest, " ("); i >= 0 && strings.HasSuffix(rest, ")") {
		sym, dso = rest[:i], rest[i+2:len(rest)-1]
	}
	sym = strings.TrimSpace(sym)
	if sym == "" || sym == "[unknown]" {
		sym = "[" + shortDSO(dso) + "]"
	}
	kernel := strings.HasPrefix(dso, "[kernel") || strings.HasPrefix(addr, "ffffffff")
	return Frame{Sym: sym, Kernel: kernel}
}

func shortDSO(dso string) string {
	if dso == "" || dso == "[unknown]" {
		return "unknown"
	}
	if i := strings.LastIndexByte(dso, '/'); i >= 0 {
		return dso[i+1:]
	}
	return dso
}

// The shares, in table order.
const (
	shKbUser  = "kbridge: own code"
	shKbSys   = "kbridge: syscalls"
	shTCP     = "kernel TCP/IP for kb0"
	shClient  = "clients in kbt-dut"
	shPeer    = "peer side (kbt-peer)"
	shSoftNIC = "softirq: veth, AF_PACKET"
	shSoftirq = "softirq: the rest"
	shBed     = "bed: reference app"
	shIdle    = "idle"
	shOther   = "other"
)

var shareOrder = []string{shKbUser, shKbSys, shTCP, shClient, shPeer, shSoftNIC, shSoftirq, shBed, shIdle, shOther}

// shareText says what each share holds, for the report.
var shareText = map[string]string{
	shKbUser:  "kbridge's user code: Go, its C, the DPDK libraries in its process",
	shKbSys:   "the kernel under kbridge's syscalls except TCP/IP: tun read/write, GSO/GRO, epoll, eventfd, futex, scheduling",
	shTCP:     "the kernel's TCP/IP for kb0 (innermost network frame tcp_/ip_/inet_/sock_/netif_receive_skb) in kbridge's writes and the clients' syscalls",
	shClient:  "the clients in kbt-dut (iperf3 -c, nfs-cat, nfs-ls): user code and their kernel time other than TCP/IP (tun transmit, pipes, scheduling)",
	shPeer:    "processes of kbt-peer (iperf3 server, ganesha NFS server): user and kernel, their TCP/IP included",
	shSoftNIC: "softirq in any task whose innermost network frame is veth's or AF_PACKET's: the bed's emulated NIC (kbt-wire, kbt-nic and the app's net_af_packet ring)",
	shSoftirq: "the other softirq work in any task: TCP/IP receive of either side, timers, RCU",
	shBed:     "the reference DPDK app's threads on CPU 0 (EAL interrupt and control threads; its lcore is on CPU 1)",
	shIdle:    "the idle task with no interrupt work on the stack",
	shOther:   "everything else: kernel threads, interrupts other than softirq, perf itself, other users' processes, the bench's shells",
}

// Who identifies the processes of the bed during one recording.
type Who struct {
	Kbridge, App int
	Peer         map[int]bool    // kbt-peer's servers
	ClientComms  map[string]bool // clients started in kbt-dut (their pids are short-lived)
}

var softirqFrames = map[string]bool{"handle_softirqs": true, "__do_softirq": true, "do_softirq": true, "run_ksoftirqd": true, "net_rx_action": true}

var irqFrames = map[string]bool{"asm_sysvec_apic_timer_interrupt": true, "sysvec_apic_timer_interrupt": true, "asm_common_interrupt": true,
	"common_interrupt": true, "__sysvec_apic_timer_interrupt": true, "asm_sysvec_call_function_single": true, "sysvec_call_function_single": true,
	"asm_sysvec_reschedule_ipi": true, "sysvec_reschedule_ipi": true}

// classify puts a sample in one share. First match wins: the idle task,
// softirq anywhere, then by process, and inside kbridge or a client the
// innermost network frame decides between TCP/IP and the rest.
func (w Who) classify(s Sample) string {
	soft, irq := false, false
	for _, f := range s.Frames {
		if f.Kernel && softirqFrames[f.Sym] {
			soft = true
		}
		if f.Kernel && irqFrames[f.Sym] {
			irq = true
		}
	}
	switch {
	case soft && innermostLayer(s.Frames) == layerNIC:
		return shSoftNIC
	case soft:
		return shSoftirq
	case s.PID == 0 && irq:
		return shOther
	case s.PID == 0:
		return shIdle
	case s.PID == w.Kbridge && w.Kbridge != 0:
		if len(s.Frames) == 0 || !s.Frames[0].Kernel {
			return shKbUser
		}
		if innermostLayer(s.Frames) == layerTCPIP {
			return shTCP
		}
		return shKbSys
	case w.Peer[s.PID]:
		return shPeer
	case w.ClientComms[s.Comm]:
		if len(s.Frames) > 0 && s.Frames[0].Kernel && innermostLayer(s.Frames) == layerTCPIP {
			return shTCP
		}
		return shClient
	case s.PID == w.App && w.App != 0:
		return shBed
	}
	return shOther
}

// The network layers a kernel stack can be in.
const (
	layerNone  = iota
	layerTun   // tun and its offloads (GRO, GSO): kbridge's side of kb0
	layerNIC   // veth and AF_PACKET: the bed's emulated NIC
	layerTCPIP // the TCP/IP stack
)

// innermostLayer is the network layer of the innermost network frame of a
// kernel stack: a copy under tcp_recvmsg is TCP's, one under tun_get_user is
// tun's, one under tpacket_rcv AF_PACKET's; GRO/GSO helpers count as the
// offloads kbridge's syscalls drive.
func innermostLayer(fs []Frame) int {
	for _, f := range fs {
		if !f.Kernel {
			break
		}
		n := f.Sym
		switch {
		case strings.Contains(n, "gro_") || strings.Contains(n, "gso") || strings.HasPrefix(n, "skb_segment") || strings.HasPrefix(n, "tun_"):
			return layerTun
		case hasAnyPrefix(n, "veth_", "packet_", "tpacket_", "__packet_"):
			return layerNIC
		case hasAnyPrefix(n, "tcp", "__tcp", "ip_", "__ip_", "ip6_", "ipv6_", "inet", "__inet", "udp", "__udp", "sock_", "sk_", "__sk_",
			"__netif_receive_skb", "netif_receive_skb", "__dev_queue_xmit", "dev_queue_xmit", "neigh_", "nf_"):
			return layerTCPIP
		}
	}
	return layerNone
}

func hasAnyPrefix(s string, ps ...string) bool {
	for _, p := range ps {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Profile is one workload's samples, by share and folded.
type Profile struct {
	Workload string
	Total    uint64            // ns sampled on the CPU
	Wall     time.Duration     // the recorded window
	CPUs     string            // each CPU's busy and steal time over it (/proc/stat)
	Shares   map[string]uint64 // share -> ns
	Folded   map[string]uint64 // "share;comm;root;...;leaf" -> ns
}

// fold classifies and folds samples. The flame graph's first level is the
// share, the second the command, then the chain from its root to its leaf.
func fold(workload string, samples []Sample, w Who) *Profile {
	p := &Profile{Workload: workload, Shares: map[string]uint64{}, Folded: map[string]uint64{}}
	for _, s := range samples {
		sh := w.classify(s)
		p.Total += s.Period
		p.Shares[sh] += s.Period
		parts := make([]string, 0, len(s.Frames)+2)
		parts = append(parts, sh, commGroup(s.Comm))
		for i := len(s.Frames) - 1; i >= 0; i-- {
			f := strings.ReplaceAll(s.Frames[i].Sym, ";", ":")
			// A run of frames perf could not name ([unknown], [libc.so.6])
			// says nothing more than one of them and only makes the picture tall.
			if strings.HasPrefix(f, "[") && f == parts[len(parts)-1] {
				continue
			}
			parts = append(parts, f)
		}
		p.Folded[strings.Join(parts, ";")] += s.Period
	}
	return p
}

// commGroup merges per-CPU kernel thread names (kworker/0:1H-kblockd).
func commGroup(c string) string {
	for _, k := range []string{"kworker/", "ksoftirqd/", "migration/", "rcu_"} {
		if strings.HasPrefix(c, k) {
			return strings.TrimSuffix(k, "/") + "*"
		}
	}
	if c == "" {
		return "?"
	}
	return c
}

// Own returns a share in percent of the bed's own work: the samples that
// are neither idle nor other. It compares runs that other users' load made
// different.
func (p *Profile) Own(sh string) float64 {
	own := p.Total - p.Shares[shIdle] - p.Shares[shOther]
	if own == 0 || sh == shIdle || sh == shOther {
		return 0
	}
	return 100 * float64(p.Shares[sh]) / float64(own)
}

// Share returns a share in percent of the samples.
func (p *Profile) Share(sh string) float64 {
	if p.Total == 0 {
		return 0
	}
	return 100 * float64(p.Shares[sh]) / float64(p.Total)
}

// foldedText is the folded stacks, one "stack count" a line, sorted.
func (p *Profile) foldedText() string {
	keys := make([]string, 0, len(p.Folded))
	for k := range p.Folded {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s %d\n", k, p.Folded[k])
	}
	return sb.String()
}

// merge adds q's samples to p (rounds of the same workload pooled).
func (p *Profile) merge(q *Profile) {
	p.Total += q.Total
	p.Wall += q.Wall
	for k, v := range q.Shares {
		p.Shares[k] += v
	}
	for k, v := range q.Folded {
		p.Folded[k] += v
	}
}

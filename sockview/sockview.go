// Package sockview reads what the host's kernel would accept of the frames
// arriving on kbridge's interface, without a syscall per frame: the ports
// its TCP and UDP sockets hold (listening, connected, in TIME_WAIT), its own
// addresses (its local routes), its BGP sessions, and what on the host
// takes frames whatever their port (raw and packet sockets, NAT, IPVS).
// It reads them as ss and ip do, with netlink dumps (NETLINK_SOCK_DIAG:
// inet_diag, raw_diag, packet_diag; NETLINK_ROUTE; NETLINK_NETFILTER for
// nftables' chains) and two files of /proc (legacy iptables, IPVS), in the
// network namespace kbridge runs in, which is its interface's. kbridge
// reads a View every copp.unwanted.refresh and publishes it to the burst
// core (ring/burst_sockview.h), which classes frames no socket wants as
// unwanted. Pure Go: nothing here touches a packet or changes the host.
// See docs/ARCHITECTURE.md, "Control-plane protection".
package sockview

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// BGPPort is the port whose TCP connections are BGP sessions.
const BGPPort = 179

// Session is one of the host's TCP connections with BGPPort on one side,
// as the host sees it. IPv4-mapped IPv6 addresses are given as IPv4.
type Session struct {
	Local, Remote netip.AddrPort
}

// View is one reading.
type View struct {
	// TCP and UDP are the local ports some socket of that protocol holds,
	// in any state and on any address, sorted and each once: a frame to
	// one of the host's addresses and another port is refused by the
	// kernel (a RST, a port unreachable).
	TCP, UDP []uint16
	// Local are the host's own unicast address prefixes (RTN_LOCAL routes
	// of every table): the only destinations a frame may be judged
	// unwanted for. Frames the host forwards are never judged.
	Local []netip.Prefix
	// BGP are the host's BGP sessions.
	BGP []Session
	// Filters are the packet sockets on the interface whose filters the
	// burst core runs on a frame it would find unwanted (a frame one
	// would capture is kept).
	Filters []Filter
	// TCPOff and UDPOff, when set, say why that protocol's frames cannot
	// be judged by their port now: what on the host takes them without a
	// socket of their port. Empty: they can.
	TCPOff, UDPOff string
	// Sockets is how many TCP and UDP sockets were read.
	Sockets int
	// Walked: this reading walked the TCP connections (its TCP ports
	// and BGP sessions are the kernel's now, not the last walk's).
	Walked bool
}

// Filter is a packet socket's classic BPF program (struct sock_filter's)
// and the frames it gets: Proto ETH_P_ALL, ETH_P_IP or ETH_P_IPV6; Dgram:
// a SOCK_DGRAM socket, whose program sees a frame from its network header.
type Filter struct {
	Insns []Insn
	Proto uint16
	Dgram bool
}

// Insn is one classic BPF instruction.
type Insn struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// The most filters, and instructions of one, a view carries
// (ring/burst_sockview.h); a packet socket beyond them turns the judging off.
const (
	MaxFilters     = 8
	MaxFilterInsns = 128
)

// ErrRead wraps a reading that failed: the caller keeps no view.
var ErrRead = errors.New("sockview: cannot read the host's sockets")

// Reader reads Views; one goroutine at a time.
type Reader struct {
	diag, route *nlSocket
	nf          *nlSocket // NETLINK_NETFILTER, opened at the first reading
	// proc is where the network namespace's /proc files are read:
	// /proc/thread-self, the namespace of the thread that reads, as the
	// netlink sockets are the namespace of the thread that opened them
	// (kbridge's threads share one; a test's may not).
	proc string
	// nftables: false once the kernel said it has none.
	nftables bool
	// The last walk of the TCP connections: the ports it found, its BGP
	// sessions, when it ended and how long it took.
	walked   []uint16
	sessions []Session
	walkEnd  time.Time
	walkTook time.Duration
}

// WalkShare bounds the cost of walking the TCP connections: the kernel
// walks its whole established hash table for it, whose size follows the
// machine's memory rather than the sockets (6 ms on a 24 GB VM with a few
// dozen sockets), so a walk starts no sooner than WalkShare times its last
// duration after it, about 1 % of a CPU at most; listening sockets, UDP
// sockets, addresses and the rest are cheap and read every time.
const WalkShare = 100

// MaxWalkGap is the longest a reading goes without a walk. Sooner, a
// reading walks only when the caller saw a frame that a connection the
// last walk missed would explain (WalkDue): a host with no traffic through
// kbridge walks once every MaxWalkGap.
const MaxWalkGap = 10 * time.Second

// Open opens the netlink sockets a Reader reads with.
func Open() (*Reader, error) {
	diag, err := openNetlink(0x4) // NETLINK_SOCK_DIAG
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRead, err)
	}
	route, err := openNetlink(0x0) // NETLINK_ROUTE
	if err != nil {
		diag.close()
		return nil, fmt.Errorf("%w: %w", ErrRead, err)
	}
	return &Reader{diag: diag, route: route, proc: "/proc/thread-self", nftables: true}, nil
}

// Close closes the Reader's sockets.
func (r *Reader) Close() {
	r.diag.close()
	r.route.close()
	r.nf.close()
}

// WalkDue reports whether the next Read at now should walk the TCP
// connections: the first reading, one MaxWalkGap after the last walk, or
// one the caller says was missed (a frame since the last reading that a
// connection opened since the last walk would explain), bounded by
// WalkShare.
func (r *Reader) WalkDue(now time.Time, missed bool) bool {
	gap := now.Sub(r.walkEnd)
	return r.walkEnd.IsZero() || gap >= MaxWalkGap || missed && gap >= WalkShare*r.walkTook
}

// Read reads a View for the interfaces of indexes ifindexes (those whose
// packet sockets matter: a process's view serves every interface it
// bridges). With walk, it walks the TCP connections (every
// state: connected, TIME_WAIT, half-open) and keeps their ports and BGP
// sessions for the Reads that do not; without, it reads the listening TCP
// sockets and adds the last walk's.
func (r *Reader) Read(ifindexes []int, walk bool) (View, error) {
	var v View
	tcp, udp := newPortSet(), newPortSet()
	if walk {
		start := time.Now()
		var ports []uint16
		var sessions []Session
		n := 0
		if err := r.walkTCP(func(s inetSock) {
			ports = append(ports, s.sport)
			n++
			if s.state != tcpListen && (s.sport == BGPPort || s.dport == BGPPort) {
				sessions = append(sessions, s.session())
			}
		}); err != nil {
			return View{}, fmt.Errorf("%w: TCP: %w", ErrRead, err)
		}
		r.walked, r.sessions = ports, sessions
		r.walkEnd = time.Now()
		r.walkTook = r.walkEnd.Sub(start)
		v.Sockets += n
		v.Walked = true
	} else {
		for _, fam := range []uint8{afInet, afInet6} {
			if err := r.inet(fam, protoTCP, 1<<tcpListen, func(s inetSock) {
				tcp.add(s.sport)
				v.Sockets++
			}); err != nil {
				return View{}, fmt.Errorf("%w: TCP: %w", ErrRead, err)
			}
		}
	}
	for _, p := range r.walked {
		tcp.add(p)
	}
	v.BGP = r.sessions
	for _, fam := range []uint8{afInet, afInet6} {
		err := r.inet(fam, protoUDP, allStates, func(s inetSock) {
			udp.add(s.sport)
			v.Sockets++
		})
		if errors.Is(err, unix.ENOENT) {
			v.UDPOff = "no udp_diag in this kernel: UDP sockets cannot be read"
		} else if err != nil {
			return View{}, fmt.Errorf("%w: UDP: %w", ErrRead, err)
		}
	}
	v.TCP, v.UDP = tcp.sorted(), udp.sorted()
	var err error
	if v.Local, err = r.locals(); err != nil {
		return View{}, fmt.Errorf("%w: local routes: %w", ErrRead, err)
	}
	takers, filters, err := r.takers(ifindexes)
	v.Filters = filters
	if err != nil {
		return View{}, fmt.Errorf("%w: %w", ErrRead, err)
	}
	v.TCPOff = takers.off(protoTCP)
	if v.UDPOff == "" {
		v.UDPOff = takers.off(protoUDP)
	}
	return v, nil
}

// takers is what takes frames whatever their port: each entry names one,
// for protocol 0 (both) or one protocol.
type takers []taker

type taker struct {
	proto uint8
	what  string
}

// off is why frames of proto cannot be judged, or "".
func (t takers) off(proto uint8) string {
	var out []string
	for _, k := range t {
		if k.proto == 0 || k.proto == proto {
			out = append(out, k.what)
		}
	}
	return strings.Join(slices.Compact(out), "; ")
}

// portSet is a set of ports as a bitmap: a dump of thousands of sockets
// adds each port in constant time.
type portSet struct{ bits [1024]uint64 }

func newPortSet() *portSet      { return &portSet{} }
func (s *portSet) add(p uint16) { s.bits[p>>6] |= 1 << (p & 63) }

func (s *portSet) sorted() []uint16 {
	var out []uint16
	for w, b := range s.bits {
		for ; b != 0; b &= b - 1 {
			out = append(out, uint16(w*64+bits.TrailingZeros64(b)))
		}
	}
	return out
}

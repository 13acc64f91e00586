package sockview

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The requests and answers of the dumps (linux/inet_diag.h,
// linux/packet_diag.h, linux/rtnetlink.h, linux/netfilter/nf_tables.h).
const (
	afInet    = unix.AF_INET
	afInet6   = unix.AF_INET6
	protoTCP  = unix.IPPROTO_TCP
	protoUDP  = unix.IPPROTO_UDP
	tcpListen = 10 // TCP_LISTEN

	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	tcpDiagGetSock   = 18 // TCPDIAG_GETSOCK
	inetDiagMsgLen   = 72
	packetDiagMsgLen = 16
	packetShowInfo   = 0x1
	packetShowFilter = 0x20
	packetDiagInfo   = 0 // PACKET_DIAG_INFO
	packetDiagUID    = 5 // PACKET_DIAG_UID
	packetDiagFilter = 7 // PACKET_DIAG_FILTER
	sockDgram        = 2

	rtmGetRoute = 26 // RTM_GETROUTE
	rtmNewRoute = 24
	rtnLocal    = 2 // RTN_LOCAL
	rtaDst      = 1
	rtaTable    = 15

	nfnlSubsysNFTables = 10
	nftMsgGetChain     = 4
	nftMsgNewChain     = 3
	nftaChainTable     = 1
	nftaChainName      = 3
	nftaChainHook      = 4
	nftaChainType      = 7
	nftaHookHooknum    = 1
	nfInetPreRouting   = 0
	nfprotoIPv4        = 2
	nfprotoIPv6        = 10
	nfprotoINet        = 1

	ethPAll  = 0x0003
	ethPIP   = 0x0800
	ethPIPv6 = 0x86dd
)

// inetSock is one inet_diag answer: state, ports, addresses.
type inetSock struct {
	family       uint8
	state        uint8
	sport, dport uint16
	src, dst     netip.Addr
	inode        uint32
}

func (s inetSock) session() Session {
	return Session{Local: netip.AddrPortFrom(s.src, s.sport), Remote: netip.AddrPortFrom(s.dst, s.dport)}
}

// allStates asks for sockets in every state.
const allStates = 0xffffffff

// inetReq is an inet_diag_req_v2 for the sockets of family and protocol in
// the states of the mask.
func inetReq(family, proto uint8, states uint32) []byte {
	b := make([]byte, 56)
	b[0], b[1] = family, proto
	binary.NativeEndian.PutUint32(b[4:], states)
	return b
}

// walkReq is an old-style inet_diag_req (TCPDIAG_GETSOCK), which the kernel
// answers for both families at once (sdiag_family AF_UNSPEC): one walk of
// the established hash table, not one per family.
func walkReq() []byte {
	b := make([]byte, 60)
	binary.NativeEndian.PutUint32(b[52:], allStates)
	return b
}

// parseInet reads an inet_diag_msg; IPv4-mapped IPv6 addresses come back
// as IPv4.
func parseInet(b []byte) (inetSock, error) {
	if len(b) < inetDiagMsgLen {
		return inetSock{}, fmt.Errorf("%w: an inet_diag answer of %d bytes", errDump, len(b))
	}
	s := inetSock{family: b[0], state: b[1], sport: binary.BigEndian.Uint16(b[4:]),
		dport: binary.BigEndian.Uint16(b[6:]), inode: binary.NativeEndian.Uint32(b[68:])}
	if s.family == afInet6 {
		s.src = netip.AddrFrom16([16]byte(b[8:24])).Unmap()
		s.dst = netip.AddrFrom16([16]byte(b[24:40])).Unmap()
	} else {
		s.src = netip.AddrFrom4([4]byte(b[8:12]))
		s.dst = netip.AddrFrom4([4]byte(b[24:28]))
	}
	return s, nil
}

// inet dumps the sockets of family and proto in the states of the mask.
func (r *Reader) inet(family, proto uint8, states uint32, each func(inetSock)) error {
	return r.diag.dump(sockDiagByFamily, inetReq(family, proto, states), inetEach(each))
}

// walkTCP dumps every TCP socket of both families, in every state.
func (r *Reader) walkTCP(each func(inetSock)) error {
	return r.diag.dump(tcpDiagGetSock, walkReq(), inetEach(each))
}

func inetEach(each func(inetSock)) func(uint16, []byte) error {
	return func(_ uint16, body []byte) error {
		s, err := parseInet(body)
		if err == nil {
			each(s)
		}
		return err
	}
}

// locals dumps the routes of every table and keeps the RTN_LOCAL ones: the
// addresses (and AnyIP prefixes) the kernel delivers to itself.
func (r *Reader) locals() ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := r.route.dump(rtmGetRoute, make([]byte, 12), func(typ uint16, body []byte) error {
		if p, ok := parseLocalRoute(typ, body); ok {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// parseLocalRoute reads an RTM_NEWROUTE answer: the prefix of a local
// route, or false.
func parseLocalRoute(typ uint16, b []byte) (netip.Prefix, bool) {
	if typ != rtmNewRoute || len(b) < 12 || b[7] != rtnLocal {
		return netip.Prefix{}, false
	}
	family, bits := b[0], int(b[1])
	var p netip.Prefix
	attrs(b[12:], func(t uint16, v []byte) {
		if t != rtaDst {
			return
		}
		switch {
		case family == afInet && len(v) == 4:
			p = netip.PrefixFrom(netip.AddrFrom4([4]byte(v)), bits)
		case family == afInet6 && len(v) == 16:
			p = netip.PrefixFrom(netip.AddrFrom16([16]byte(v)), bits)
		}
	})
	return p.Masked(), p.IsValid()
}

// takers finds what takes frames arriving on ifindexes whatever their port:
// a packet socket bound to one of them (or to every interface) for IPv4, IPv6 or
// every protocol sees every frame, tcpdump's among them, and a frame
// kbridge freed would be missing from its capture, unless its classic BPF
// filter refuses it (then it is one of the filters, run on the frame); a
// raw socket of TCP or UDP gets a copy of every such packet for the host;
// NAT that may rewrite a frame's destination before the socket lookup (a
// prerouting nat chain of nftables, iptables-legacy's nat table) delivers
// or forwards frames to ports no socket holds; IPVS virtual services take
// connections to addresses and ports without a socket.
func (r *Reader) takers(ifindexes []int) (takers, []Filter, error) {
	var t takers
	var filters []Filter
	err := r.diag.dump(sockDiagByFamily, packetReq(), func(_ uint16, body []byte) error {
		k, f, ok := parsePacket(body, ifindexes)
		switch {
		case !ok:
		case f != nil && len(filters) < MaxFilters:
			filters = append(filters, *f)
		case f != nil:
			t = append(t, taker{0, fmt.Sprintf("more than %d packet sockets with filters on the interface", MaxFilters)})
		default:
			t = append(t, k)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("packet sockets: %w", err)
	}
	t = append(t, r.rawSockets()...)
	nat, err := r.natChains()
	if err != nil {
		return nil, nil, fmt.Errorf("nftables: %w", err)
	}
	t = append(t, nat...)
	t = append(t, r.procTakers()...)
	return t, filters, nil
}

// packetReq is a packet_diag_req showing each socket's interface and
// filter (the kernel shows filters to CAP_NET_ADMIN only).
func packetReq() []byte {
	b := make([]byte, 20)
	b[0] = unix.AF_PACKET
	binary.NativeEndian.PutUint32(b[8:], packetShowInfo|packetShowFilter)
	return b
}

// parsePacket reads a packet_diag_msg: ok when the socket receives IPv4,
// IPv6 or every protocol on one of ifindexes or every interface; then its
// filter when it has one the burst core can run, else a taker.
func parsePacket(b []byte, ifindexes []int) (taker, *Filter, bool) {
	if len(b) < packetDiagMsgLen {
		return taker{}, nil, false
	}
	// pdiag_num is the protocol bound, in host order.
	num := binary.NativeEndian.Uint16(b[2:])
	inode := binary.NativeEndian.Uint32(b[4:])
	if num != ethPAll && num != ethPIP && num != ethPIPv6 {
		return taker{}, nil, false
	}
	bound, uid := -1, -1
	var prog []Insn
	attrs(b[packetDiagMsgLen:], func(t uint16, v []byte) {
		switch {
		case t == packetDiagInfo && len(v) >= 4:
			bound = int(binary.NativeEndian.Uint32(v))
		case t == packetDiagUID && len(v) >= 4:
			uid = int(binary.NativeEndian.Uint32(v))
		case t == packetDiagFilter:
			for ; len(v) >= 8; v = v[8:] {
				prog = append(prog, Insn{Code: binary.NativeEndian.Uint16(v), Jt: v[2], Jf: v[3], K: binary.NativeEndian.Uint32(v[4:])})
			}
		}
	})
	if bound != 0 && !slices.Contains(ifindexes, bound) {
		return taker{}, nil, false
	}
	if runnable(prog) {
		return taker{}, &Filter{Insns: prog, Proto: num, Dgram: b[1] == sockDgram}, true
	}
	where := "on every interface"
	if bound != 0 {
		where = "on the interface"
	}
	what := "without a filter"
	if len(prog) > 0 {
		what = "with a filter kbridge cannot run"
	}
	return taker{0, fmt.Sprintf("a packet socket %s %s (inode %d, uid %d, protocol 0x%04x: tcpdump or the like)", where, what, inode, uid, num)}, nil, true
}

// runnable reports whether the burst core's interpreter (ring/burst_cbpf.h) runs
// prog as the kernel does: a classic program of at most MaxFilterInsns
// known instructions, loading only from the frame's own bytes (no
// ancillary data, SKF_AD_OFF, nor the kernel's SKF_NET_OFF and SKF_LL_OFF
// offsets, which are negative).
func runnable(prog []Insn) bool {
	if len(prog) == 0 || len(prog) > MaxFilterInsns {
		return false
	}
	for _, in := range prog {
		class, mode := in.Code&0x07, in.Code&0xe0
		switch class {
		case 0x00, 0x01: // LD, LDX
			switch mode {
			case 0x00, 0x60, 0x80: // IMM, MEM, LEN
			case 0x20, 0x40, 0xa0: // ABS, IND, MSH
				if int32(in.K) < 0 {
					return false
				}
			default:
				return false
			}
		case 0x02, 0x03, 0x06, 0x07: // ST, STX, RET, MISC
		case 0x04: // ALU
			if op := in.Code & 0xf0; op > 0xa0 {
				return false
			}
		case 0x05: // JMP
			if op := in.Code & 0xf0; op > 0x40 {
				return false
			}
		}
	}
	return true
}

// natChains dumps nftables' chains and names each nat chain on the
// prerouting hook (DNAT, REDIRECT) of an IP family.
func (r *Reader) natChains() (takers, error) {
	if !r.nftables {
		return nil, nil
	}
	if r.nf == nil {
		nf, err := openNetlink(unix.NETLINK_NETFILTER)
		if err != nil {
			// No nfnetlink: no nftables rule can exist.
			r.nftables = false
			return nil, nil
		}
		r.nf = nf
	}
	var t takers
	req := []byte{unix.AF_UNSPEC, 0, 0, 0} // nfgenmsg: every family, NFNETLINK_V0
	err := r.nf.dump(nfnlSubsysNFTables<<8|nftMsgGetChain, req, func(typ uint16, body []byte) error {
		if k, ok := parseNATChain(typ, body); ok {
			t = append(t, k)
		}
		return nil
	})
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.ENOENT) {
		r.nftables = false // no nf_tables in this kernel
		return nil, nil
	}
	return t, err
}

// parseNATChain reads an NFT_MSG_NEWCHAIN answer: a taker when it is a nat
// chain of family ip, ip6 or inet on the prerouting hook.
func parseNATChain(typ uint16, b []byte) (taker, bool) {
	if typ != nfnlSubsysNFTables<<8|nftMsgNewChain || len(b) < 4 {
		return taker{}, false
	}
	fam := b[0]
	if fam != nfprotoIPv4 && fam != nfprotoIPv6 && fam != nfprotoINet {
		return taker{}, false
	}
	var table, name, ctype string
	hook := -1
	attrs(b[4:], func(t uint16, v []byte) {
		switch t {
		case nftaChainTable:
			table = cstring(v)
		case nftaChainName:
			name = cstring(v)
		case nftaChainType:
			ctype = cstring(v)
		case nftaChainHook:
			attrs(v, func(t uint16, v []byte) {
				if t == nftaHookHooknum && len(v) == 4 {
					hook = int(binary.BigEndian.Uint32(v))
				}
			})
		}
	})
	if ctype != "nat" || hook != nfInetPreRouting {
		return taker{}, false
	}
	famName := map[uint8]string{nfprotoIPv4: "ip", nfprotoIPv6: "ip6", nfprotoINet: "inet"}[fam]
	return taker{0, fmt.Sprintf("the nftables nat chain %s %s %s on prerouting (DNAT, REDIRECT)", famName, table, name)}, true
}

// rawSockets reads the raw sockets of TCP and UDP from /proc/net/raw and
// raw6 (raw_diag is a module many kernels lack; the tables are short): the
// local "port" of a raw socket is its protocol.
func (r *Reader) rawSockets() takers {
	var t takers
	for _, f := range []string{"net/raw", "net/raw6"} {
		b, err := os.ReadFile(filepath.Join(r.proc, f))
		if err != nil {
			continue
		}
		t = append(t, parseRaw(string(b), f)...)
	}
	return t
}

// parseRaw reads a /proc/net/raw table: a taker per raw socket of TCP or UDP.
func parseRaw(table, name string) takers {
	var t takers
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		proto, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err != nil || (proto != protoTCP && proto != protoUDP) {
			continue
		}
		t = append(t, taker{uint8(proto), fmt.Sprintf("a raw socket of %s (/proc/%s, inode %s)", protoName(uint8(proto)), name, f[9])})
	}
	return t
}

// procTakers reads iptables-legacy's table names and IPVS's services.
func (r *Reader) procTakers() takers {
	var t takers
	for _, f := range []string{"net/ip_tables_names", "net/ip6_tables_names"} {
		if b, err := os.ReadFile(filepath.Join(r.proc, f)); err == nil {
			for _, name := range strings.Fields(string(b)) {
				if name == "nat" {
					t = append(t, taker{0, "the iptables-legacy nat table (/proc/" + f + ")"})
				}
			}
		}
	}
	f, err := os.Open(filepath.Join(r.proc, "net/ip_vs"))
	if err != nil {
		return t
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "TCP":
			t = append(t, taker{protoTCP, "an IPVS virtual service (/proc/net/ip_vs)"})
		case "UDP":
			t = append(t, taker{protoUDP, "an IPVS virtual service (/proc/net/ip_vs)"})
		case "FWM":
			t = append(t, taker{0, "an IPVS firewall-mark service (/proc/net/ip_vs)"})
		}
	}
	return t
}

func cstring(v []byte) string {
	if i := strings.IndexByte(string(v), 0); i >= 0 {
		v = v[:i]
	}
	return string(v)
}

func protoName(p uint8) string {
	if p == protoTCP {
		return "TCP"
	}
	return "UDP"
}

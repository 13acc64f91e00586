package ring

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/sockview"
)

// The host of these tests: 198.18.0.2 and 2001:2::2, its peer 198.18.0.1.
var (
	host4 = netip.MustParseAddr("198.18.0.2")
	host6 = netip.MustParseAddr("2001:2::2")
	peer4 = netip.MustParseAddr("198.18.0.1")
	peer6 = netip.MustParseAddr("2001:2::1")
)

// udpTo and tcpTo are frames from the peer to dst's port.
func udpTo(dst netip.Addr, sport, dport uint16) []byte {
	if dst.Is6() {
		return frame(nil, nil, 0x86dd, to(from(ipv6(17, src6, nil, ports(sport, dport)), peer6), dst))
	}
	return frame(nil, nil, 0x0800, to(from(ipv4(17, src4, 0, ports(sport, dport)), peer4), dst))
}

func tcpTo(dst netip.Addr, sport, dport uint16, flags byte) []byte {
	if dst.Is6() {
		return frame(nil, nil, 0x86dd, to(from(ipv6(6, src6, nil, tcp(sport, dport, flags)), peer6), dst))
	}
	return frame(nil, nil, 0x0800, to(from(ipv4(6, src4, 0, tcp(sport, dport, flags)), peer4), dst))
}

// sent is a frame the host sends from its port sport: what kb_sv_learn sees.
func sent(proto byte, src netip.Addr, sport uint16) []byte {
	if src.Is6() {
		return frame(nil, nil, 0x86dd, to(from(ipv6(proto, src6, nil, tcp(sport, 9, 0x02)), src), peer6))
	}
	return frame(nil, nil, 0x0800, to(from(ipv4(proto, src4, 0, tcp(sport, 9, 0x02)), src), peer4))
}

// hostView is a view of the host with TCP port 22 and UDP port 53 open.
func hostView() sockview.View {
	return sockview.View{
		TCP:   []uint16{22},
		UDP:   []uint16{53},
		Local: []netip.Prefix{netip.PrefixFrom(host4, 32), netip.PrefixFrom(host6, 128), netip.MustParsePrefix("127.0.0.0/8")},
	}
}

var both = SockViewFilter{TCP: true, UDP: true}

func publish(t *testing.T, v sockview.View, f SockViewFilter) {
	t.Helper()
	if err := PublishSockView(v, f, MonotonicNow()+time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(WithdrawSockView)
}

// classOf is the class the burst core gives f: its headers' class, then
// the socket view's.
func classOf(t *testing.T, f []byte) (class, why int) {
	t.Helper()
	c, _, err := classify(f, copp.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return sockViewClass(f, c)
}

func wantClass(t *testing.T, name string, f []byte, class, why int) {
	t.Helper()
	c, w := classOf(t, f)
	if c != class || (class == copp.Unwanted && w != why) {
		wn := "none"
		if w >= 0 {
			wn = copp.UnwantedWhyNames[w]
		}
		t.Errorf("%s: %s (%s), want %s", name, copp.ClassNames[c], wn, copp.ClassNames[class])
	}
}

// Only a TCP or UDP frame for one of the host's own addresses, to a port no
// socket of its protocol holds, is unwanted; forwarded frames, fragments,
// broadcasts and other protocols never are, and with no view published
// nothing is.
func TestTheSocketViewClassesOnlyFramesNoSocketOfTheHostWants(t *testing.T) {
	wantClass(t, "no view: UDP to a closed port", udpTo(host4, 1000, 9), copp.Default, -1)
	publish(t, hostView(), both)
	for _, c := range []struct {
		name  string
		f     []byte
		class int
		why   int
	}{
		{"UDP to a closed port", udpTo(host4, 1000, 9), copp.Unwanted, copp.UnwantedUDP},
		{"UDP to an open port", udpTo(host4, 1000, 53), copp.Default, -1},
		{"a SYN to an unopened port", tcpTo(host4, 1000, 80, 0x02), copp.Unwanted, copp.UnwantedSYN},
		{"an ACK to an unopened port", tcpTo(host4, 1000, 80, 0x10), copp.Unwanted, copp.UnwantedTCP},
		{"a SYN to port 22, open", tcpTo(host4, 1000, 22, 0x02), copp.ManagementSYN, -1},
		{"TCP to the UDP port 53 (no TCP socket)", tcpTo(host4, 1000, 53, 0x02), copp.Unwanted, copp.UnwantedSYN},
		{"a forged BGP SYN from 179 to an unopened port", tcpTo(host4, 179, 80, 0x02), copp.Unwanted, copp.UnwantedSYN},
		{"UDP the host forwards (another destination)", udpTo(peer4, 1000, 9), copp.Default, -1},
		{"UDP to a limited broadcast", udpTo(netip.MustParseAddr("255.255.255.255"), 1000, 9), copp.Default, -1},
		{"UDP to a multicast group", udpTo(netip.MustParseAddr("239.1.1.1"), 1000, 9), copp.Default, -1},
		{"UDP to a loopback address (a local route's prefix)", udpTo(netip.MustParseAddr("127.0.0.9"), 1000, 9), copp.Unwanted, copp.UnwantedUDP},
		{"IPv6 UDP to a closed port", udpTo(host6, 1000, 9), copp.Unwanted, copp.UnwantedUDP},
		{"IPv6 UDP to an open port", udpTo(host6, 1000, 53), copp.Default, -1},
		{"IPv6 UDP the host forwards", udpTo(peer6, 1000, 9), copp.Default, -1},
		{"IPv6 SYN to an unopened port", tcpTo(host6, 1000, 443, 0xc2), copp.Unwanted, copp.UnwantedSYN},
		{"a first IPv4 fragment of UDP to a closed port", frame(nil, nil, 0x0800, to(ipv4(17, src4, 0x2000, ports(1000, 9)), host4)), copp.Default, -1},
		{"a later IPv4 fragment", frame(nil, nil, 0x0800, to(ipv4(17, src4, 0x0010, ports(1000, 9)), host4)), copp.Default, -1},
		{"a first IPv6 fragment of UDP to a closed port", frame(nil, nil, 0x86dd, to(ipv6(17, src6, [][]byte{fragment(0)}, ports(1000, 9)), host6)), copp.Default, -1},
		{"UDP to a closed port in two VLAN tags", frame(nil, []uint16{0x88a8, 0x8100}, 0x0800, to(ipv4(17, src4, 0, ports(1000, 9)), host4)), copp.Unwanted, copp.UnwantedUDP},
		{"ICMP to the host", frame(nil, nil, 0x0800, to(ipv4(1, src4, 0, make([]byte, 8)), host4)), copp.Default, -1},
		{"SCTP to the host", frame(nil, nil, 0x0800, to(ipv4(132, src4, 0, ports(1000, 9)), host4)), copp.Default, -1},
		{"ARP", frame(nil, nil, 0x0806, make([]byte, 28)), copp.Neighbor, -1},
		{"UDP cut short in its ports", udpTo(host4, 1000, 9)[:14+20+3], copp.Default, -1},
	} {
		wantClass(t, c.name, c.f, c.class, c.why)
	}

	// One protocol on, the other off (what a raw socket of UDP does).
	publish(t, hostView(), SockViewFilter{TCP: true})
	wantClass(t, "UDP filter off: UDP to a closed port", udpTo(host4, 1000, 9), copp.Default, -1)
	wantClass(t, "UDP filter off: a SYN to an unopened port", tcpTo(host4, 1000, 80, 0x02), copp.Unwanted, copp.UnwantedSYN)

	// A view past its expiry is not used: a refresher that stopped
	// stops the filter.
	if err := PublishSockView(hostView(), both, MonotonicNow()-time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wantClass(t, "expired view: UDP to a closed port", udpTo(host4, 1000, 9), copp.Default, -1)
	WithdrawSockView()
	wantClass(t, "withdrawn view: UDP to a closed port", udpTo(host4, 1000, 9), copp.Default, -1)
}

// A TCP frame of port 179 without GTSM is BGP when its four-tuple is one of
// the host's sessions, and default otherwise, whatever its source claims.
func TestTheSocketViewClassesTheHostsBGPSessionsAsBGP(t *testing.T) {
	v := hostView()
	v.TCP = append(v.TCP, 179, 50123)
	v.BGP = []sockview.Session{
		{Local: netip.AddrPortFrom(host4, 179), Remote: netip.AddrPortFrom(peer4, 40000)},
		{Local: netip.AddrPortFrom(host6, 50123), Remote: netip.AddrPortFrom(peer6, 179)},
	}
	publish(t, v, both)
	for _, c := range []struct {
		name  string
		f     []byte
		class int
	}{
		{"the session's segment", tcpTo(host4, 40000, 179, 0x18), copp.BGP},
		{"another source port of the peer's", tcpTo(host4, 40001, 179, 0x18), copp.Default},
		{"a SYN from the peer's address to 179 (a new session)", tcpTo(host4, 40001, 179, 0x02), copp.Default},
		{"the IPv6 session's segment", tcpTo(host6, 179, 50123, 0x18), copp.BGP},
		{"from 179 to another of the host's ports", tcpTo(host6, 179, 50124, 0x18), copp.Unwanted},
	} {
		wantClass(t, c.name, c.f, c.class, copp.UnwantedTCP)
	}
	// From another source, the session's ports.
	f := frame(nil, nil, 0x0800, to(from(ipv4(6, src4, 0, tcp(40000, 179, 0x18)), netip.MustParseAddr("198.18.0.9")), host4))
	wantClass(t, "the session's ports from another address", f, copp.Default, -1)
}

// A port the host sends from is wanted from its first frame on, before any
// reading of the sockets has it: an outbound connection's reply, a DNS
// answer, is never unwanted. It is forgotten only once a reading begun
// after it was published and did not list it (the socket closed).
func TestAPortTheHostSendsFromIsWantedUntilAReadingAfterItSaysOtherwise(t *testing.T) {
	publish(t, hostView(), both)
	wantClass(t, "before: UDP to 40000", udpTo(host4, 53, 40000), copp.Unwanted, copp.UnwantedUDP)
	learnSockView(sent(17, host4, 40000), sent(6, host6, 40001))
	wantClass(t, "learned: UDP to 40000", udpTo(host4, 53, 40000), copp.Default, -1)
	wantClass(t, "learned: the SYN-ACK to 40001", tcpTo(host6, 443, 40001, 0x12), copp.Default, -1)
	wantClass(t, "learned for UDP only: TCP to 40000", tcpTo(host4, 443, 40000, 0x12), copp.Unwanted, copp.UnwantedTCP)

	// The kernel's reset to a SYN for a closed port is not a socket's
	// frame: a SYN flood to port 80 stays unwanted past the host's
	// answers to it.
	rst := frame(nil, nil, 0x0800, to(from(ipv4(6, src4, 0, tcp(80, 179, 0x14)), host4), peer4))
	learnSockView(rst)
	wantClass(t, "after the host's reset from 80: a SYN to 80", tcpTo(host4, 179, 80, 0x02), copp.Unwanted, copp.UnwantedSYN)

	// A reading begins; the host sends from 40002 meanwhile. The reading,
	// published, lists none of them (their sockets closed, or 40002's
	// opened after the reading passed its bucket).
	RotateSockView()
	learnSockView(sent(17, host4, 40002))
	publish(t, hostView(), both)
	wantClass(t, "read since: UDP to 40000", udpTo(host4, 53, 40000), copp.Unwanted, copp.UnwantedUDP)
	wantClass(t, "learned during the reading: UDP to 40002", udpTo(host4, 53, 40002), copp.Default, -1)
	// A reading that fails (begun, never published) keeps what it would
	// have forgotten a reading longer, never loses it.
	RotateSockView()
	wantClass(t, "a reading under way: UDP to 40002", udpTo(host4, 53, 40002), copp.Default, -1)
	RotateSockView()
	publish(t, hostView(), both)
	wantClass(t, "after a failed reading and one more: UDP to 40002", udpTo(host4, 53, 40002), copp.Default, -1)
	RotateSockView()
	publish(t, hostView(), both)
	wantClass(t, "and another: UDP to 40002", udpTo(host4, 53, 40002), copp.Unwanted, copp.UnwantedUDP)
}

// The TCP connections cost a walk of the kernel's whole hash table, so a
// reading walks them only when a frame asks for it: a segment to a port no
// socket holds, or one of port 179 of no session the view lists, is what a
// connection opened since the last walk would explain. A SYN (a new
// connection, which only a listener takes), a reset, UDP, and a session's
// own segment do not ask; RotateSockView reports it once.
func TestAFrameOfAConnectionTheViewLacksAsksForAWalk(t *testing.T) {
	v := hostView()
	// The walk that found the session found its local port.
	v.TCP = append(v.TCP, 179)
	v.BGP = []sockview.Session{{Local: netip.AddrPortFrom(host4, 179), Remote: netip.AddrPortFrom(peer4, 40000)}}
	publish(t, v, both)
	RotateSockView()
	for _, c := range []struct {
		name   string
		frames [][]byte
		want   bool
	}{
		{"nothing", nil, false},
		{"a SYN to a closed port", [][]byte{tcpTo(host4, 1234, 80, 0x02)}, false},
		{"a reset to a closed port", [][]byte{tcpTo(host4, 1234, 80, 0x14)}, false},
		{"UDP to a closed port", [][]byte{udpTo(host4, 1234, 80)}, false},
		{"a segment to an open port", [][]byte{tcpTo(host4, 1234, 22, 0x18)}, false},
		{"the session's segment", [][]byte{tcpTo(host4, 40000, 179, 0x18)}, false},
		{"a SYN to 179 (a new session)", [][]byte{tcpTo(host4, 40001, 179, 0x02)}, false},
		{"a segment to a closed port", [][]byte{tcpTo(host4, 443, 50000, 0x10)}, true},
		{"an IPv6 segment to a closed port", [][]byte{tcpTo(host6, 443, 50000, 0x18)}, true},
		{"a segment of port 179 of no session listed", [][]byte{tcpTo(host4, 40001, 179, 0x10)}, true},
		{"many of them, then nothing", [][]byte{tcpTo(host4, 443, 50000, 0x10), tcpTo(host4, 443, 50001, 0x10)}, true},
		{"nothing again", nil, false},
	} {
		for _, f := range c.frames {
			classOf(t, f)
		}
		if got := RotateSockView(); got != c.want {
			t.Errorf("%s: the next reading asked to walk %v, want %v", c.name, got, c.want)
		}
	}
}

// A TCP port the host sent from stays wanted until a reading that walked
// the connections has been published: the readings between, which read
// only the listening sockets, cannot say whether its connection lives.
// UDP's are read whole every time and forgotten as before.
func TestATCPPortLearnedIsKeptUntilAWalk(t *testing.T) {
	publish(t, hostView(), both)
	learnSockView(sent(6, host4, 40010), sent(17, host4, 40011))
	for i := range 3 {
		RotateSockView()
		publish(t, hostView(), both)
		wantClass(t, fmt.Sprintf("after %d readings without a walk: the reply to TCP port 40010", i+1), tcpTo(host4, 443, 40010, 0x10), copp.Default, -1)
	}
	wantClass(t, "UDP's port, read since", udpTo(host4, 53, 40011), copp.Unwanted, copp.UnwantedUDP)
	walked := hostView()
	walked.Walked = true
	RotateSockView()
	publish(t, walked, both)
	wantClass(t, "after a walk that did not list it: TCP port 40010", tcpTo(host4, 443, 40010, 0x10), copp.Unwanted, copp.UnwantedTCP)
}

// Workers class frames while the view is published again and again: a
// port every view lists is never unwanted and a port none lists always is,
// so no worker ever reads a view half written.
func TestWorkersNeverSeeAViewHalfWritten(t *testing.T) {
	open := hostView()
	// Views of very different shapes, so that a half-written one would
	// show: many ports and prefixes, or few.
	big := hostView()
	for p := 1000; p < 30000; p += 7 {
		big.TCP = append(big.TCP, uint16(p))
		big.UDP = append(big.UDP, uint16(p))
	}
	for i := len(big.Local); i < MaxLocalPrefixes; i++ {
		big.Local = append([]netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 1}), 32)}, big.Local...)
	}
	publish(t, open, both)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				wg.Done()
				return
			default:
			}
			v := open
			if i%2 == 1 {
				v = big
			}
			RotateSockView()
			if err := PublishSockView(v, both, MonotonicNow()+time.Minute); err != nil {
				t.Error(err)
			}
		}
	}()
	var wrong atomic.Int64
	var readers sync.WaitGroup
	openFrame, closedFrame := udpTo(host4, 1000, 53), udpTo(host4, 1000, 9)
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for range 50_000 {
				if c, _ := sockViewClass(openFrame, copp.Default); c != copp.Default {
					wrong.Add(1)
				}
				if c, _ := sockViewClass(closedFrame, copp.Default); c != copp.Unwanted {
					wrong.Add(1)
				}
			}
		}()
	}
	readers.Wait()
	close(stop)
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d frames classed against a view being written", n)
	}
}

func TestAViewBeyondTheBurstCoresBoundsIsRefused(t *testing.T) {
	v := hostView()
	for i := range MaxLocalPrefixes {
		v.Local = append(v.Local, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), 1}), 32))
	}
	if err := PublishSockView(v, both, MonotonicNow()+time.Minute); err == nil {
		WithdrawSockView()
		t.Errorf("%d local prefixes published, the view holds %d", len(v.Local), MaxLocalPrefixes)
	}
}

// udpDstPort9 is `tcpdump -dd udp dst port 9` on Ethernet: IPv6 or IPv4
// (not a later fragment), UDP, destination port 9.
var udpDstPort9 = []sockview.Insn{
	{Code: 0x28, K: 12},                   // ldh [12]
	{Code: 0x15, Jt: 0, Jf: 4, K: 0x86dd}, // jeq #0x86dd
	{Code: 0x30, K: 20},                   // ldb [20]
	{Code: 0x15, Jt: 0, Jf: 11, K: 17},    // jeq #17
	{Code: 0x28, K: 56},                   // ldh [56]
	{Code: 0x15, Jt: 8, Jf: 9, K: 9},      // jeq #9
	{Code: 0x15, Jt: 0, Jf: 8, K: 0x800},  // jeq #0x800
	{Code: 0x30, K: 23},                   // ldb [23]
	{Code: 0x15, Jt: 0, Jf: 6, K: 17},     // jeq #17
	{Code: 0x28, K: 20},                   // ldh [20]
	{Code: 0x45, Jt: 4, Jf: 0, K: 0x1fff}, // jset #0x1fff
	{Code: 0xb1, K: 14},                   // ldxb 4*([14]&0xf)
	{Code: 0x48, K: 16},                   // ldh [x + 16]
	{Code: 0x15, Jt: 0, Jf: 1, K: 9},      // jeq #9
	{Code: 0x06, K: 262144},               // ret #262144
	{Code: 0x06, K: 0},                    // ret #0
}

// A packet socket on the interface captures what its filter accepts: a
// frame it would capture is never unwanted, the others still are; a filter
// bound to IPv4 alone says nothing of IPv6 frames; a SOCK_DGRAM socket's
// filter reads from the network header; what a filter would see otherwise
// (a chain, a VLAN tag the kernel strips) is kept.
func TestAFrameAPacketSocketsFilterWouldCaptureIsNeverUnwanted(t *testing.T) {
	v := hostView()
	v.Filters = []sockview.Filter{{Insns: udpDstPort9, Proto: 0x0003}}
	publish(t, v, both)
	wantClass(t, "UDP to 9, captured", udpTo(host4, 1000, 9), copp.Default, -1)
	wantClass(t, "IPv6 UDP to 9, captured", udpTo(host6, 1000, 9), copp.Default, -1)
	wantClass(t, "UDP to 10, not captured", udpTo(host4, 1000, 10), copp.Unwanted, copp.UnwantedUDP)
	wantClass(t, "TCP to 9, not captured", tcpTo(host4, 1000, 9, 0x02), copp.Unwanted, copp.UnwantedSYN)
	tagged := frame(nil, []uint16{0x8100}, 0x0800, to(from(ipv4(17, src4, 0, ports(1000, 10)), peer4), host4))
	wantClass(t, "UDP to 10 in a VLAN tag (the filter would see it untagged)", tagged, copp.Default, -1)
	if c, _ := sockViewClassOfChain(udpTo(host4, 1000, 10), 3000, copp.Default); c != copp.Default {
		t.Errorf("the first segment of a chain: %s, want default (the filter would read all of it)", copp.ClassNames[c])
	}

	v.Filters = []sockview.Filter{{Insns: udpDstPort9, Proto: 0x0800}}
	publish(t, v, both)
	wantClass(t, "bound to IPv4: IPv4 UDP to 9", udpTo(host4, 1000, 9), copp.Default, -1)
	wantClass(t, "bound to IPv4: IPv6 UDP to 9", udpTo(host6, 1000, 9), copp.Unwanted, copp.UnwantedUDP)

	// SOCK_DGRAM, from the IPv4 header: UDP (protocol at 9), port 9 (at 22).
	dgram := []sockview.Insn{
		{Code: 0x30, K: 9}, {Code: 0x15, Jt: 0, Jf: 3, K: 17}, {Code: 0x28, K: 22},
		{Code: 0x15, Jt: 0, Jf: 1, K: 9}, {Code: 0x06, K: 65535}, {Code: 0x06, K: 0},
	}
	v.Filters = []sockview.Filter{{Insns: dgram, Proto: 0x0800, Dgram: true}}
	publish(t, v, both)
	wantClass(t, "SOCK_DGRAM: UDP to 9", udpTo(host4, 1000, 9), copp.Default, -1)
	wantClass(t, "SOCK_DGRAM: UDP to 10", udpTo(host4, 1000, 10), copp.Unwanted, copp.UnwantedUDP)
}

// The interpreter runs classic BPF as the kernel does: each class of
// instruction, and what it cannot decide (a load past the frame) counts as
// captured; a division by zero ends a program refused.
func TestTheFilterInterpreterRunsClassicBPF(t *testing.T) {
	f := udpTo(host4, 1000, 9)
	ret := func(k uint32) sockview.Insn { return sockview.Insn{Code: 0x06, K: k} }
	retA := sockview.Insn{Code: 0x16}
	for _, c := range []struct {
		name string
		prog []sockview.Insn
		want uint32
	}{
		{"ret k", []sockview.Insn{ret(77)}, 77},
		{"ld len; ret a", []sockview.Insn{{Code: 0x80}, retA}, uint32(len(f))},
		{"ld word [14]; ret a", []sockview.Insn{{Code: 0x20, K: 14}, retA}, 0x45000000 | uint32(len(f)-14)},
		{"ld imm, st, ldx mem, txa", []sockview.Insn{{Code: 0x00, K: 5}, {Code: 0x02, K: 3}, {Code: 0x61, K: 3}, {Code: 0x87}, retA}, 5},
		{"tax, add x", []sockview.Insn{{Code: 0x00, K: 20}, {Code: 0x07}, {Code: 0x0c}, retA}, 40},
		{"sub, mul, div, mod", []sockview.Insn{{Code: 0x00, K: 50}, {Code: 0x14, K: 8}, {Code: 0x24, K: 3}, {Code: 0x34, K: 4}, {Code: 0x94, K: 7}, retA}, 3},
		{"or, and, xor, lsh, rsh, neg", []sockview.Insn{{Code: 0x00, K: 0x0f}, {Code: 0x44, K: 0xf0}, {Code: 0x54, K: 0x3c}, {Code: 0xa4, K: 0x01}, {Code: 0x64, K: 4}, {Code: 0x74, K: 2}, {Code: 0x84}, retA}, 0xffffff0c},
		{"jgt, jge, jset", []sockview.Insn{{Code: 0x00, K: 10}, {Code: 0x25, Jt: 0, Jf: 5, K: 9}, {Code: 0x35, Jt: 0, Jf: 4, K: 10}, {Code: 0x45, Jt: 0, Jf: 3, K: 2}, {Code: 0x05, K: 1}, ret(0), ret(1), ret(2)}, 1},
		{"a load past the frame", []sockview.Insn{{Code: 0x28, K: 4000}, ret(0)}, 1},
		{"a division by zero in x", []sockview.Insn{{Code: 0x01, K: 0}, {Code: 0x00, K: 9}, {Code: 0x3c}, ret(5)}, 0},
		{"udp dst port 9", udpDstPort9, 262144},
	} {
		if got := runCBPF(c.prog, f); got != c.want {
			t.Errorf("%s: %d (%#x), want %d (%#x)", c.name, got, got, c.want, c.want)
		}
	}
	if got := runCBPF(udpDstPort9, udpTo(host4, 1000, 10)); got != 0 {
		t.Errorf("udp dst port 9 on a frame to 10: %d", got)
	}
}

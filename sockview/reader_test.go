package sockview_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/sockview"
	"github.com/kbridge/kbridge/tests/harness"
)

// A namespace of the test's own: an interface kbsv0 (one end of a veth
// pair whose other end, kbsv0p, stays in the namespace: the dummy driver is
// a module that machines without modules lack) with 198.18.5.2/24 and
// 2001:2:5::2/64, and lo.
const (
	svIf    = "kbsv0"
	svAddr4 = "198.18.5.2"
	svAddr6 = "2001:2:5::2"
)

func svNS(t *testing.T) string {
	t.Helper()
	harness.NeedRoot(t, "reading a namespace's sockets needs root (namespaces)")
	ns := fmt.Sprintf("kbsv-%d", os.Getpid())
	harness.NS(t, ns)
	harness.Run(t, "ip", "-n", ns, "link", "add", svIf, "type", "veth", "peer", "name", svIf+"p")
	harness.Run(t, "ip", "-n", ns, "addr", "add", svAddr4+"/24", "dev", svIf)
	harness.Run(t, "ip", "-n", ns, "addr", "add", svAddr6+"/64", "dev", svIf, "nodad")
	harness.Run(t, "ip", "-n", ns, "link", "set", svIf, "up")
	return ns
}

// inNS runs f on a thread of namespace ns with a Reader opened there and
// the interface's index.
func inNS(t *testing.T, ns string, f func(r *sockview.Reader, ifindex int) error) {
	t.Helper()
	err := harness.InNS(ns, func() error {
		r, err := sockview.Open()
		if err != nil {
			return err
		}
		defer r.Close()
		ifi, err := net.InterfaceByName(svIf)
		if err != nil {
			return err
		}
		return f(r, ifi.Index)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func read(r *sockview.Reader, ifindex int, walk bool) (sockview.View, error) {
	return r.Read([]int{ifindex}, walk)
}

func port(a net.Addr) uint16 {
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Port()
}

// What the kernel accepts is what the view says: a listening port opened
// is in the next reading and one closed is gone from it, in both families;
// UDP sockets too; an outbound connection's ephemeral port, and the same
// port in TIME_WAIT after it closed, are in every reading that walks the
// connections (and kept for those that do not).
func TestAReadingListsWhatTheKernelAccepts(t *testing.T) {
	ns := svNS(t)
	inNS(t, ns, func(r *sockview.Reader, ifindex int) error {
		l4, err := net.Listen("tcp4", svAddr4+":7001")
		if err != nil {
			return err
		}
		l6, err := net.Listen("tcp6", "[::]:7002")
		if err != nil {
			return err
		}
		defer l6.Close()
		u, err := net.ListenPacket("udp6", "[::]:7003")
		if err != nil {
			return err
		}
		defer u.Close()
		v, err := read(r, ifindex, false)
		if err != nil {
			return err
		}
		for _, p := range []uint16{7001, 7002} {
			if !slices.Contains(v.TCP, p) {
				t.Errorf("TCP port %d listening, not in %v", p, v.TCP)
			}
		}
		if !slices.Contains(v.UDP, 7003) || slices.Contains(v.TCP, 7003) {
			t.Errorf("UDP port 7003: TCP %v UDP %v", v.TCP, v.UDP)
		}
		if v.TCPOff != "" || v.UDPOff != "" {
			t.Errorf("nothing takes frames whatever their port here, yet: tcp %q, udp %q", v.TCPOff, v.UDPOff)
		}
		l4.Close()
		if v, err = read(r, ifindex, false); err != nil {
			return err
		}
		if slices.Contains(v.TCP, 7001) || !slices.Contains(v.TCP, 7002) {
			t.Errorf("7001 closed, 7002 open: %v", v.TCP)
		}

		// An outbound connection: the client's ephemeral port.
		srv, err := net.Listen("tcp4", svAddr4+":7004")
		if err != nil {
			return err
		}
		defer srv.Close()
		c, err := net.Dial("tcp4", svAddr4+":7004")
		if err != nil {
			return err
		}
		s, err := srv.Accept()
		if err != nil {
			return err
		}
		eph := port(c.LocalAddr())
		if v, err = read(r, ifindex, true); err != nil {
			return err
		}
		if !slices.Contains(v.TCP, eph) {
			t.Errorf("the connection's ephemeral port %d is not in the walk's %v", eph, v.TCP)
		}
		// The client closes first: its port goes to TIME_WAIT.
		c.Close()
		time.Sleep(50 * time.Millisecond)
		s.Close()
		time.Sleep(50 * time.Millisecond)
		if v, err = read(r, ifindex, true); err != nil {
			return err
		}
		if !slices.Contains(v.TCP, eph) {
			t.Errorf("port %d in TIME_WAIT is not in the walk's %v", eph, v.TCP)
		}
		if v, err = read(r, ifindex, false); err != nil || !slices.Contains(v.TCP, eph) {
			t.Errorf("a reading without a walk lost the walk's port %d: %v %v", eph, v.TCP, err)
		}
		return nil
	})
}

// The host's own addresses are its local routes: each address, an AnyIP
// prefix routed locally, loopback; not the subnets, their broadcasts or a
// neighbour's address.
func TestAReadingListsTheHostsOwnAddressesOnly(t *testing.T) {
	ns := svNS(t)
	harness.Run(t, "ip", "-n", ns, "route", "add", "local", "198.18.99.0/24", "dev", "lo")
	inNS(t, ns, func(r *sockview.Reader, ifindex int) error {
		v, err := read(r, ifindex, false)
		if err != nil {
			return err
		}
		has := func(a string) bool {
			ip := netip.MustParseAddr(a)
			for _, p := range v.Local {
				if p.Contains(ip) {
					return true
				}
			}
			return false
		}
		for _, a := range []string{svAddr4, svAddr6, "198.18.99.7", "127.0.0.1", "::1"} {
			if !has(a) {
				t.Errorf("%s is the host's own, not in %v", a, v.Local)
			}
		}
		for _, a := range []string{"198.18.5.1", "198.18.5.255", "2001:2:5::1", "198.18.6.2"} {
			if has(a) {
				t.Errorf("%s is not the host's own, in %v", a, v.Local)
			}
		}
		return nil
	})
}

// A TCP connection of port 179 is a BGP session, either way round, in both
// families; a listener on 179 is not.
func TestAWalkListsTheHostsBGPSessions(t *testing.T) {
	ns := svNS(t)
	inNS(t, ns, func(r *sockview.Reader, ifindex int) error {
		l, err := net.Listen("tcp", "[::]:179")
		if err != nil {
			return err
		}
		defer l.Close()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for _, a := range []string{svAddr4 + ":179", "[" + svAddr6 + "]:179"} {
			c, err := net.Dial("tcp", a)
			if err != nil {
				return err
			}
			s, err := l.Accept()
			if err != nil {
				return err
			}
			conns = append(conns, c, s)
		}
		v, err := read(r, ifindex, true)
		if err != nil {
			return err
		}
		want := map[string]bool{}
		for _, c := range conns {
			want[c.LocalAddr().String()+" "+c.RemoteAddr().String()] = true
		}
		got := map[string]bool{}
		for _, s := range v.BGP {
			got[s.Local.String()+" "+s.Remote.String()] = true
		}
		for k := range want {
			// The v4 connection to a dual-stack listener is an IPv6
			// socket with mapped addresses: the view gives IPv4.
			k4 := strings.ReplaceAll(k, "[::ffff:", "")
			k4 = strings.ReplaceAll(k4, "]", "")
			if !got[k] && !got[k4] {
				t.Errorf("session %s not in %v", k, v.BGP)
			}
		}
		if len(v.BGP) != len(conns) {
			t.Errorf("%d sessions, want %d (the listener is none): %v", len(v.BGP), len(conns), v.BGP)
		}
		return nil
	})
}

// What takes frames whatever their port turns the judging off, and says
// so: a packet socket on the interface or on every interface, for IPv4,
// IPv6 or all protocols, without a filter (tcpdump with no expression) or
// with one the burst core cannot run; a raw socket of UDP (UDP only); a nat
// chain on prerouting. A packet socket on another interface or for ARP
// alone does not, and one whose filter the burst core runs comes in the
// view instead.
func TestWhatTakesFramesWhateverTheirPortIsNamed(t *testing.T) {
	ns := svNS(t)
	harness.Run(t, "ip", "-n", ns, "link", "add", "kbsv1", "type", "veth", "peer", "name", "kbsv1p")
	inNS(t, ns, func(r *sockview.Reader, ifindex int) error {
		other, err := net.InterfaceByName("kbsv1")
		if err != nil {
			return err
		}
		packet := func(proto uint16, ifi int, prog ...unix.SockFilter) (func(), error) {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(proto)))
			if err != nil {
				return nil, err
			}
			if ifi != 0 {
				if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifi}); err != nil {
					unix.Close(fd)
					return nil, err
				}
			}
			if len(prog) > 0 {
				f := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
				if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &f); err != nil {
					unix.Close(fd)
					return nil, err
				}
			}
			return func() { unix.Close(fd) }, nil
		}
		check := func(what string, tcpOff, udpOff bool, sub string) error {
			v, err := read(r, ifindex, false)
			if err != nil {
				return err
			}
			if (v.TCPOff != "") != tcpOff || (v.UDPOff != "") != udpOff ||
				(sub != "" && !strings.Contains(v.TCPOff+v.UDPOff, sub)) {
				t.Errorf("%s: tcp off %q, udp off %q; want tcp off %v, udp off %v, naming %q", what, v.TCPOff, v.UDPOff, tcpOff, udpOff, sub)
			}
			return nil
		}
		for _, c := range []struct {
			what           string
			proto          uint16
			ifi            int
			tcpOff, udpOff bool
		}{
			{"tcpdump -i kbsv0", unix.ETH_P_ALL, ifindex, true, true},
			{"tcpdump -i any", unix.ETH_P_ALL, 0, true, true},
			{"a packet socket for IPv6 on kbsv0", unix.ETH_P_IPV6, ifindex, true, true},
			{"tcpdump -i kbsv1", unix.ETH_P_ALL, other.Index, false, false},
			{"a packet socket for ARP on kbsv0", unix.ETH_P_ARP, ifindex, false, false},
		} {
			done, err := packet(c.proto, c.ifi)
			if err != nil {
				return err
			}
			sub := ""
			if c.tcpOff {
				sub = "packet socket"
			}
			err = check(c.what, c.tcpOff, c.udpOff, sub)
			done()
			if err != nil {
				return err
			}
		}
		if err := check("all closed", false, false, ""); err != nil {
			return err
		}
		// A filter the burst core can run: carried in the view, nothing
		// turned off; one that reads ancillary data: turned off.
		done, err := packet(unix.ETH_P_ALL, ifindex, unix.SockFilter{Code: 0x28, K: 12}, unix.SockFilter{Code: 0x06, K: 0})
		if err != nil {
			return err
		}
		v, err := read(r, ifindex, false)
		done()
		if err != nil {
			return err
		}
		if v.TCPOff != "" || len(v.Filters) != 1 || len(v.Filters[0].Insns) != 2 || v.Filters[0].Insns[0].K != 12 {
			t.Errorf("a packet socket with a filter: tcp off %q, filters %+v; want its program carried, nothing off", v.TCPOff, v.Filters)
		}
		done, err = packet(unix.ETH_P_ALL, ifindex, unix.SockFilter{Code: 0x20, K: 0xfffff000}, unix.SockFilter{Code: 0x06, K: 0})
		if err != nil {
			return err
		}
		err = check("a packet socket whose filter reads ancillary data", true, true, "cannot run")
		done()
		if err != nil {
			return err
		}
		raw, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_UDP)
		if err != nil {
			return err
		}
		err = check("a raw socket of UDP", false, true, "raw socket of UDP")
		unix.Close(raw)
		return err
	})
	if _, err := exec.LookPath("nft"); err != nil {
		t.Log("no nft: the nat chain is not tried")
		return
	}
	harness.Run(t, "ip", "netns", "exec", ns, "nft", "add table ip kbsv; add chain ip kbsv pre { type nat hook prerouting priority -100 ; }")
	inNS(t, ns, func(r *sockview.Reader, ifindex int) error {
		v, err := read(r, ifindex, false)
		if err != nil {
			return err
		}
		if !strings.Contains(v.TCPOff, "nat chain ip kbsv pre") || v.UDPOff != v.TCPOff {
			t.Errorf("a prerouting nat chain: tcp off %q, udp off %q", v.TCPOff, v.UDPOff)
		}
		return nil
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

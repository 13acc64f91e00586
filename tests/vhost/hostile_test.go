package vhost

import (
	"encoding/binary"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tests/harness"
	vu "github.com/kbridge/kbridge/vhost/vhostusertest"
)

const udpPort = 5399

// udpFrame is an Ethernet frame carrying a UDP datagram to kbridge's
// address: the kernel hands it to a socket only if it crossed kbridge
// whole and in order.
func udpFrame(payload string) []byte {
	f := make([]byte, 14+20+8+len(payload))
	mac, _ := net.ParseMAC(kbMAC)
	copy(f[0:], mac)
	copy(f[6:], []byte{0x02, 0, 0, 0, 0, 0x09})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	copy(ip[12:], net.ParseIP("198.18.2.9").To4())
	copy(ip[16:], net.ParseIP(kbAddr).To4())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[34:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], udpPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload))) // checksum 0: none
	copy(udp[8:], payload)
	return f
}

// listenUDP opens a UDP socket on kbridge's address inside namespace ns.
// The socket stays in ns; the thread that made it is restored or, if that
// fails, dies with its goroutine.
func listenUDP(t *testing.T, ns string) *net.UDPConn {
	t.Helper()
	type res struct {
		c   *net.UDPConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer orig.Close()
		h, err := netns.GetFromName(ns)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			ch <- res{err: err}
			return
		}
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(kbAddr), Port: udpPort})
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- res{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("UDP socket in %s: %v", ns, r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

// received returns the datagrams that arrive within d.
func received(c *net.UDPConn, d time.Duration) []string {
	var got []string
	buf := make([]byte, 2048)
	deadline := time.Now().Add(d)
	for {
		_ = c.SetReadDeadline(deadline)
		n, err := c.Read(buf)
		if err != nil {
			return got
		}
		got = append(got, string(buf[:n]))
	}
}

// lastLine returns the last line of log that contains what.
func lastLine(log, what string) string {
	i := strings.LastIndex(log, what)
	if i < 0 {
		return ""
	}
	start := strings.LastIndexByte(log[:i], '\n') + 1
	end := strings.IndexByte(log[i:], '\n')
	if end < 0 {
		return log[start:]
	}
	return log[start : i+end]
}

// refused reads kbridge's refusal counters (mode vhost's status).
func (b *bed) refused(t *testing.T) (memTables, chains uint64) {
	t.Helper()
	var s struct {
		MemTables uint64 `json:"refused_mem_tables"`
		Chains    uint64 `json:"refused_chains"`
	}
	harness.KbridgeStats(t, b.ctl, &s)
	return s.MemTables, s.Chains
}

func dial(t *testing.T, sock string) *vu.Frontend {
	t.Helper()
	f, err := vu.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// TestVhostHostileFrontend runs one kbridge against a fake vhost-user
// frontend (vhost/vhostusertest) that misbehaves in each way the cases
// below list. After each case kbridge must be alive, the refusal logged (the
// line each case names), nothing delivered to the TAP; at the end a
// well-behaved frontend still gets a datagram through and the pool is
// whole.
func TestVhostHostileFrontend(t *testing.T) {
	b := newBed(t, false)
	kb := b.kbridge()
	udp := listenUDP(t, dut)
	connected := 0

	// up brings a well-behaved device up and waits for kbridge to take it.
	up := func(t *testing.T) *vu.Frontend {
		t.Helper()
		f := dial(t, b.sock)
		if _, err := f.Up(); err != nil {
			t.Fatal(err)
		}
		connected++
		kb.WaitCountIn(t, "vhost-user frontend connected", connected, 10*time.Second)
		return f
	}
	// hangUp closes f and waits until kbridge has let the device go.
	hangUp := func(t *testing.T, f *vu.Frontend) {
		t.Helper()
		f.Close()
		kb.WaitCountIn(t, "vhost-user frontend gone", connected, 10*time.Second)
	}
	positive := func(t *testing.T, payload string) {
		t.Helper()
		f := up(t)
		before := b.stats().Queues[0].ToKernel
		if err := f.SendFrame(udpFrame(payload)); err != nil {
			t.Fatal(err)
		}
		got := received(udp, 3*time.Second)
		if len(got) != 1 || got[0] != payload {
			t.Fatalf("the well-behaved frontend's datagram: got %q, want %q\n%s", got, payload, kb.Log)
		}
		if after := b.stats().Queues[0].ToKernel; after != before+1 {
			t.Errorf("to_kernel_packets %d -> %d, want +1", before, after)
		}
		hangUp(t, f)
	}

	t.Run("positive control: a well-behaved fake frontend reaches the TAP", func(t *testing.T) {
		positive(t, "positive control")
	})

	// Control-plane cases: librte_vhost (or kbridge's check of the memory
	// table) logs the line named and hangs up; the device never starts.
	type refusal struct {
		name string
		send func(f *vu.Frontend) error
		line string // the log line that proves the refusal
	}
	memfd := func(f *vu.Frontend) error {
		if _, err := f.Negotiate(vu.FeatureVersion1); err != nil {
			return err
		}
		return nil
	}
	ring := func(num, flags uint32) func(f *vu.Frontend) error {
		return func(f *vu.Frontend) error {
			if err := memfd(f); err != nil {
				return err
			}
			if err := f.SetMemTable(); err != nil {
				return err
			}
			return f.SetVringNum(1, num, flags)
		}
	}
	for _, c := range []refusal{
		{"memory table: 9 regions (8 allowed)", func(f *vu.Frontend) error {
			if err := memfd(f); err != nil {
				return err
			}
			regs := make([]vu.Region, 9)
			fds := make([]int, 9)
			for i := range regs {
				regs[i] = vu.Region{GPA: vu.Base + uint64(i)*0x10000, Size: 0x10000, UserAddr: vu.Base + uint64(i)*0x10000, Offset: uint64(i) * 0x10000}
			}
			for i := range fds {
				fds[i] = f.MemFd()
			}
			return f.SetMemTableRaw(9, regs, fds...)
		}, "expect 9 FDs for request VHOST_USER_SET_MEM_TABLE, received 8"},
		{"memory table: a region of size 0", func(f *vu.Frontend) error {
			if err := memfd(f); err != nil {
				return err
			}
			r := vu.Whole()
			r.Size = 0
			return f.SetMemTableRaw(1, []vu.Region{r}, f.MemFd())
		}, "failed to mmap region 0"},
		{"memory table: a region larger than its memfd", func(f *vu.Frontend) error {
			if err := memfd(f); err != nil {
				return err
			}
			r := vu.Whole()
			r.Size = 4 * vu.MemSize
			return f.SetMemTableRaw(1, []vu.Region{r}, f.MemFd())
		}, "vhost-user memory table refused"},
		{"memory table: mmap_offset beyond the memfd", func(f *vu.Frontend) error {
			if err := memfd(f); err != nil {
				return err
			}
			r := vu.Whole()
			r.Offset = 2 * vu.MemSize
			return f.SetMemTableRaw(1, []vu.Region{r}, f.MemFd())
		}, "vhost-user memory table refused"},
		{"memory table: no fds", func(f *vu.Frontend) error {
			if err := memfd(f); err != nil {
				return err
			}
			return f.SetMemTableRaw(1, []vu.Region{vu.Whole()})
		}, "expect 1 FDs for request VHOST_USER_SET_MEM_TABLE, received 0"},
		{"ring size 100 (not a power of two)", ring(100, vu.Version), "invalid virtqueue size 100"},
		{"ring size 100 with NEED_REPLY (a refusal that must still hang up)", ring(100, vu.Version|vu.NeedReply), "invalid virtqueue size 100"},
		{"ring size 0", ring(0, vu.Version), "failed to allocate memory for vq internal data"},
		{"ring size 65536 (> 32768)", ring(65536, vu.Version), "invalid virtqueue size 65536"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// kbridge checks a memory table in pre_msg, before
			// librte_vhost (which on 24.11 checks file sizes too) sees
			// it: its own line proves the refusal on both versions.
			line := c.line
			before := strings.Count(kb.Log.String(), line)
			f := dial(t, b.sock)
			if err := c.send(f); err != nil {
				t.Fatal(err)
			}
			if !f.HungUp(5 * time.Second) {
				t.Errorf("kbridge did not hang up on the hostile frontend")
			}
			kb.WaitCountIn(t, line, before+1, 5*time.Second)
			t.Log(lastLine(kb.Log.String(), line))
			kb.CheckRunning(t)
			if s := b.stats(); s.Connected {
				t.Errorf("a refused frontend counts as connected: %+v", s)
			}
		})
	}

	// Data-path cases: the device is up, the frontend posts one hostile
	// chain on its TX vring. kbridge must deliver nothing and say why.
	type chain struct {
		name string
		post func(f *vu.Frontend) error
	}
	frame := udpFrame("hostile descriptor")
	fill := func(f *vu.Frontend, slot int) (uint64, uint32) {
		addr, buf := f.Buf(slot)
		clear(buf[:vu.HdrLen])
		copy(buf[vu.HdrLen:], frame)
		return addr, uint32(vu.HdrLen + len(frame))
	}
	for _, c := range []chain{
		{"descriptor outside every region", func(f *vu.Frontend) error {
			f.SetDesc(1, 0, vu.Base+vu.MemSize+0x100000, uint32(vu.HdrLen+len(frame)), 0, 0)
			return f.Post(1, 0)
		}},
		{"descriptor straddling the region's end", func(f *vu.Frontend) error {
			f.SetDesc(1, 0, vu.Base+vu.MemSize-64, uint32(vu.HdrLen+len(frame)), 0, 0)
			return f.Post(1, 0)
		}},
		{"head index out of range", func(f *vu.Frontend) error {
			return f.Post(1, vu.RingSize+44)
		}},
		{"descriptor loop 0 -> 1 -> 0", func(f *vu.Frontend) error {
			a, n := fill(f, 0)
			b, _ := f.Buf(1)
			f.SetDesc(1, 0, a, n, vu.DescNext, 1)
			f.SetDesc(1, 1, b, 64, vu.DescNext, 0)
			return f.Post(1, 0)
		}},
		{"indirect descriptor loop 0 -> 1 -> 0", func(f *vu.Frontend) error {
			a, n := fill(f, 0)
			b, _ := f.Buf(1)
			table, _ := f.Buf(2)
			f.PutDesc(table, a, n, vu.DescNext, 1)
			f.PutDesc(table+16, b, 64, vu.DescNext, 0)
			f.SetDesc(1, 0, table, 32, vu.DescIndirect, 0)
			return f.Post(1, 0)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const line = "vhost-user descriptor chain refused"
			refusals := strings.Count(kb.Log.String(), line)
			_, chains := b.refused(t)
			f := up(t)
			before := b.stats().Queues[0]
			if err := c.post(f); err != nil {
				t.Fatal(err)
			}
			kb.WaitCountIn(t, line, refusals+1, 5*time.Second)
			t.Log(lastLine(kb.Log.String(), line))
			if got := received(udp, 500*time.Millisecond); len(got) != 0 {
				t.Errorf("a hostile chain reached a socket behind the TAP: %q", got)
			}
			kb.CheckRunning(t)
			after := b.stats().Queues[0]
			if after.ToKernel != before.ToKernel {
				t.Errorf("to_kernel_packets %d -> %d from a hostile chain", before.ToKernel, after.ToKernel)
			}
			if _, n := b.refused(t); n != chains+1 {
				t.Errorf("refused_chains %d -> %d, want +1", chains, n)
			}
			if used := f.Used(1); used != 0 {
				t.Errorf("the TX vring's used index moved to %d", used)
			}
			hangUp(t, f)
		})
	}

	t.Run("a well-behaved frontend still gets through", func(t *testing.T) {
		positive(t, "after the hostile ones")
	})
	kb.CheckRunning(t)
	kb.Stop(true)
	if !strings.Contains(kb.Log.String(), "pool_in_use=0") {
		t.Errorf("mbufs still in use after stop:\n%s", kb.Log)
	}
	gone(t, b.sock)
}

// served is one kbridge on a bed with a UDP socket behind its TAP, and the
// steps the frontend tests share.
type served struct {
	b         *bed
	kb        *harness.Proc
	udp       *net.UDPConn
	connected int // frontends kbridge took
}

func serve(t *testing.T) *served {
	b := newBed(t, false)
	return &served{b: b, kb: b.kbridge(), udp: listenUDP(t, dut)}
}

// took waits for kbridge to take one more frontend.
func (s *served) took(t *testing.T) {
	t.Helper()
	s.connected++
	s.kb.WaitCountIn(t, "vhost-user frontend connected", s.connected, 10*time.Second)
}

// up brings a well-behaved device up and waits for kbridge to take it.
func (s *served) up(t *testing.T) *vu.Frontend {
	t.Helper()
	f := dial(t, s.b.sock)
	if _, err := f.Up(); err != nil {
		t.Fatal(err)
	}
	s.took(t)
	return f
}

// left waits for kbridge to let the last frontend's device go.
func (s *served) left(t *testing.T) {
	t.Helper()
	s.kb.WaitCountIn(t, "vhost-user frontend gone", s.connected, 10*time.Second)
}

// through sends payload from f and checks that it reaches the socket once.
func (s *served) through(t *testing.T, f *vu.Frontend, payload string) {
	t.Helper()
	if err := f.SendFrame(udpFrame(payload)); err != nil {
		t.Fatal(err)
	}
	if got := received(s.udp, 3*time.Second); len(got) != 1 || got[0] != payload {
		t.Fatalf("got %q, want %q\n%s", got, payload, s.kb.Log)
	}
}

// finish checks that a well-behaved frontend still gets payload through,
// then stops kbridge, whose pool must be whole.
func (s *served) finish(t *testing.T, payload string) {
	t.Run("a well-behaved frontend still gets through", func(t *testing.T) {
		f := s.up(t)
		s.through(t, f, payload)
		f.Close()
		s.left(t)
	})
	s.kb.Stop(true)
	if !strings.Contains(s.kb.Log.String(), "pool_in_use=0") {
		t.Errorf("mbufs still in use after stop:\n%s", s.kb.Log)
	}
}

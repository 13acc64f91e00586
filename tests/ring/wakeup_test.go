package ring

// Lost-wakeup stress: kbridge in interrupt mode with a one-minute park
// timeout, fed one packet per kbridge_to_kernel() call. Every identifier
// here starts with wk.

import (
	"bytes"
	"encoding/binary"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// wkPackets is how many single-packet bursts the stress test sends: the
// issue's 10^6. Measured on the 2-vCPU test VM: 10^6 in 15.8 s (15.8 us
// per packet; about half of them found the worker parked and were kicked),
// inside the 60 s budget; KBT_WAKEUP_PACKETS=N overrides the count.
const wkPackets = 1_000_000

// wkStall is how long the test waits for progress before it calls a
// wakeup lost: far above any round trip, far below the park timeout.
const wkStall = 3 * time.Second

// The windows (packets in flight) the injector cycles through, one per
// block of wkBlock packets. Window 1 is strict ping-pong: the next packet
// is enqueued just as the worker, its TAP write done, finds the ring empty
// and parks, which is where a lost wakeup would hide; larger windows move
// the race to the moment the worker drains its last packet.
var wkWindows = []int{1, 1, 1, 1, 2, 3, 4, 8, 1, 16, 1, 32}

const wkBlock = 1000

// One packet per kbridge_to_kernel() call, 10^6 of them, into a worker
// that parks whenever both rings are empty and would only wake on its own
// after a minute: every packet must reach the TAP side, in order and
// intact, and no park may end by timeout. A lost wakeup shows as a stall
// (caught after wkStall) and as a timeout.
func TestWakeupStress(t *testing.T) {
	n := wkPackets
	if v := os.Getenv("KBT_WAKEUP_PACKETS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("KBT_WAKEUP_PACKETS=%q: want a positive count", v)
		}
	}
	b := env.NewBed(t, dpdkbed.Opts{Iface: "", YAML: "policy:\n  mode: interrupt\n  park_timeout: 1m\n"})
	ps := b.PacketSocket()
	// Room for far more than the largest window: a slow reader must not
	// make the socket drop what kbridge delivered.
	if err := unix.SetsockoptInt(ps.Fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(ps.Fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	harness.WaitUntil(t, "the app to get the worker's eventfd", 10*time.Second, func() bool {
		return b.Port.Counters(0).HaveEventfd
	})
	harness.WaitUntil(t, "the worker to park", 10*time.Second, func() bool { return b.Status().Parks > 0 })
	before, app0 := b.Status(), b.Port.Counters(0)

	var (
		sent, got  int
		buf        = make([]byte, 2048)
		lastGot    = time.Now()
		start      = time.Now()
		nextReport = start.Add(10 * time.Second)
	)
	for got < n {
		window := wkWindows[(sent/wkBlock)%len(wkWindows)]
		for sent < n && sent-got < window {
			q, err := b.Port.Inject(0, [][]byte{wkFrame(uint32(sent))}, ringtest.InjectOpts{})
			if err != nil || q != 1 {
				t.Fatalf("packet %d: kbridge_to_kernel queued %d: %v (counters %+v)", sent, q, err, b.Port.Counters(0))
			}
			sent++
		}
		m, from, err := unix.Recvfrom(ps.Fd, buf, 0)
		if err != nil {
			if time.Since(lastGot) > wkStall {
				st := b.Status()
				t.Fatalf("no packet for %v with %d in flight after %d of %d: a lost wakeup? "+
					"parks=%d wakeups=%d timeouts=%d to_kernel=%d drops=%v app=%+v in_rings=%d\n%s",
					wkStall, sent-got, got, n, st.Parks-before.Parks, st.Wakeups-before.Wakeups,
					st.Timeouts, st.ToKernelPackets-before.ToKernelPackets, st.Drops,
					b.Port.Counters(0), b.Port.InRings(0), b.Out)
			}
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if m < 18 || binary.BigEndian.Uint16(buf[12:14]) != dpdkbed.EthType {
			continue
		}
		if !bytes.Equal(buf[:m], wkFrame(uint32(got))) {
			t.Fatalf("packet %d: got seq %d (%d bytes): lost, reordered or damaged",
				got, binary.BigEndian.Uint32(buf[14:18]), m)
		}
		got++
		lastGot = time.Now()
		if lastGot.After(nextReport) {
			t.Logf("%d of %d delivered (%.0f/s)", got, n, float64(got)/time.Since(start).Seconds())
			nextReport = nextReport.Add(10 * time.Second)
		}
	}
	took := time.Since(start)

	// The worker counts a burst after its write, which the last packet's
	// arrival above can beat (seen once in CI: 999999 of 1000000 counted,
	// every packet delivered): wait for the count before reading it.
	waitCount := time.Now().Add(5 * time.Second)
	for b.Status().ToKernelPackets-before.ToKernelPackets < uint64(n) && time.Now().Before(waitCount) {
		time.Sleep(time.Millisecond)
	}
	st, app := b.Status(), b.Port.Counters(0)
	moved := st.ToKernelPackets - before.ToKernelPackets
	parks, wakeups := st.Parks-before.Parks, st.Wakeups-before.Wakeups
	kicks := app.Kicks - app0.Kicks
	t.Logf("%d single-packet bursts in %v (%.1f us per packet): parks %d, wakeups %d, app kicks %d, park timeouts %d",
		n, took.Round(time.Millisecond), float64(took.Microseconds())/float64(n), parks, wakeups, kicks, st.Timeouts)
	if moved != uint64(n) {
		t.Errorf("kbridge moved %d packets to the kernel, want %d", moved, n)
	}
	if d := st.TotalDrops() - before.TotalDrops(); d != 0 {
		t.Errorf("kbridge dropped %d packets: %v", d, st.Drops)
	}
	if d := app.ToKernelDropped - app0.ToKernelDropped; d != 0 {
		t.Errorf("the app dropped %d packets (ring full)", d)
	}
	if st.Timeouts != 0 {
		t.Errorf("%d parks ended by the one-minute timeout: a wakeup was lost", st.Timeouts)
	}
	// The handshake was exercised, not bypassed: many packets found the
	// worker parked and were kicked (about a third in a measured run; in
	// the rest the next packet came before the worker looked again).
	if kicks < uint64(n)/20 || wakeups < uint64(n)/20 {
		t.Errorf("only %d kicks and %d wakeups for %d packets: the worker did not park between packets", kicks, wakeups, n)
	}
	// Nothing extra arrives afterwards (no duplicate).
	time.Sleep(100 * time.Millisecond)
	for {
		m, _, err := unix.Recvfrom(ps.Fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			break
		}
		if m >= 18 && binary.BigEndian.Uint16(buf[12:14]) == dpdkbed.EthType {
			t.Errorf("an extra packet (seq %d) after all %d arrived", binary.BigEndian.Uint32(buf[14:18]), n)
			break
		}
	}
}

// wkFrame is the 64-byte test frame with sequence number seq.
func wkFrame(seq uint32) []byte { return dpdkbed.TestFrame(64, seq) }

package requests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// What an administrator does to kb0 reaches the app as a request
// (kbridge.h version 5), and kb0 takes the app port's MAC. The reference
// app owns a net_tap port whose TAP (the wire, in a namespace of the app's
// own, so that its MAC is no interface kbridge sees) shows what the PMD
// applied: the ethdev's MTU, link, MAC and flags are read back there.

// requestBed is the reference app on a net_tap port and kbridge on it.
type requestBed struct {
	t              *testing.T
	app            *harness.Proc
	k              *dpdkbed.Kbridge
	appNS, wire    string
	ifname, appMAC string
	cfg            dpdkbed.Config // kbridge's
}

// newRequestBed starts the reference app with --requests mode (and more
// of its options) and kbridge, with more sections of configuration.
func newRequestBed(t *testing.T, mode, tag string, more string, appArgs ...string) *requestBed {
	t.Helper()
	env.NeedRoot(t)
	refapp := filepath.Join(harness.RepoRoot(t), "bin/kbridge-refapp")
	if _, err := os.Stat(refapp); err != nil {
		t.Skip("bin/kbridge-refapp missing: run make build (make test does)")
	}
	b := &requestBed{t: t, appNS: "kbftq-app" + tag, wire: "kbftq-w" + tag, ifname: "kbftq" + tag}
	appPrefix := env.Prefix + "rq" + tag
	if out, err := exec.Command("ip", "netns", "add", b.appNS).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", b.appNS, err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", b.appNS).Run()
		_ = os.RemoveAll(filepath.Join("/var/run/dpdk", appPrefix))
	})
	args := append([]string{"ip", "netns", "exec", b.appNS, refapp, "-l", "0",
		"--file-prefix", appPrefix, "--proc-type", "primary", "--no-pci", "--vdev", "net_tap0,iface=" + b.wire,
		"-m", "64", "--", "--port", b.ifname, "--requests", mode}, appArgs...)
	b.app = harness.Start(t, "kbridge-refapp", args...)
	b.app.WaitLog("kbridge-refapp: ready", 20*time.Second)
	if m := regexp.MustCompile(`mac=([0-9A-Fa-f:]{17})`).FindStringSubmatch(b.app.Log.String()); m != nil {
		b.appMAC = strings.ToLower(m[1])
	}
	b.cfg = dpdkbed.Config{Prefix: appPrefix, Port: b.ifname, Ifname: b.ifname,
		Iface: "  mtu: 1500\n  addresses: [198.18.33.2/24]\n  up: true\n", More: more}
	b.k = env.StartKbridgeConfig(t, b.cfg)
	b.k.Ready()
	return b
}

// kb runs ip link set <kb0> args in kbridge's namespace.
func (b *requestBed) kb(args ...string) {
	b.t.Helper()
	a := append([]string{"-n", env.NS, "link", "set", b.ifname}, args...)
	if out, err := exec.Command("ip", a...).CombinedOutput(); err != nil {
		b.t.Fatalf("ip %s: %v\n%s", strings.Join(a, " "), err, out)
	}
}

// flags reads an interface's flags (IFF_*) in namespace ns.
func flags(ns, ifname string) uint64 {
	var f uint64
	s := strings.TrimPrefix(harness.NetSys(ns, ifname, "flags"), "0x")
	for _, c := range s {
		f <<= 4
		switch {
		case c >= '0' && c <= '9':
			f |= uint64(c - '0')
		case c >= 'a' && c <= 'f':
			f |= uint64(c-'a') + 10
		}
	}
	return f
}

// eventually waits up to 5 s for cond and fails the test with what.
func (b *requestBed) eventually(what string, cond func() bool) time.Duration {
	b.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 5*time.Second {
			b.t.Fatalf("%s: not after 5 s\napp:\n%s\nkbridge:\n%s", what, b.app.Log, b.k.Log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

const (
	iffUp       = 0x1
	iffPromisc  = 0x100
	iffAllmulti = 0x200
)

// Every request kind round-trips to the app's ethdev and is read back on
// the PMD's interface; the MTU is taken live (a frame of the new size
// crosses kbridge); a refusal sets kb0 back and names the app's answer.
func TestRequestsReachTheApp(t *testing.T) {
	b := newRequestBed(t, "serve", "s", "")
	if b.appMAC == "" {
		t.Fatalf("the app did not print its MAC:\n%s", b.app.Log)
	}
	if got := harness.NetSys(env.NS, b.ifname, "address"); got != b.appMAC {
		t.Errorf("%s's MAC is %s, the app port's %s:\n%s", b.ifname, got, b.appMAC, b.k.Log)
	}
	b.k.WaitLog("the app takes the interface's changes as requests", 5*time.Second)
	b.k.WaitLog(`msg="the app's port took the interface's MTU at start" interface=`+b.ifname+` mtu=1500`, 5*time.Second)

	// MTU: taken, applied to the ethdev, and live: down to 1280, back up to
	// 1500, and a frame of 1500 crosses. (net_tap takes no frame over 1522
	// bytes, so no higher.)
	for _, mtu := range []string{"1280", "1500"} {
		b.kb("mtu", mtu)
		took := b.eventually("the wire's MTU "+mtu, func() bool { return harness.NetSys(b.appNS, b.wire, "mtu") == mtu })
		b.k.WaitLog(`msg="the app applied the interface's change" interface=`+b.ifname+` change=mtu value=`+mtu, 5*time.Second)
		t.Logf("mtu %s applied at the app's ethdev %v after the ip command", mtu, took.Round(time.Microsecond))
		if got := harness.NetSys(env.NS, b.ifname, "mtu"); got != mtu {
			t.Fatalf("%s's MTU is %s after the app accepted %s:\n%s", b.ifname, got, mtu, b.k.Log)
		}
	}
	before := b.k.Status()
	b.k.SendSized(20, 1500+14)
	b.eventually("20 frames of 1514 bytes handed to the app", func() bool {
		return b.k.Status().FromKernelPackets-before.FromKernelPackets >= 20
	})
	if d := b.k.Status().Drops["oversize"]; d != before.Drops["oversize"] {
		t.Errorf("%d frames of the new MTU dropped as oversize", d-before.Drops["oversize"])
	}

	// An MTU the app's port may refuse: DPDK 22.11's net_tap takes frames
	// up to 1522 bytes and refuses 9100 (-EINVAL); 24.11's takes it. kb0
	// ends where the port's answer puts it, and the answer is logged.
	b.kb("mtu", "9100")
	b.eventually("the app's answer to mtu 9100", func() bool { return strings.Contains(b.app.Log.String(), "request mtu 9100: ") })
	if strings.Contains(b.app.Log.String(), "request mtu 9100: Invalid argument") {
		b.eventually("kb0's MTU 9100 set back to 1500", func() bool {
			return harness.NetSys(env.NS, b.ifname, "mtu") == "1500" &&
				strings.Contains(b.k.Log.String(), `value=9100 back_to=1500 answer="the app refused it: invalid argument (-22)"`)
		})
		if got := harness.NetSys(b.appNS, b.wire, "mtu"); got != "1500" {
			t.Errorf("the wire's MTU is %s after a refused 9100", got)
		}
		t.Log("the port refused mtu 9100: kb0 set back to 1500")
	} else {
		b.k.WaitLog(`change=mtu value=9100`, 5*time.Second)
		if got, wire := harness.NetSys(env.NS, b.ifname, "mtu"), harness.NetSys(b.appNS, b.wire, "mtu"); got != "9100" || wire != "9100" {
			t.Errorf("the port took mtu 9100, but kb0 has %s and the wire %s", got, wire)
		}
		t.Log("the port took mtu 9100 (DPDK 24.11's net_tap); back to 1500")
		b.kb("mtu", "1500")
		b.eventually("the wire back at 1500", func() bool { return harness.NetSys(b.appNS, b.wire, "mtu") == "1500" })
	}

	// One beyond what kbridge carries (jumbo, 9216): set back without
	// asking the app, the reason logged, the ethdev untouched.
	b.kb("mtu", "9700")
	b.eventually("kb0's MTU 9700 set back to 1500", func() bool {
		return harness.NetSys(env.NS, b.ifname, "mtu") == "1500" && strings.Contains(b.k.Log.String(), "beyond what kbridge can carry")
	})
	if strings.Contains(b.app.Log.String(), "request mtu 9700") {
		t.Errorf("the app was asked for mtu 9700, beyond what kbridge carries:\n%s", b.app.Log)
	}

	// Down and up: the app's link follows (net_tap sets its TAP down), and
	// with it kb0's carrier.
	b.kb("down")
	b.eventually("the wire down", func() bool { return flags(b.appNS, b.wire)&iffUp == 0 })
	b.eventually("kb0's carrier off with the app's link", func() bool { return harness.NetSys(env.NS, b.ifname, "carrier") != "1" })
	b.kb("up")
	b.eventually("the wire up", func() bool { return flags(b.appNS, b.wire)&iffUp != 0 })

	// MAC, promiscuous, all-multicast.
	const mac = "02:00:5e:00:53:2a"
	b.kb("address", mac)
	b.eventually("the wire's MAC "+mac, func() bool { return harness.NetSys(b.appNS, b.wire, "address") == mac })
	b.kb("promisc", "on")
	b.eventually("the wire promiscuous", func() bool { return flags(b.appNS, b.wire)&iffPromisc != 0 })
	// Off is refused: the reference app keeps its port promiscuous, since
	// exception traffic is addressed to kb0's MAC. kb0 is set back on.
	b.kb("promisc", "off")
	b.eventually("kb0 promiscuous again after the app's refusal", func() bool {
		return flags(env.NS, b.ifname)&iffPromisc != 0 &&
			strings.Contains(b.k.Log.String(), `change=promisc value=off back_to=on answer="the app refused it: device or resource busy (-16)"`)
	})
	if flags(b.appNS, b.wire)&iffPromisc == 0 {
		t.Errorf("the wire is not promiscuous after a refused promisc off")
	}
	b.kb("allmulticast", "on")
	b.eventually("the wire all-multicast", func() bool { return flags(b.appNS, b.wire)&iffAllmulti != 0 })
	if got := harness.NetSys(env.NS, b.ifname, "address"); got != mac {
		t.Errorf("%s's MAC is %s after the app accepted %s", b.ifname, got, mac)
	}
	// kb0 deleted and made again: what the app accepted stays (the MAC,
	// all-multicast), and nothing is asked of the app for it.
	asked := strings.Count(b.app.Log.String(), "kbridge-refapp: request ")
	if out, err := exec.Command("ip", "-n", env.NS, "link", "del", b.ifname).CombinedOutput(); err != nil {
		t.Fatalf("ip link del: %v\n%s", err, out)
	}
	b.k.WaitLog("the interface was deleted and made again", 5*time.Second)
	b.eventually("the re-made kb0 with the accepted MAC and all-multicast", func() bool {
		return harness.NetSys(env.NS, b.ifname, "address") == mac && flags(env.NS, b.ifname)&iffAllmulti != 0
	})
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(b.app.Log.String(), "kbridge-refapp: request "); n != asked {
		t.Errorf("re-making kb0 asked the app %d more times:\n%s", n-asked, b.app.Log)
	}
	for _, want := range []string{"request mtu 1280: applied", "request mtu 1500: applied",
		"request link 0: applied", "request link 1: applied",
		"request mac 02:00:5e:00:53:2a: applied", "request promisc 1: applied", "request promisc 0: Device or resource busy",
		"request allmulticast 1: applied"} {
		if !strings.Contains(b.app.Log.String(), want) {
			t.Errorf("the app's log lacks %q:\n%s", want, b.app.Log)
		}
	}

	// A port keeps the MTU it accepted when its kbridge stops; the next
	// kbridge makes kb0 at interface.mtu and asks the port for it, so that
	// the two agree again.
	b.kb("mtu", "1280")
	b.eventually("the wire at 1280", func() bool { return harness.NetSys(b.appNS, b.wire, "mtu") == "1280" })
	// And the port keeps the rest it accepted: the next kbridge makes kb0
	// as the port now is (the MAC, all-multicast and promiscuous on, down),
	// not as interface.* and the MAC the app recorded at start say.
	b.kb("down")
	b.eventually("the wire down", func() bool { return flags(b.appNS, b.wire)&iffUp == 0 })
	b.k.Stop(true)
	if got := harness.NetSys(b.appNS, b.wire, "mtu"); got != "1280" {
		t.Fatalf("the wire's MTU is %s once kbridge stopped, want the 1280 the port accepted", got)
	}
	b.k = env.StartKbridgeConfig(t, b.cfg)
	b.k.Ready()
	took := b.eventually("the wire back at 1500, the next kb0's MTU", func() bool { return harness.NetSys(b.appNS, b.wire, "mtu") == "1500" })
	b.k.WaitLog(`msg="the app's port took the interface's MTU at start" interface=`+b.ifname+` mtu=1500`, 5*time.Second)
	t.Logf("a restarted kbridge's kb0 and the port agree on 1500 again %v after it was ready", took.Round(time.Millisecond))
	b.k.WaitLog("the interface starts with the admin state the app's port accepted", time.Second)
	if got := harness.NetSys(env.NS, b.ifname, "address"); got != mac {
		t.Errorf("the restarted kbridge's %s has MAC %s, not the %s the port accepted:\n%s", b.ifname, got, mac, b.k.Log)
	}
	if f := flags(env.NS, b.ifname); f&iffUp != 0 || f&iffPromisc == 0 || f&iffAllmulti == 0 {
		t.Errorf("the restarted kbridge's %s has flags %#x, want down, promiscuous and all-multicast as the port:\n%s", b.ifname, f, b.k.Log)
	}
	// A reload of the same file changes nothing: what kb0 was made with
	// from the port is not configuration that would need a restart.
	if err := b.k.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	b.eventually("the reload", func() bool { return strings.Contains(b.k.Log.String(), "reloaded") })
	if strings.Contains(b.k.Log.String(), "restart kbridge for the rest") {
		t.Errorf("a reload of the same file named keys needing a restart:\n%s", b.k.Log)
	}
	b.kb("up")
	b.eventually("the wire up again, and kb0's address back", func() bool {
		out, _ := exec.Command("ip", "-n", env.NS, "-o", "addr", "show", "dev", b.ifname).CombinedOutput()
		return flags(b.appNS, b.wire)&iffUp != 0 && strings.Contains(string(out), "198.18.33.2/24")
	})
	b.k.Stop(true)
}

// An app that declares requests and never answers: the MTU kbridge tells it
// at start stays in the mailbox, unanswered, as the value the port must take
// before any other; every later change is set back without being posted
// over it (the log names why), so that an app that polls late applies the
// MTU kb0 has, never a change kbridge gave up on.
func TestRequestsUnansweredAreSetBack(t *testing.T) {
	b := newRequestBed(t, "unanswered", "u", "")
	// At start kbridge asks for kb0's MTU (1500) once; unanswered, it says so.
	b.k.WaitLog(`msg="the app's port did not take the interface's MTU at start`, 5*time.Second)
	b.kb("mtu", "1600")
	took := b.eventually("kb0's MTU set back to 1500", func() bool {
		return strings.Contains(b.k.Log.String(), "the app did not take the interface's change") && harness.NetSys(env.NS, b.ifname, "mtu") == "1500"
	})
	t.Logf("set back %v after the ip command", took.Round(time.Millisecond))
	b.kb("promisc", "on")
	b.eventually("kb0 not promiscuous again", func() bool {
		return strings.Count(b.k.Log.String(), "the app did not take the interface's change") >= 2 && flags(env.NS, b.ifname)&iffPromisc == 0
	})
	if n := strings.Count(b.k.Log.String(), "has not yet taken the value kbridge set back"); n != 2 {
		t.Errorf("%d changes set back for the unseen start value, want 2:\n%s", n, b.k.Log)
	}
	if l := b.app.Log.String(); strings.Contains(l, "value 1600") || strings.Contains(l, "request 4 ") ||
		!strings.Contains(l, "request 1 value 1500 ") {
		t.Errorf("the app saw more than the start MTU 1500:\n%s", l)
	}
	if got := harness.NetSys(b.appNS, b.wire, "mtu"); got != "1500" {
		t.Errorf("the wire's MTU is %s: the app applied what it never answered", got)
	}
	b.k.Stop(true)
}

// An app whose changes take longer than requests.timeout (a port stopped
// and started) while the same command changes a flag too: kbridge sets
// kb0's MTU back and posts the old MTU in place of the new one, and the
// flag's request must not overwrite that undo before the app has taken it,
// or the port would keep the MTU kb0 no longer has. An undo a stopped
// kbridge left is left for the app by the next one, not withdrawn. The app
// and kb0 end on the same values.
func TestRequestsUndoIsNotOverwrittenBeforeTheAppSawIt(t *testing.T) {
	b := newRequestBed(t, "serve", "d", "requests:\n  timeout: 400ms\n", "--request-delay", "3000")
	wait := func(what string, cond func() bool) {
		t.Helper()
		for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > 20*time.Second {
				t.Fatalf("%s: not after 20 s\napp:\n%s\nkbridge:\n%s", what, b.app.Log, b.k.Log)
			}
		}
	}
	// The MTU told at start takes the app longer than the timeout too:
	// it stays posted, and the app's late answer is taken.
	b.k.WaitLog(`msg="the app's port did not take the interface's MTU at start`, 10*time.Second)
	wait("the app's late answer at start", func() bool {
		return strings.Contains(b.app.Log.String(), "request mtu 1500: applied")
	})
	b.kb("mtu", "1400", "promisc", "on")
	b.k.WaitLog(`change=mtu value=1400 back_to=1500`, 10*time.Second)
	// The app applies 1400 late, then the 1500 that replaced it.
	wait("the app's port back at 1500 after the late 1400", func() bool {
		l := b.app.Log.String()
		return strings.Contains(l, "request mtu 1400: applied") &&
			strings.LastIndex(l, "request mtu 1500: applied") > strings.Index(l, "request mtu 1400: applied") &&
			harness.NetSys(b.appNS, b.wire, "mtu") == "1500"
	})
	if got := harness.NetSys(env.NS, b.ifname, "mtu"); got != "1500" {
		t.Errorf("kb0's MTU is %s, the port's 1500:\n%s", got, b.k.Log)
	}
	// The flag's change came while the app still applied 1400: set back
	// unasked, the reason logged, never posted over the undo.
	if flags(env.NS, b.ifname)&iffPromisc != 0 || strings.Contains(b.app.Log.String(), "request promisc") {
		t.Errorf("the flag's change was kept or posted over the undo:\napp:\n%s\nkbridge:\n%s", b.app.Log, b.k.Log)
	}
	if !strings.Contains(b.k.Log.String(), `change=promisc value=on back_to=off answer="the app has not yet taken the value kbridge set back`) {
		t.Errorf("the flag was set back without the reason in the log:\n%s", b.k.Log)
	}

	// kbridge stopped while the app is still applying a change it gave up
	// on: the next kbridge leaves the undo for the app.
	b.kb("allmulticast", "on")
	b.k.WaitLog(`change=allmulticast value=on back_to=off`, 10*time.Second)
	b.k.Stop(true)
	b.k = env.StartKbridgeConfig(t, b.cfg)
	b.k.Ready()
	b.k.WaitLog("the previous kbridge's undo waits for the app", time.Second)
	wait("the app's port back to all-multicast off after the late on", func() bool {
		l := b.app.Log.String()
		return strings.LastIndex(l, "request allmulticast 0: applied") > strings.Index(l, "request allmulticast 1: applied") &&
			strings.Contains(l, "request allmulticast 1: applied") && flags(b.appNS, b.wire)&iffAllmulti == 0
	})
	if flags(env.NS, b.ifname)&iffAllmulti != 0 {
		t.Errorf("kb0 is all-multicast, the port not:\n%s", b.k.Log)
	}
	b.k.Stop(true)
}

// An app that serves no requests (--requests none, as an app of an older
// kbridge.h): the MTU is set back as before, the rest left to the admin.
func TestRequestsNotServedKeepTheOldRules(t *testing.T) {
	b := newRequestBed(t, "none", "n", "")
	b.kb("mtu", "1600")
	b.eventually("kb0's MTU set back to 1500", func() bool {
		return strings.Contains(b.k.Log.String(), "MTU was changed outside kbridge") && harness.NetSys(env.NS, b.ifname, "mtu") == "1500"
	})
	b.kb("promisc", "on")
	time.Sleep(200 * time.Millisecond)
	if flags(env.NS, b.ifname)&iffPromisc == 0 {
		t.Errorf("kb0's promiscuous flag was set back with no app to ask:\n%s", b.k.Log)
	}
	if strings.Contains(b.app.Log.String(), "request ") {
		t.Errorf("the app saw a request:\n%s", b.app.Log)
	}
	b.k.Stop(true)
}

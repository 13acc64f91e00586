package xdp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kbridge/kbridge/tests/harness"
)

// The XDP test bed: a "NIC" veth in kbx-dut whose peer lives in kbx-remote,
// the remote host. Names start with kbx- so they never meet the project test
// bed (kbt-*); addresses are in 198.18.0.0/15 and exist only in here.
//
//	kbx-remote                         kbx-dut
//	kbx-wire 198.19.77.1/24 <-veth-> kbx-nic (XDP) ==redirect==> kb0-x | kb0 198.19.77.2/24
const (
	nsDUT    = "kbx-dut"
	nsRemote = "kbx-remote"
	nsDUT2   = "kbx-dut2" // a second host with a NIC of the same name
	nicName  = "kbx-nic"
	wireName = "kbx-wire"
	remoteIP = "198.19.77.1"
	kb0IP    = "198.19.77.2"
	bedPins  = DefaultPinRoot + "/kbridge/" + nicName
)

func requireRootBed(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: namespaces, veths, XDP (skipped with -short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and attaches XDP programs")
	}
	for _, tool := range []string{"ip", "ping", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

// sh runs a command, failing t with its output when it fails.
var sh = harness.Run

// removeBed removes whatever a previous (possibly crashed) run left: the
// namespaces take their interfaces and XDP links with them; pins live in
// bpffs and are removed by name.
func removeBed() {
	for _, ns := range []string{nsDUT, nsRemote, nsDUT2} {
		exec.Command("ip", "netns", "del", ns).Run()
	}
	removePins(bedPins)
	os.Remove(bedPins)
	os.Remove(filepath.Dir(bedPins)) // only if empty
}

// newBed builds the namespaces and the NIC veth. The remote end gets what a
// veth peer needs to talk to an XDP-redirecting host: tx checksum off (an
// XDP frame carries no checksum state to complete) and GRO on (NAPI, so
// native redirects into kbx-nic, whose peer it is, are not dropped).
func newBed(t *testing.T) {
	t.Helper()
	requireRootBed(t)
	removeBed()
	t.Cleanup(removeBed)
	harness.Wire{DUT: nsDUT, Peer: nsRemote, NIC: nicName, PeerIf: wireName, PeerAddr: remoteIP, GRO: true}.Up(t)
}

// inNS runs f on a fresh OS thread switched into the named namespace.
var inNS = harness.InNS

// bedConfig is the Config the integration tests start from.
func bedConfig() Config {
	return Config{
		NIC:         nicName,
		Addresses:   []string{kb0IP + "/24"},
		FastPath:    []Rule{{Proto: "udp", Ports: "4789"}},
		XSKFallback: FallbackDrop,
	}
}

// attachBed attaches in kbx-dut and closes the Path at cleanup.
func attachBed(t *testing.T, cfg Config) *Path {
	t.Helper()
	var p *Path
	err := inNS(nsDUT, func() (err error) {
		p, err = Attach(cfg)
		return err
	})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// linkIn looks an interface up in a namespace.
func linkIn(ns, name string) (netlink.Link, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	return nl.LinkByName(name)
}

func linkGone(ns, name string) error {
	_, err := linkIn(ns, name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("%s still exists in %s", name, ns)
	}
	return err
}

// pinsGone reports pins or the pin directory that are still there.
func pinsGone(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return fmt.Errorf("%s still exists, holding %v", dir, names)
}

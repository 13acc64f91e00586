package ports

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/ring/ringtest"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// One kbridge with discover serves the port its file names and each port
// the app creates while it runs, each through an interface of its own
// named after it, frames both ways through each; a port the app frees goes
// (its free returns once kbridge let go, the interface follows) without
// ending kbridge, and is served again when the app makes it anew. The
// pools are whole at the end (dpdkbed.NewPort's cleanup).
func TestDiscoverServesPortsTheAppCreatesAndFrees(t *testing.T) {
	first, k := startDiscovering(t)
	var more []*dpdkbed.Port

	for i := 0; i < 3; i++ {
		p := env.NewPort(t)
		created := time.Now()
		if err := p.Port.WaitServed(5 * time.Second); err != nil {
			t.Fatalf("port %s: %v", p.Name, err)
		}
		t.Logf("port %s served %v after kbridge_port_create returned (the doorbell)", p.Name, time.Since(created).Round(time.Microsecond))
		waitLink(t, k, p.Name, true)
		more = append(more, p)
	}

	// A link the app reports is followed when it rings the doorbell
	// (kbridge_port_set_link), not at the tick's next look, a second on.
	for _, up := range []bool{false, true} {
		reported := time.Now()
		more[0].Port.SetLink(up, 10000, true)
		waitCarrier(t, k, more[0].Name, up)
		t.Logf("port %s: the carrier followed the link reported %v after %v", more[0].Name, up, time.Since(reported).Round(time.Microsecond))
	}

	ifname := map[string]string{first.Name: k.Ifname}
	for _, p := range more {
		ifname[p.Name] = p.Name
	}
	for _, p := range append([]*dpdkbed.Port{first}, more...) {
		roundTrip(t, k, p.Port, p.Name, ifname[p.Name], 0)
	}

	gone := more[1]
	took := gone.Free()
	t.Logf("kbridge_port_free of a served port took %v", took)
	waitLink(t, k, gone.Name, false)
	if !k.Running() {
		t.Fatalf("kbridge exited when the app freed one of its ports:\n%s", k.Log)
	}
	if st := statuses(t, k); slices.ContainsFunc(st, func(s daemon.Status) bool { return s.Port == gone.Name }) {
		t.Errorf("status still lists freed port %s", gone.Name)
	}
	// The same name again, on the same pool.
	again, err := ringtest.NewPort(gone.Name, 1, 1024, gone.Pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := again.Free(); err != nil {
			t.Error(err)
		}
	})
	waitLink(t, k, gone.Name, true)
	roundTrip(t, k, again, gone.Name, gone.Name, 0)
	for _, p := range []*dpdkbed.Port{first, more[0], more[2]} {
		roundTrip(t, k, p.Port, p.Name, ifname[p.Name], 8)
	}
	k.Stop(true)
}

// Without discover, the ports the file names are served, and one the app
// frees ends kbridge (exit non-zero, naming it), as one port's free ends a
// kbridge of one port: systemd's restart then waits for the port again.
func TestNamedPortsEndWithOne(t *testing.T) {
	a, b := env.NewPort(t), env.NewPort(t)
	c := env.PortConfig(a)
	bIf := fmt.Sprintf("%sx", b.Name)
	c.More = fmt.Sprintf("ports:\n  - port: %s\n    interface: {name: %s}\n", b.Name, bIf)
	k := env.StartKbridgeConfig(t, c)
	k.Ready()
	roundTrip(t, k, a.Port, a.Name, k.Ifname, 0)
	roundTrip(t, k, b.Port, b.Name, bIf, 0)
	b.Free()
	if !k.ExitedWithin(5 * time.Second) {
		t.Fatalf("kbridge runs on after the app freed a port its file names:\n%s", k.Log)
	}
	if out := k.Log.String(); k.ExitCode() <= 0 || !strings.Contains(out, "port "+b.Name+": the DPDK app is freeing port "+b.Name) {
		t.Errorf("exit %v, want non-zero naming port %s:\n%s", k.Err(), b.Name, out)
	}
	if pid := a.Port.OwnerPID(); pid != 0 {
		t.Errorf("port %s still owned by pid %d after kbridge exited", a.Name, pid)
	}
}

// A port discover cannot serve (an interface of its name exists, a veth,
// which kbridge does not take) is named in the status's failed list while the
// others are served; once the name is free it is served, at the next retry.
func TestDiscoveredPortThatFailsLeavesTheOthers(t *testing.T) {
	first, k := startDiscovering(t)
	name := fmt.Sprintf("kbps%dd", env.Next())
	if out, err := exec.Command("ip", "-n", env.NS, "link", "add", name, "type", "veth", "peer", "name", name+"p").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "-n", env.NS, "link", "del", name).Run() })
	blocked, err := ringtest.NewPort(name, 1, 1024, first.Pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := blocked.Free(); err != nil {
			t.Error(err)
		}
	})
	var failed []daemon.PortFailed
	harness.WaitUntil(t, "the status to name the port that failed", 10*time.Second, func() bool {
		failed = setStatus(t, k).Failed
		return len(failed) == 1
	})
	if f := failed[0]; f.Port != name || f.Err == "" {
		t.Errorf("failed %+v, want port %s with its error", f, name)
	}
	t.Logf("failed: %s: %s", failed[0].Port, failed[0].Err)
	if err := blocked.WaitServed(time.Second); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("the app's wait for the port it cannot have served: %v, want kbridge's refusal", err)
	} else {
		t.Logf("the app was told: %v", err)
	}
	roundTrip(t, k, first.Port, first.Name, k.Ifname, 0)
	if out, err := exec.Command("ip", "-n", env.NS, "link", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("ip link del: %v: %s", err, out)
	}
	harness.WaitUntil(t, "the port to be served once its name is free", 20*time.Second, func() bool {
		return slices.ContainsFunc(statuses(t, k), func(s daemon.Status) bool { return s.Port == name })
	})
	if err := blocked.WaitServed(time.Second); err != nil {
		t.Errorf("the app's wait for the port served at last: %v", err)
	}
	roundTrip(t, k, blocked, name, name, 0)
	k.Stop(true)
}

// startDiscovering makes a port and starts a kbridge serving it with
// discover: true.
func startDiscovering(t *testing.T) (*dpdkbed.Port, *dpdkbed.Kbridge) {
	t.Helper()
	first := env.NewPort(t)
	c := env.PortConfig(first)
	c.More = "discover: true\n"
	k := env.StartKbridgeConfig(t, c)
	k.Ready()
	return first, k
}

// waitLink waits until interface name exists in the namespace (up: true)
// or is gone.
func waitLink(t *testing.T, k *dpdkbed.Kbridge, name string, up bool) {
	t.Helper()
	harness.WaitUntil(t, fmt.Sprintf("interface %s there: %v", name, up), 10*time.Second, func() bool {
		k.CheckRunning(t)
		_, err := env.Link(name)
		return (err == nil) == up
	})
}

// waitCarrier waits until interface name's carrier is on or off.
func waitCarrier(t *testing.T, k *dpdkbed.Kbridge, name string, on bool) {
	t.Helper()
	harness.WaitUntil(t, fmt.Sprintf("interface %s's carrier %v", name, on), 10*time.Second, func() bool {
		k.CheckRunning(t)
		l, err := env.Link(name)
		return err == nil && (l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0) == on
	})
}

// roundTrip sends 8 frames from the app's port to the kernel and 4 from
// interface ifname to the app's port, and waits for both: the port's
// to_kernel count in kbridge's status reaching base + 8, the app
// collecting 4 frames.
func roundTrip(t *testing.T, k *dpdkbed.Kbridge, p *ringtest.Port, port, ifname string, base uint64) {
	t.Helper()
	if q, err := p.Inject(0, dpdkbed.Frames(8), ringtest.InjectOpts{}); err != nil || q != 8 {
		t.Fatalf("port %s: inject: queued %d: %v", port, q, err)
	}
	harness.WaitUntil(t, "kbridge to move port "+port+"'s frames", 5*time.Second, func() bool {
		for _, s := range statuses(t, k) {
			if s.Port == port && len(s.Queues) > 0 {
				return s.Queues[0].ToKernelPackets >= base+8
			}
		}
		return false
	})
	kk := *k
	kk.Ifname = ifname
	kk.Send(4)
	var got int
	harness.WaitUntil(t, "port "+port+" to receive the interface's frames", 5*time.Second, func() bool {
		got += len(dpdkbed.OnlyTest(p.Collect(0, 32)))
		return got >= 4
	})
}

func statuses(t *testing.T, k *dpdkbed.Kbridge) []daemon.Status {
	t.Helper()
	st, err := daemon.ReadStatuses(k.Sock)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func setStatus(t *testing.T, k *dpdkbed.Kbridge) daemon.SetStatus {
	t.Helper()
	raw, err := daemon.ReadStatusRaw(k.Sock)
	if err != nil {
		t.Fatal(err)
	}
	var s daemon.SetStatus
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

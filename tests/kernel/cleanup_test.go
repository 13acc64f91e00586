package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// kbridge cleanup (systemd's ExecStopPost, after a refused start too) with
// a silent socket of its own beside another kbridge's live TAP of the same
// name leaves that TAP, and the other kbridge moves traffic on; a TAP a
// kill -9'd kbridge left (made persistent here, so that it outlives its
// queues) is an orphan, and cleanup removes it.
func TestKernelCleanupLeavesALiveTAP(t *testing.T) {
	b := env.NewBed(t, dpdkbed.Opts{Iface: kfIface, YAML: ""})
	other := dpdkbed.Config{Prefix: b.Env.Prefix, Port: "kbftother", Ifname: b.Ifname,
		Sock: filepath.Join(t.TempDir(), "kbridge.sock")}
	cfg := filepath.Join(t.TempDir(), "kbridge.yaml")
	other.Write(t, cfg)
	out, err := kfCleanup(b, cfg)
	if err != nil {
		t.Fatalf("cleanup beside a live TAP: %v\n%s", err, out)
	}
	t.Logf("cleanup beside a live kbridge's TAP: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "left "+b.Ifname+" in place") || !strings.Contains(out, fmt.Sprint("kbridge pid ", b.Kb.Pid(), " (")) {
		t.Errorf("cleanup did not say it left the TAP held by kbridge pid %d:\n%s", b.Kb.Pid(), out)
	}
	if _, err := b.Link(); err != nil {
		t.Fatalf("cleanup removed another kbridge's live TAP: %v", err)
	}
	kfRoundTrip(t, b, 1)

	// The orphan: a kbridge killed, its TAP kept by the persist flag.
	o := env.NewBed(t, dpdkbed.Opts{Iface: kfIface, YAML: ""})
	err = dpdkbed.InNS(o.Env.NS, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq(o.Ifname)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("attach a queue: %w", err)
		}
		return unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	kb := o.Kb
	o.Kb = nil
	kb.Kill()
	if _, err := o.Link(); err != nil {
		t.Fatalf("the persistent TAP went with its kbridge: %v", err)
	}
	out, err = kfCleanup(o, o.Cfg)
	t.Logf("cleanup after a kill -9: %s", strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("cleanup of an orphan: %v\n%s", err, out)
	}
	if _, err := o.Link(); err == nil {
		t.Errorf("cleanup left the orphaned TAP %s:\n%s", o.Ifname, out)
	}
	if _, err := b.Link(); err != nil {
		t.Errorf("the live TAP went too: %v", err)
	}
}

// kfCleanup runs kbridge cleanup --config cfg in the bed's namespace.
func kfCleanup(b *dpdkbed.Bed, cfg string) (string, error) {
	cmd := exec.Command("ip", "netns", "exec", b.Env.NS, b.Env.Bin, "cleanup", "--config", cfg)
	cmd.Env = os.Environ()
	o, err := cmd.CombinedOutput()
	return string(o), err
}

// kbridge cleanup under kbridge.service's capability bounding set leaves a
// TAP another root process holds (one with every capability, whose fds the
// kernel then refuses to show cleanup: EACCES), though the TAP carries no
// kbridge mark; once its holder is gone, the kernel removes it.
func TestCleanupUnderTheUnitsCapabilitiesLeavesAHeldTAP(t *testing.T) {
	env.NeedRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux): ", err)
	}
	bset := unitBoundingSet(t)
	name := fmt.Sprintf("kbhold%d", env.Next())
	var tun *os.File
	err := dpdkbed.InNS(env.NS, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("make %s: %w", name, err)
		}
		tun = os.NewFile(uintptr(fd), "tun")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "600")
	holder.ExtraFiles = []*os.File{tun}
	err = holder.Start()
	tun.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		holder.Process.Kill()
		holder.Wait()
	}()
	cfg := filepath.Join(t.TempDir(), "kbridge.yaml")
	dpdkbed.Config{Prefix: env.Prefix, Port: "kbfthold", Ifname: name, Sock: filepath.Join(t.TempDir(), "kbridge.sock")}.Write(t, cfg)
	cmd := exec.Command("ip", "netns", "exec", env.NS, "setpriv", "--bounding-set", bset, "--no-new-privs", env.Bin, "cleanup", "--config", cfg)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	t.Logf("cleanup with bounding set %s beside pid %d's TAP: %s", bset, holder.Process.Pid, strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	if gone, show := harness.LinkGone(env.NS, name); gone {
		t.Fatalf("cleanup deleted %s, which pid %d holds: %s\n%s", name, holder.Process.Pid, show, out)
	}
	if !strings.Contains(string(out), "left "+name+" in place") {
		t.Errorf("cleanup did not say it left %s in place:\n%s", name, out)
	}
	holder.Process.Kill()
	holder.Wait()
	harness.WaitUntil(t, "the kernel removes the TAP with its last queue", 5*time.Second, func() bool {
		gone, _ := harness.LinkGone(env.NS, name)
		return gone
	})
}

// unitBoundingSet is deploy/kbridge.service's CapabilityBoundingSet= as
// setpriv's --bounding-set takes it ("-all,+net_admin,...").
func unitBoundingSet(t *testing.T) string {
	t.Helper()
	unit, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "deploy", "kbridge.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			set := "-all"
			for _, c := range strings.Fields(v) {
				set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
			}
			return set
		}
	}
	t.Fatal("deploy/kbridge.service has no CapabilityBoundingSet=")
	return ""
}

// Package crossver tests kbridge across DPDK releases on one machine: the
// host's (Debian 12: 22.11) and each Debian root's that tests/dpdkroot
// makes (24.11, 25.11). Mode vhost needs no match: kbridge built on one
// DPDK serves each other DPDK's unmodified dpdk-testpmd and the reference
// app through virtio-user (ping, and a TCP transfer checked by SHA-256
// each way). Ring mode needs an exact match: kbridge built on one DPDK,
// started against another DPDK's primary, refuses with both versions named
// and exit status 2, before its EAL starts (and crashes as it once did).
//
// The test runs on the host, inside tests/dpdkroot/run.sh --host, which
// mounts the roots and exports KBR_ROOTS (RELEASE=ROOT ...) and KBR_SRC;
// programs of a root run through chroot. Without KBR_ROOTS it skips. Root
// only:
//
//	flock /tmp/kbridge-root.lock tests/dpdkroot/ci.sh crossver
package crossver

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

const (
	dut, peer = "kbxv-dut", "kbxv-peer"
	nic, wire = "kbxv-nic", "kbxv-wire"
	ifname    = "kbxv0"
	kbAddr    = "198.18.14.2"
	peerAddr  = "198.18.14.1"
	appPrefix = "kbxv-app"
	sockDir   = "/run/kbxv" // in /run: the root shares it with the host
)

// side is one DPDK build: the host's or a root's.
type side struct {
	name    string // "host" or "root RELEASE"
	dpdk    string // pkg-config --modversion libdpdk
	kbridge string // the kbridge binary, in the side's own file system
	refapp  string
	chroot  string // "" for the host, the root's path otherwise
}

// cmd returns args run on the side (in namespace ns when not "").
func (s side) cmd(ns string, args ...string) []string {
	if s.chroot != "" {
		args = append([]string{"chroot", s.chroot}, args...)
	}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	return args
}

var sides struct {
	once sync.Once
	all  []side
	skip string
}

// allSides finds every build: the host's bin/ (make build) and each root's
// (tests/dpdkroot/ci.sh builds them), with their DPDK versions, which must
// all differ.
func allSides(t *testing.T) []side {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: run it through tests/dpdkroot/ci.sh")
	}
	sides.once.Do(func() {
		roots, src := strings.Fields(os.Getenv("KBR_ROOTS")), os.Getenv("KBR_SRC")
		if len(roots) == 0 || src == "" {
			sides.skip = "KBR_ROOTS unset: run it through tests/dpdkroot/ci.sh (the DPDK roots beside the host's DPDK)"
			return
		}
		repo := harness.RepoRoot(t)
		all := []side{{name: "host", kbridge: filepath.Join(repo, "bin/kbridge"), refapp: filepath.Join(repo, "bin/kbridge-refapp")}}
		for _, r := range roots {
			release, dir, ok := strings.Cut(r, "=")
			if !ok {
				sides.skip = fmt.Sprintf("KBR_ROOTS=%q: want RELEASE=ROOT pairs", os.Getenv("KBR_ROOTS"))
				return
			}
			all = append(all, side{name: "root " + release, kbridge: filepath.Join(src, "bin/kbridge"), refapp: filepath.Join(src, "bin/kbridge-refapp"), chroot: dir})
		}
		seen := map[string]string{}
		for i := range all {
			s := &all[i]
			for _, bin := range []string{s.kbridge, s.refapp} {
				if _, err := os.Stat(filepath.Join(s.chroot, bin)); err != nil {
					sides.skip = fmt.Sprintf("%s: %v: make build on that side first (tests/dpdkroot/ci.sh does)", s.name, err)
					return
				}
			}
			pc := s.cmd("", "pkg-config", "--modversion", "libdpdk")
			out, err := exec.Command(pc[0], pc[1:]...).Output()
			if err != nil {
				sides.skip = fmt.Sprintf("%s: pkg-config: %v", s.name, err)
				return
			}
			s.dpdk = strings.TrimSpace(string(out))
			if other, dup := seen[s.dpdk]; dup {
				sides.skip = fmt.Sprintf("%s and %s run the same DPDK %s: nothing to cross", other, s.name, s.dpdk)
				return
			}
			seen[s.dpdk] = s.name
		}
		sides.all = all
	})
	if sides.skip != "" {
		t.Skip(sides.skip)
	}
	return sides.all
}

// pairs are the ordered pairs of different sides: kbridge of the first,
// the app of the second.
func pairs(all []side) [][2]side {
	var out [][2]side
	for _, kb := range all {
		for _, app := range all {
			if kb.name != app.name {
				out = append(out, [2]side{kb, app})
			}
		}
	}
	return out
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// syncBuf is a child's log, written by it and read by the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a child process, stopped by its pid when the test ends.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *syncBuf
	exited chan struct{}
	err    error
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: &syncBuf{}, exited: make(chan struct{})}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// testpmd without -i ends when its stdin does: hold it open.
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("%s ignored SIGTERM", name)
		}
		stdin.Close()
	})
	return p
}

// waitLog waits until the child's log holds s; it fails if the child exits.
func (p *proc) waitLog(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.log.String(), s) {
		select {
		case <-p.exited:
			t.Fatalf("%s exited (%v) before it said %q:\n%s", p.name, p.err, s, p.log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not say %q within %v:\n%s", p.name, s, d, p.log)
		}
	}
}

// wireUp makes the two namespaces and the veth between them (the app's NIC
// in dut, the peer's end with peerAddr in peer), removed at the end.
func wireUp(t *testing.T) {
	for _, ns := range []string{dut, peer} {
		_ = exec.Command("ip", "netns", "del", ns).Run() // a crashed run's leftovers
	}
	t.Cleanup(func() {
		for _, ns := range []string{dut, peer} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	run(t, "ip", "netns", "add", dut)
	run(t, "ip", "netns", "add", peer)
	run(t, "ip", "link", "add", nic, "netns", dut, "type", "veth", "peer", "name", wire, "netns", peer)
	run(t, "ip", "-n", dut, "link", "set", "lo", "up")
	run(t, "ip", "-n", dut, "link", "set", nic, "up")
	run(t, "ip", "-n", peer, "link", "set", "lo", "up")
	run(t, "ip", "-n", peer, "addr", "add", peerAddr+"/24", "dev", wire)
	run(t, "ip", "-n", peer, "link", "set", wire, "up")
	// net_af_packet completes no checksum the peer left partial.
	run(t, "ip", "netns", "exec", peer, "ethtool", "-K", wire, "tx", "off")
}

// cleanPrefix removes what a primary with appPrefix leaves behind.
func cleanPrefix(t *testing.T) {
	rm := func() {
		_ = os.RemoveAll("/run/dpdk/" + appPrefix)
		files, _ := filepath.Glob("/dev/hugepages/" + appPrefix + "map_*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	}
	rm()
	t.Cleanup(rm)
}

// writeFile writes a configuration readable from both sides: under
// sockDir, which the root shares.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	if err := os.MkdirAll(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sockDir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
	return path
}

// TestVhostAcrossVersions: kbridge of each side serves, in mode vhost,
// each other side's testpmd and reference app; traffic crosses both ways.
func TestVhostAcrossVersions(t *testing.T) {
	for _, pair := range pairs(allSides(t)) {
		kb, app := pair[0], pair[1]
		for _, which := range []string{"testpmd", "refapp"} {
			t.Run(fmt.Sprintf("kbridge %s (DPDK %s) serves %s of DPDK %s", kb.name, kb.dpdk, which, app.dpdk), func(t *testing.T) {
				vhostAcross(t, kb, app, which)
			})
		}
	}
}

func vhostAcross(t *testing.T, kb, app side, which string) {
	wireUp(t)
	cleanPrefix(t)
	sock := filepath.Join(sockDir, ifname+".sock")
	_ = os.Remove(sock)
	t.Cleanup(func() { _ = os.Remove(sock) })
	ctl := filepath.Join(sockDir, "ctl.sock")
	cfg := writeFile(t, "kbridge-vhost.yaml", fmt.Sprintf(`mode: vhost
interface:
  name: %s
  mac: "02:6b:78:76:00:02"
  addresses: [%s/24]
  up: true
  offload: true
workers:
  cpus: [0]
stats:
  socket: %s
  metrics: ""
vhost:
  socket: %s
  queues: 1
  client: false
`, ifname, kbAddr, ctl, sock))
	k := start(t, "kbridge", kb.cmd(dut, kb.kbridge, "run", "--config", cfg)...)
	k.waitLog(t, "bridge running", 20*time.Second)

	var a *proc
	eal := []string{"--file-prefix", appPrefix, "--proc-type", "primary", "--no-pci", "--single-file-segments", "-m", "256"}
	if which == "testpmd" {
		args := append([]string{"taskset", "-c", "0,1", "stdbuf", "-oL", "-eL", "dpdk-testpmd", "--lcores", "0@0,1@1", "--main-lcore", "0"}, eal...)
		args = append(args, "--vdev", "net_virtio_user0,path="+sock+",queues=1", "--vdev", "net_af_packet0,iface="+nic,
			"--", "--forward-mode=io", "--auto-start", "--nb-cores=1", "--rxq=1", "--txq=1",
			"--total-num-mbufs=16384", "--disable-link-check")
		a = start(t, "testpmd", app.cmd(dut, args...)...)
		a.waitLog(t, "Press enter to exit", 30*time.Second)
	} else {
		args := append([]string{"taskset", "-c", "1", "stdbuf", "-oL", "-eL", app.refapp, "-l", "1"}, eal...)
		args = append(args, "--vdev", "net_af_packet0,iface="+nic, "--", "--pool-size", "16383", "--vhost", sock)
		a = start(t, "kbridge-refapp", app.cmd(dut, args...)...)
		a.waitLog(t, "kbridge-refapp: ready", 30*time.Second)
	}
	k.waitLog(t, "vhost-user frontend connected", 10*time.Second)

	deadline := time.Now().Add(10 * time.Second)
	for exec.Command("ip", "netns", "exec", peer, "ping", "-c", "1", "-W", "1", kbAddr).Run() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no answer from %s through %s and kbridge\nkbridge:\n%s\n%s:\n%s", kbAddr, which, k.log, which, a.log)
		}
	}
	run(t, "ip", "netns", "exec", peer, "ping", "-c", "5", "-i", "0.1", "-W", "2", kbAddr)
	const n = 32 << 20
	d1 := harness.BulkTCP(t, peer, dut, kbAddr, 5201, n)
	d2 := harness.BulkTCP(t, dut, peer, peerAddr, 5202, n)
	t.Logf("%d MB each way, SHA-256 checked: peer -> kbridge %v, kbridge -> peer %v", n>>20, d1.Round(time.Millisecond), d2.Round(time.Millisecond))
	select {
	case <-k.exited:
		t.Fatalf("kbridge exited (%v):\n%s", k.err, k.log)
	default:
	}
}

// TestRingRefusesOtherVersion: kbridge of each side, started in ring mode
// against each other side's reference app (a DPDK primary), says which
// versions differ and how to build, and exits 2 without crashing.
func TestRingRefusesOtherVersion(t *testing.T) {
	for _, pair := range pairs(allSides(t)) {
		kb, app := pair[0], pair[1]
		t.Run(fmt.Sprintf("kbridge %s (DPDK %s) against an app of DPDK %s", kb.name, kb.dpdk, app.dpdk), func(t *testing.T) {
			ringRefuses(t, kb, app)
		})
	}
}

func ringRefuses(t *testing.T, kb, app side) {
	cleanPrefix(t)
	_ = exec.Command("ip", "netns", "del", dut).Run()
	run(t, "ip", "netns", "add", dut)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", dut).Run() })
	a := start(t, "kbridge-refapp", app.cmd(dut, app.refapp, "-l", "1", "--file-prefix", appPrefix,
		"--proc-type", "primary", "--no-pci", "--single-file-segments", "-m", "128", "--vdev", "net_null0",
		"--", "--port", ifname)...)
	a.waitLog(t, "kbridge-refapp: ready", 30*time.Second)
	cfg := writeFile(t, "kbridge-ring.yaml", fmt.Sprintf(`dpdk:
  file_prefix: %s
  wait: 1s
port: %s
interface:
  name: %s
workers:
  cpus: [0]
stats:
  socket: %s
  metrics: ""
`, appPrefix, ifname, ifname, filepath.Join(sockDir, "ctl.sock")))
	args := kb.cmd(dut, kb.kbridge, "run", "--config", cfg)
	c := exec.Command(args[0], args[1:]...)
	var out syncBuf
	c.Stdout, c.Stderr = &out, &out
	done := make(chan error, 1)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = c.Process.Kill()
		<-done
		t.Fatalf("kbridge ran on against an app of another DPDK:\n%s", &out)
	}
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	want := fmt.Sprintf("the app runs DPDK %s, this kbridge was built with DPDK %s: build kbridge against the app's DPDK (PKG_CONFIG_PATH=", app.dpdk, kb.dpdk)
	log := out.String()
	if code != 2 || !strings.Contains(log, want) {
		t.Fatalf("kbridge exited %d (%v), want 2 and %q:\n%s", code, err, want, log)
	}
	for _, bad := range []string{"SIGSEGV", "panic", "goroutine "} {
		if strings.Contains(log, bad) {
			t.Errorf("kbridge's refusal shows %q:\n%s", bad, log)
		}
	}
	if strings.Contains(log, "EAL:") {
		t.Errorf("kbridge started its EAL before it refused:\n%s", log)
	}
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.Contains(l, want) {
			t.Logf("kbridge said: %s", l)
		}
	}
	if _, err := os.Stat("/run/dpdk/" + appPrefix + "/config"); err != nil {
		t.Errorf("the app's runtime directory vanished: %v", err)
	}
	select {
	case <-a.exited:
		t.Errorf("the app exited when kbridge refused (%v):\n%s", a.err, a.log)
	default:
	}
}

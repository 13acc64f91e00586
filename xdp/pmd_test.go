package xdp

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// TestPMDLoader runs dpdk-testpmd on the NIC through net_af_xdp with
// kbridge's object (xdp_prog=), as a DPDK app would in production with
// loader: pmd. The PMD attaches its copy of kbridge_steer, which uses
// kbridge's pinned maps: fast-path UDP reaches testpmd, ping reaches kb0.
func TestPMDLoader(t *testing.T) {
	if _, err := exec.LookPath("dpdk-testpmd"); err != nil {
		t.Skip("needs dpdk-testpmd")
	}
	newBed(t)
	cfg := bedConfig()
	cfg.Loader = LoaderPMD
	cfg.XSKFallback = FallbackDrop
	p := attachBed(t, cfg)
	if p.Mode() != "" {
		t.Errorf("loader pmd: Mode %q, want none (the PMD attaches)", p.Mode())
	}
	obj := p.Config().ObjectFile
	if b, err := os.ReadFile(obj); err != nil || !bytes.Equal(b, _SteerBytes) {
		t.Fatalf("object file %s: %v", obj, err)
	}

	pmd := startTestpmd(t, obj)
	if !waitNICProgram() {
		t.Fatalf("no XDP program appeared on %s\n%s", nicName, pmd.output())
	}
	if err := pingFromRemote(3, kb0IP); err != nil {
		t.Fatalf("exception path with the PMD's program: %v\n%s", err, pmd.output())
	}
	fast := udpListen(t, 4789)
	before, _ := p.Stats()
	udpSend(t, kb0IP, 4789, 50)
	if n := udpCount(fast, 300*time.Millisecond); n != 0 {
		t.Errorf("fast-path UDP reached kb0: %d datagrams", n)
	}
	after, _ := p.Stats()
	if d := after.FastPath.Packets - before.FastPath.Packets; d != 50 {
		t.Errorf("fast_path grew by %d, want 50 (stats map shared with the PMD's program?)", d)
	}
	rx := pmd.stop(t)
	if rx < 50 {
		t.Errorf("testpmd received %d packets, want >= 50\n%s", rx, pmd.output())
	}
	t.Logf("testpmd rx %d; stats %+v", rx, after)
	nic, _ := linkIn(nsDUT, nicName)
	t.Logf("after testpmd exit: xdp %+v promisc %d", nic.Attrs().Xdp, nic.Attrs().Promisc)
}

// TestPMDStartsFirst: the DPDK app may start before kbridge. Its libbpf then
// creates and pins the maps; Attach finds its kbridge_steer on the NIC and
// adopts them.
func TestPMDStartsFirst(t *testing.T) {
	if _, err := exec.LookPath("dpdk-testpmd"); err != nil {
		t.Skip("needs dpdk-testpmd")
	}
	newBed(t)
	if pinsPresent(DefaultPinRoot) {
		t.Skip("maps already pinned in " + DefaultPinRoot + ": another loader-pmd path is running")
	}
	obj := filepath.Join(t.TempDir(), "steer.o")
	if err := os.WriteFile(obj, Object(), 0o644); err != nil {
		t.Fatal(err)
	}
	pmd := startTestpmd(t, obj)
	if !waitNICProgram() {
		t.Fatalf("no XDP program appeared on %s\n%s", nicName, pmd.output())
	}
	cfg := bedConfig()
	cfg.Loader = LoaderPMD
	cfg.ObjectFile = obj
	p := attachBed(t, cfg)
	if err := pingFromRemote(3, kb0IP); err != nil {
		t.Fatalf("exception path: %v", err)
	}
	udpSend(t, kb0IP, 4789, 20)
	s, _ := p.Stats()
	if s.FastPath.Packets != 20 {
		t.Errorf("fast_path %d, want 20", s.FastPath.Packets)
	}
	if rx := pmd.stop(t); rx < 20 {
		t.Errorf("testpmd received %d packets, want >= 20", rx)
	}
}

type testpmd struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   harness.Buffer
}

func (p *testpmd) output() string { return p.out.String() }

// startTestpmd runs testpmd in rxonly mode, forwarding on the app's CPU
// (the highest one, as in the project test bed), without hugepages so that it takes
// nothing from the bed's DPDK apps.
func startTestpmd(t *testing.T, obj string) *testpmd {
	t.Helper()
	// The main lcore only waits for stdin; the forwarding lcore polls.
	lcores := fmt.Sprintf("0,%d", runtime.NumCPU()-1)
	vdev := fmt.Sprintf("net_af_xdp0,iface=%s,start_queue=0,queue_count=1,xdp_prog=%s", nicName, obj)
	p := &testpmd{}
	// nsenter, not "ip netns exec": the latter mounts a fresh /sys in a new
	// mount namespace, which hides bpffs and with it kbridge's pins.
	p.cmd = exec.Command("nsenter", "--net=/var/run/netns/"+nsDUT, "dpdk-testpmd",
		"-l", lcores, "--no-huge", "-m", "256", "--no-pci", "--file-prefix", "kbx-pmd",
		"--vdev", vdev, "--", "--forward-mode=rxonly", "--total-num-mbufs=4096")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil { // testpmd exits when stdin closes
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

var rxRE = regexp.MustCompile(`RX-packets:\s+(\d+)`)

// stop ends testpmd the way an operator would (closing stdin = "enter")
// and returns the RX count from its final statistics.
func (p *testpmd) stop(t *testing.T) int {
	t.Helper()
	// The forwarding lcore may share its CPU with another busy poller (the
	// project bed's app runs there too): give it time to drain its ring.
	time.Sleep(time.Second)
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-done
		t.Errorf("testpmd did not exit\n%s", p.output())
	}
	rx := 0
	for _, m := range rxRE.FindAllStringSubmatch(p.output(), -1) {
		if n, _ := strconv.Atoi(m[1]); n > rx {
			rx = n
		}
	}
	return rx
}

// waitNICProgram waits for the PMD to attach its program.
func waitNICProgram() bool {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		nic, err := linkIn(nsDUT, nicName)
		if err == nil && nic.Attrs().Xdp != nil && nic.Attrs().Xdp.Attached {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

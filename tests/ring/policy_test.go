package ring

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func rewrite(t *testing.T, b *bed, policyYAML string) {
	t.Helper()
	cur, err := os.ReadFile(b.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := string(cur)
	if i := strings.Index(base, "policy:\n"); i >= 0 {
		base = base[:i]
	}
	// Write a new file and rename it over the old one, as config managers do.
	tmp := b.Cfg + ".new"
	if err := os.WriteFile(tmp, []byte(base+policyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, b.Cfg); err != nil {
		t.Fatal(err)
	}
}

// SIGHUP and file edits switch the policy of the running worker while the
// app sends a steady stream: every packet arrives, none is dropped.
func TestLivePolicySwitchUnderTrafficLosesNothing(t *testing.T) {
	b := newBed(t, bedOpts{})
	ps := b.PacketSocket()
	modes := []string{
		"policy:\n  mode: busy\n",
		"policy:\n  mode: interrupt\n",
		"policy:\n  mode: fixed\n  interval: 200us\n",
		"policy:\n  mode: adaptive\n  spin: 10us\n",
		"policy:\n  mode: totally-invalid\n", // refused: the old policy stays
		"policy:\n  mode: busy\n",
	}
	wantMode := []string{"busy", "interrupt", "fixed", "adaptive", "adaptive", "busy"}
	sent := 0
	done := make(chan [][]byte)
	const perStep = 400
	total := perStep * len(modes)
	go func() { done <- onlyTest(ps.Receive(total, 60*time.Second)) }()
	for i, m := range modes {
		rewrite(t, b, m)
		if i%2 == 0 {
			// Even steps: SIGHUP. Odd steps: the file watch alone.
			if err := b.Kb.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		for k := 0; k < perStep; k += 8 {
			var burst [][]byte
			for j := 0; j < 8; j++ {
				burst = append(burst, testFrame(200, uint32(sent)))
				sent++
			}
			if q, err := b.Port.Inject(0, burst, ringtestOpts(0, 0)); err != nil || q != len(burst) {
				t.Fatalf("inject: %d, %v", q, err)
			}
			time.Sleep(200 * time.Microsecond)
		}
		waitUntil(t, "mode "+wantMode[i], func() bool { return b.Status().Mode == wantMode[i] })
	}
	got := <-done
	if len(got) != total {
		t.Fatalf("kernel got %d of %d frames", len(got), total)
	}
	for i, f := range got {
		if seq := uint32(f[14])<<24 | uint32(f[15])<<16 | uint32(f[16])<<8 | uint32(f[17]); seq != uint32(i) {
			t.Fatalf("frame %d carries sequence %d: reordered or lost", i, seq)
		}
	}
	q := b.Status()
	if q.TotalDrops() != 0 || b.Port.Counters(0).ToKernelDropped != 0 {
		t.Errorf("drops while switching: %v, app %+v", q.Drops, b.Port.Counters(0))
	}
	if !strings.Contains(b.Out.String(), "reload refused") {
		t.Errorf("the invalid file was not refused in the log:\n%s", b.Out)
	}
}

// Workers run pinned to the configured CPU, and DPDK's own threads are moved
// off the app's lcore.
func TestWorkersArePinned(t *testing.T) {
	b := newBed(t, bedOpts{yaml: "workers:\n  cpus: [0]\n"})
	pid := b.Kb.Pid()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	pinned, dpdkThreads := 0, 0
	for _, task := range tasks {
		dir := filepath.Join(fmt.Sprintf("/proc/%d/task", pid), task.Name())
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		status, _ := os.ReadFile(filepath.Join(dir, "status"))
		var allowed string
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				allowed = strings.TrimSpace(v)
			}
		}
		name := strings.TrimSpace(string(comm))
		// DPDK 22.11 names its threads eal-*, rte_*; 23.11 on dpdk-*.
		if strings.HasPrefix(name, "eal-") || strings.HasPrefix(name, "rte_") || strings.HasPrefix(name, "dpdk-") {
			dpdkThreads++
			if allowed != "0" {
				t.Errorf("DPDK thread %s runs on CPUs %s, want 0 (off the app's lcore)", name, allowed)
			}
			continue
		}
		if allowed == "0" {
			pinned++
		}
	}
	if dpdkThreads == 0 {
		t.Errorf("no DPDK thread (eal-*, rte_*, dpdk-*) found in kbridge: are they named otherwise in this DPDK?")
	}
	// One worker; Go's other threads keep the whole mask.
	if pinned != 1 {
		t.Errorf("%d kbridge threads pinned to CPU 0, want exactly the one worker", pinned)
	}
}

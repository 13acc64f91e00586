package restart

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/tests/dpdkbed"
	"github.com/kbridge/kbridge/tests/harness"
)

// An address of the app's memory taken in kbridge's own address space, as
// ASLR now and then has it (EAL: "Cannot get a virtual area at requested
// address", seen in tests/app): kbridge executes itself again under the
// same pid, for a fresh layout, and attaches, counting the retries; taken
// at every start, it gives up after its last with an error that names
// --base-virtaddr, the port released and no interface made. The test hook
// (ring/testhook.go) takes a page of the app's first hugepage in the first
// starts it is told.
func TestEALAttachRetriedInAFreshProcess(t *testing.T) {
	p := env.NewPort(t)
	addr := appHugepageAddr(t)
	const taken = "Cannot get a virtual area at requested address"
	const again = "kbridge executes itself again"

	t.Run("taken in two starts", func(t *testing.T) {
		k := env.StartKbridgeConfigBin(t, hookBin(t), env.PortConfig(p),
			"KBRIDGE_TEST_EAL_OCCUPY="+addr, "KBRIDGE_TEST_EAL_OCCUPY_STARTS=2")
		k.Ready()
		log := k.Log.String()
		if n := strings.Count(log, taken); n != 2 {
			t.Errorf("EAL found the address taken %d times, want 2 (the hook's starts):\n%s", n, log)
		}
		if n := strings.Count(log, again); n != 2 {
			t.Errorf("%d warnings %q, want 2:\n%s", n, again, log)
		}
		if got := p.Port.OwnerPID(); got != k.Pid() {
			t.Errorf("owner pid %d, want kbridge's own %d (executed again under its pid)", got, k.Pid())
		}
		var st daemon.Status
		harness.KbridgeStats(t, k.Sock, &st)
		if st.EALAttachRetries != 2 {
			t.Errorf("eal_attach_retries %d, want 2", st.EALAttachRetries)
		}
		k.Send(10)
		got := 0
		dpdkbed.WaitUntil(t, "the interface's 10 frames at the app", func() bool {
			got += len(dpdkbed.OnlyTest(p.Port.Collect(0, 32)))
			return got >= 10
		})
		k.Stop(true)
	})

	t.Run("taken in every start", func(t *testing.T) {
		k := env.StartKbridgeConfigBin(t, hookBin(t), env.PortConfig(p),
			"KBRIDGE_TEST_EAL_OCCUPY="+addr, "KBRIDGE_TEST_EAL_OCCUPY_STARTS=99")
		if !k.ExitedWithin(60 * time.Second) {
			t.Fatalf("kbridge still runs 60s after its start, with the app's address taken in every start:\n%s", k.Log)
		}
		log := k.Log.String()
		if code := k.ExitCode(); code != 1 {
			t.Errorf("exit code %d, want 1:\n%s", code, log)
		}
		if n := strings.Count(log, taken); n != 3 {
			t.Errorf("EAL found the address taken %d times, want 3 (every start):\n%s", n, log)
		}
		if !strings.Contains(log, "--base-virtaddr") || !strings.Contains(log, "in each of 3 starts") {
			t.Errorf("the last error does not say how many starts failed or name --base-virtaddr:\n%s", log)
		}
		if got := p.Port.OwnerPID(); got != 0 {
			t.Errorf("owner pid %d after the failed starts, want 0", got)
		}
		if _, err := env.Link(k.Ifname); err == nil {
			t.Errorf("interface %s made by a kbridge that never attached", k.Ifname)
		}
	})
}

// appHugepageAddr is the address (hex) of one of the test primary's
// hugepages, which every secondary must map at that very address.
func appHugepageAddr(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 6 && strings.HasPrefix(fields[5], "/dev/hugepages/"+env.Prefix+"map_") {
			start, _, _ := strings.Cut(fields[0], "-")
			return "0x" + start
		}
	}
	t.Fatalf("no hugepage of file prefix %s in /proc/self/maps", env.Prefix)
	return ""
}

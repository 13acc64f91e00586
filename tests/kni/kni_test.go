// Package kni runs an application written for KNI, bin/kbridge-kniapp
// (tests/kniapp/kniapp.c, built against rte_kni.h alone), on the test bed in
// place of the reference app and kbridge: its rte_kni_alloc starts the
// kbridge that serves each KNI (docs/KNI.md). The bed comes up without an
// app (KBT_NO_BRIDGE=1); the app owns kbt-nic through net_af_packet and its
// KNI vEth0 gets kb0's address. Each subtest starts the app in one of the
// styles KNI applications were written in, checks traffic and the requests
// (ip link set ... reaching the rte_kni_ops callbacks, kept or set back by
// their answer), then stops it with SIGINT and checks that it exits 0 and
// its interfaces are gone.
package kni

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

const (
	peerIP = harness.PeerIP
	dutIP  = harness.DUTIP
	// The first KNI's MAC where a test names one: locally administered.
	kniMAC = "02:00:c6:12:00:02"
)

// app is one run of the KNI application.
type app struct {
	*harness.Proc
	names []string // its KNIs
	// kb is the process whose output holds its kbridges' logs: the app
	// itself, whose children they are, or a kbridge started beside it.
	kb *harness.Proc
}

// startApp runs bin/kbridge-kniapp in kbt-dut with the app's arguments
// (after "--"): its lcores on the app CPU, the main lcore on the other, as
// the bed places every app; rte_kni_alloc runs bin/kbridge (KBRIDGE_BIN).
// It returns once the app forwards, its KNIs up with the bed's address on
// the first.
// env adds to its environment; kb, when not nil, is the kbridge started
// beside it (KBRIDGE_KNI_SPAWN=0).
func startApp(t *testing.T, root string, env []string, kb *harness.Proc, names []string, args ...string) *app {
	t.Helper()
	p := launch(t, root, env, args...)
	a := &app{Proc: p, names: names, kb: kb}
	if kb == nil {
		a.kb = p
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kniapp's output:\n%s", p.Log.String())
		}
	})
	p.WaitLog("kniapp: forwarding", 60*time.Second)
	for _, n := range names {
		if gone, out := harness.LinkGone("kbt-dut", n); gone {
			t.Fatalf("rte_kni_alloc returned but %s does not exist: %s", n, out)
		}
		if flags(t, n)&syscall.IFF_UP != 0 {
			t.Errorf("%s is up before anyone set it up: KNI made its interfaces down", n)
		}
	}
	sh(t, "ip", "-n", "kbt-dut", "addr", "add", dutIP+"/24", "dev", names[0])
	for _, n := range names {
		a.request(t, n, "link", "up", true, "up")
	}
	// The peer may know 198.18.0.2 at the MAC of an earlier run's KNI.
	sh(t, "ip", "-n", "kbt-peer", "neigh", "flush", "dev", "kbt-wire")
	return a
}

// launch starts bin/kbridge-kniapp as startApp describes and returns at once.
// KBT_KNIAPP, in env or else in the environment, names another build of it
// (bin/kbridge-kniapp-static: linked with DPDK statically), relative to the
// repository.
func launch(t *testing.T, root string, env []string, args ...string) *harness.Proc {
	t.Helper()
	appCPU := runtime.NumCPU() - 1
	lcores := fmt.Sprintf("0@0,1@%d,2@%d", appCPU, appCPU)
	bin := cmp.Or(os.Getenv("KBT_KNIAPP"), "bin/kbridge-kniapp")
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "KBT_KNIAPP="); ok {
			bin = v
		}
	}
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(root, bin)
	}
	return harness.StartSpec(t, "kniapp", harness.Spec{Env: append([]string{"KBRIDGE_BIN=" + filepath.Join(root, "bin/kbridge")}, env...)},
		append([]string{"ip", "netns", "exec", "kbt-dut", bin,
			"--lcores", lcores, "--file-prefix", "kbt-kni", "--proc-type", "primary", "--no-pci",
			"--vdev", "net_af_packet0,iface=kbt-nic", "--"}, args...)...)
}

// request runs `ip link set dev name ARGS...` and waits for kbridge to say
// that the app kept it (kept) or refused it and the change was set back;
// change and value are what kbridge logs ("mtu", "1400").
func (a *app) request(t *testing.T, name, change, value string, kept bool, args ...string) {
	t.Helper()
	msg := `msg="the app did not take the interface's change: setting it back"`
	if kept {
		msg = `msg="the app applied the interface's change"`
	}
	// The app's one kbridge logs its instance and the port before the
	// interface; a kbridge of one port its instance (the KNI's name).
	tail := fmt.Sprintf(" interface=%s change=%s value=%s", name, change, value)
	n := countWith(a.kb.Log.String(), msg, tail)
	sh(t, append([]string{"ip", "-n", "kbt-dut", "link", "set", "dev", name}, args...)...)
	harness.WaitUntil(t, "kbridge's "+msg+tail, 10*time.Second, func() bool {
		return countWith(a.kb.Log.String(), msg, tail) > n
	})
}

// allmulticastFollowsTheCallback sets all-multicast on the first KNI:
// config_allmulticast applies it to the port, which may not support it
// (net_af_packet of 22.11 does not): the change is kept exactly when the
// callback returned 0.
func (a *app) allmulticastFollowsTheCallback(t *testing.T) {
	t.Helper()
	name := a.names[0]
	tail := fmt.Sprintf(" interface=%s change=allmulticast value=on", name)
	count := func(msg string) int { return countWith(a.Log.String(), msg, tail) }
	applied, refused := `msg="the app applied the interface's change"`, `msg="the app did not take the interface's change: setting it back"`
	n := count(applied) + count(refused)
	sh(t, "ip", "-n", "kbt-dut", "link", "set", "dev", name, "allmulticast", "on")
	harness.WaitUntil(t, "kbridge's word on allmulticast", 10*time.Second, func() bool {
		return count(applied)+count(refused) > n
	})
	log := a.Log.String()
	i := strings.LastIndex(log, "kniapp: config_allmulticast(0, 1) = ")
	if i < 0 {
		t.Fatal("config_allmulticast was not called")
	}
	answer := strings.Fields(log[i+len("kniapp: config_allmulticast(0, 1) = "):])[0]
	kept := countWith(log[i:], applied, tail) > 0
	if kept != (answer == "0") {
		t.Errorf("config_allmulticast answered %s and kbridge kept the change: %v", answer, kept)
	}
	if on := flags(t, name)&syscall.IFF_ALLMULTI != 0; on != kept {
		t.Errorf("%s has IFF_ALLMULTI %v after the callback answered %s", name, on, answer)
	}
}

// idleCost measures process pid over d: its CPU (utime and stime, from
// /proc/PID/stat) as a percentage of one core, and its VmRSS in kB at the
// end; it logs the busiest threads, and what the RSS is made of.
func idleCost(t *testing.T, pid string, d time.Duration) (cpu float64, rssKB int) {
	t.Helper()
	ticksOf := func(path string) (float64, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, ""
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:])) // f[0] is field 3
		u, err1 := strconv.ParseFloat(f[11], 64)
		s, err2 := strconv.ParseFloat(f[12], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %q", path, b)
		}
		return u + s, string(b[bytes.IndexByte(b, '(')+1 : i])
	}
	threads := func() map[string]float64 {
		m := map[string]float64{}
		tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/stat")
		for _, p := range tasks {
			v, comm := ticksOf(p)
			m[filepath.Base(filepath.Dir(p))+" "+comm] = v
		}
		return m
	}
	start, before, t0 := 0.0, threads(), time.Now()
	start, _ = ticksOf("/proc/" + pid + "/stat")
	time.Sleep(d)
	end, _ := ticksOf("/proc/" + pid + "/stat")
	used, took := end-start, time.Since(t0)
	cpu = used / 100 / took.Seconds() * 100 // USER_HZ is 100
	// Which threads: the busiest few, to tell the workers from the rest.
	var busy []string
	for id, v := range threads() {
		if dv := v - before[id]; dv > 0 {
			busy = append(busy, fmt.Sprintf("%s: %.0f ticks", id, dv))
		}
	}
	slices.Sort(busy)
	t.Logf("threads of pid %s that ran over %v (tid comm: ticks of 10 ms): %s", pid, d, strings.Join(busy, "; "))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var parts []string // what the RSS is made of, and how many threads hold it
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			rssKB, _ = strconv.Atoi(strings.Fields(v)[0])
		}
		for _, k := range []string{"RssAnon:", "RssFile:", "RssShmem:", "Threads:"} {
			if v, ok := strings.CutPrefix(l, k); ok {
				parts = append(parts, k+" "+strings.Join(strings.Fields(v), " "))
			}
		}
	}
	t.Logf("pid %s: %s", pid, strings.Join(parts, ", "))
	return cpu, rssKB
}

// timesOf returns the app's lines on its allocations' and releases' times.
func timesOf(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "kniapp: alloc:") || strings.HasPrefix(l, "kniapp: release:") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// countWith counts the lines of log that hold msg and, after it, tail.
func countWith(log, msg, tail string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if i := strings.Index(l, msg); i >= 0 && strings.Contains(l[i:], tail) {
			n++
		}
	}
	return n
}

// stop sends SIGINT, as a user's ^C, and checks that the app released its
// KNIs, its kbridges stopped cleanly, it exited 0 and the interfaces are gone.
func (a *app) stop(t *testing.T) {
	t.Helper()
	if err := a.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if !a.ExitedWithin(30 * time.Second) {
		t.Fatal("the app did not exit within 30 s of SIGINT")
	}
	log := a.Log.String()
	if c := a.ExitCode(); c != 0 {
		t.Errorf("the app exited %d after SIGINT", c)
	}
	for _, n := range a.names {
		if !strings.Contains(log, "kniapp: released "+n+"\n") {
			t.Errorf("the app did not release %s", n)
		}
		if gone, out := harness.LinkGone("kbt-dut", n); !gone {
			t.Errorf("%s still exists after the app exited: %s", n, out)
		}
	}
	if got, want := strings.Count(log, "msg=stopped"), len(a.names); got < want {
		t.Errorf("%d kbridges logged a clean stop, want %d", got, want)
	}
	// kbridge's pool_in_use at its stop counts what still waits in the
	// rings; rte_kni_release frees that: the pool must be whole after it.
	if !strings.Contains(log, "kniapp: mbufs in use after release: 0\n") {
		t.Errorf("the app's pool is not whole after it released its KNIs")
	}
}

// childPID is the pid of the kbridge the app started for KNI name, as
// rte_kni_alloc logged it.
func (a *app) childPID(t *testing.T, name string) string {
	t.Helper()
	prefix := "KNI: " + name + ": kernel interface ready, served by kbridge pid "
	log := a.Log.String()
	i := strings.LastIndex(log, prefix)
	if i < 0 {
		t.Fatalf("the app did not log %q", prefix)
	}
	return strings.Fields(log[i+len(prefix):])[0]
}

// childSession is the pid and the session id of the kbridge the app
// started for KNI name.
func (a *app) childSession(t *testing.T, name string) (pid, sid int) {
	t.Helper()
	p := a.childPID(t, name)
	stat, err := os.ReadFile("/proc/" + p + "/stat")
	if err != nil {
		t.Fatalf("kbridge pid %s: %v", p, err)
	}
	// pid (comm) state ppid pgrp session ...: comm may hold spaces.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	pid, _ = strconv.Atoi(p)
	sid, err = strconv.Atoi(f[3])
	if err != nil {
		t.Fatalf("/proc/%s/stat: no session in %q", p, stat)
	}
	return pid, sid
}

// childCPUs is the CPU list (Cpus_allowed_list) of the kbridge the app
// started for KNI name.
func (a *app) childCPUs(t *testing.T, name string) string {
	t.Helper()
	pid := a.childPID(t, name)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("kbridge pid %s: %v", pid, err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list in /proc/%s/status", pid)
	return ""
}

// buildAgainstDPDKHeader builds tests/kniapp/kniapp.c against DPDK's own
// rte_kni.h, not kbridge's, and links it with `pkg-config [--static] --libs
// librte_kni libdpdk` from make install-dev: what a KNI app of DPDK 22.11
// does unchanged. It returns the binary and the environment it runs with
// (the installed librte_kni on LD_LIBRARY_PATH). Skipped on a DPDK without
// KNI (23.11 on): there is no DPDK header to build against.
func buildAgainstDPDKHeader(t *testing.T, root, kind string) (string, []string) {
	t.Helper()
	inc := harness.DPDKKNIHeaderDir(t)
	prefix := harness.InstallDev(t, root)
	pc := []string{"--libs", "librte_kni", "libdpdk"}
	if kind == "static" {
		pc = append([]string{"--static"}, pc...)
	}
	bin := filepath.Join(t.TempDir(), "kniapp-dpdk-header-"+kind)
	// DPDK's header marks rte_kni_update_link experimental, as DPDK's
	// examples/kni's Makefile allows it.
	args := append([]string{"-O2", "-Wall", "-Wextra", "-Werror", "-DALLOW_EXPERIMENTAL_API", "-I" + inc},
		harness.PkgConfig(t, prefix, "--cflags", "libdpdk")...)
	args = append(append(args, "-o", bin, filepath.Join(root, "tests/kniapp/kniapp.c")), harness.PkgConfig(t, prefix, pc...)...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	dyn := sh(t, "readelf", "-d", bin)
	if uses := strings.Contains(dyn, "[librte_kni.so."); uses != (kind == "shared") {
		t.Fatalf("linked %s, the app needs librte_kni.so: %v\n%s", kind, uses, dyn)
	}
	if kind == "static" && strings.Contains(dyn, "[librte_") {
		t.Fatalf("linked statically, the app still needs a shared DPDK library:\n%s", dyn)
	}
	return bin, []string{"LD_LIBRARY_PATH=" + filepath.Join(prefix, "lib")}
}

// mixedWakeups runs testdata/mixwake.c, built with librte_kni's Cflags and
// libs from make install-dev (shared): one process with a kbridge.h port of
// its own and a KNI of librte_kni.so, kniFirst saying which comes first
// (whose kbridge.h copy registers DPDK's wakeup action and takes the
// doorbell), both served by the app's one kbridge. It checks that both
// ports got their worker's eventfd (the app's word) and that both ports'
// ring paths started with wakeups.
func mixedWakeups(t *testing.T, root string, kniFirst bool) {
	t.Helper()
	prefix := harness.InstallDev(t, root)
	bin := filepath.Join(t.TempDir(), "mixwake")
	args := append([]string{"-O2", "-Wall", "-Werror", "-o", bin, "testdata/mixwake.c"},
		harness.PkgConfig(t, prefix, "--cflags", "--libs", "librte_kni", "libdpdk")...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	cmd := []string{"ip", "netns", "exec", "kbt-dut", bin, "-l", "0", "--file-prefix", "kbt-kni",
		"--proc-type", "primary", "--no-pci", "--"}
	if kniFirst {
		cmd = append(cmd, "--kni-first")
	}
	p := harness.StartSpec(t, "mixwake", harness.Spec{Env: []string{"KBRIDGE_BIN=" + filepath.Join(root, "bin/kbridge"),
		"LD_LIBRARY_PATH=" + filepath.Join(prefix, "lib")}}, cmd...)
	if !p.ExitedWithin(90 * time.Second) {
		t.Fatalf("mixwake still runs after 90 s:\n%s", p.Log.String())
	}
	log := p.Log.String()
	if !strings.Contains(log, "mixwake: eventfd port=1 kni=1\n") || p.ExitCode() != 0 {
		t.Errorf("mixwake exited %d; both ports must get their eventfd:\n%s", p.ExitCode(), log)
	}
	if got := strings.Count(log, "wakeups=true"); got != 2 {
		t.Errorf("%d ports served with wakeups, want 2 (the app's port and the KNI):\n%s", got, log)
	}
	if strings.Contains(log, "is another copy's of kbridge.h") {
		t.Errorf("a kbridge.h copy found the wakeup action another registry's:\n%s", log)
	}
	for _, n := range []string{"kbmix", "kbmixkni"} {
		if gone, out := harness.LinkGone("kbt-dut", n); !gone {
			t.Errorf("%s still exists after mixwake exited: %s", n, out)
		}
	}
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	return harness.Sh(t, nil, args[0], args[1:]...)
}

// flags reads an interface's flags (IFF_*) in kbt-dut.
func flags(t *testing.T, name string) int {
	t.Helper()
	s := strings.TrimSpace(sh(t, "ip", "netns", "exec", "kbt-dut", "cat", "/sys/class/net/"+name+"/flags"))
	v, err := strconv.ParseInt(strings.TrimPrefix(s, "0x"), 16, 32)
	if err != nil {
		t.Fatalf("flags of %s: %q", name, s)
	}
	return int(v)
}

// attr reads /sys/class/net/NAME/ATTR in kbt-dut.
func attr(t *testing.T, name, what string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "ip", "netns", "exec", "kbt-dut", "cat", "/sys/class/net/"+name+"/"+what))
}

func TestKNIApplication(t *testing.T) {
	harness.NeedRoot(t, "the KNI application on the test bed needs root (namespaces, DPDK, TAP)")
	root := harness.RepoRoot(t)
	for _, bin := range []string{"bin/kbridge", "bin/kbridge-kniapp", "bin/kbridge-kniapp-static"} {
		if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
			t.Fatalf("%s missing: run make build", bin)
		}
	}
	for _, tool := range []string{"iperf3", "nfs-ls", "nfs-cat", "ganesha.nfsd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s missing: run make deps", tool)
		}
	}
	harness.ClaimBed(t, root)
	env := append([]string{"KBT_NO_BRIDGE=1"}, harness.LockedEnv...)
	t.Cleanup(func() {
		harness.Sh(t, env, "bash", filepath.Join(root, "tests/testbed/down.sh"))
		harness.CheckNothingLeft(t, "vEth0", "dpdk0.kni_0", "dpdk0.kni_1", "dpdk0.kni", "dpdk0.101", "kbmix", "kbmixkni")
	})
	if out := harness.Sh(t, env, "bash", filepath.Join(root, "tests/testbed/up.sh")); !strings.Contains(out, "testbed up") {
		t.Fatalf("up.sh did not say 'testbed up':\n%s", out)
	}

	t.Run("split rx and tx lcores with every callback, the kbridge on KBRIDGE_CHILD_CPUS", func(t *testing.T) {
		a := startApp(t, root, []string{"KBRIDGE_CHILD_CPUS=0"}, nil, []string{"vEth0"}, "--loop", "split", "--ops", "all", "--mac", kniMAC,
			"--refuse-mtu", "1280", "--refuse-down")
		if got := a.childCPUs(t, "vEth0"); got != "0" {
			t.Errorf("the kbridge of vEth0 may run on CPUs %s, want KBRIDGE_CHILD_CPUS=0", got)
		}
		if pid, sid := a.childSession(t, "vEth0"); pid != sid {
			t.Errorf("the kbridge of vEth0 (pid %d) is in session %d, want a session of its own", pid, sid)
		}
		if got := attr(t, "vEth0", "address"); got != kniMAC {
			t.Errorf("vEth0 has MAC %s, want conf.mac_addr %s", got, kniMAC)
		}
		if got := attr(t, "vEth0", "mtu"); got != "1500" {
			t.Errorf("vEth0 has MTU %s, want conf.mtu 1500", got)
		}
		harness.NoOtherUserAttaches(t, "kbt-dut", "vEth0")
		harness.BedTraffic(t)
		t.Run("requests reach the callbacks and their answer holds", func(t *testing.T) {
			a.request(t, "vEth0", "mtu", "1400", true, "mtu", "1400")
			a.WaitLog("kniapp: change_mtu(0, 1400) = 0", 5*time.Second)
			a.request(t, "vEth0", "mtu", "1280", false, "mtu", "1280")
			a.WaitLog("kniapp: change_mtu(0, 1280) = -22", 5*time.Second)
			if got := attr(t, "vEth0", "mtu"); got != "1400" {
				t.Errorf("after a refused MTU vEth0 has MTU %s, want 1400 kept", got)
			}
			a.request(t, "vEth0", "link", "down", false, "down")
			a.WaitLog("kniapp: config_network_if(0, 0) = -1", 5*time.Second)
			if flags(t, "vEth0")&syscall.IFF_UP == 0 {
				t.Errorf("vEth0 stayed down after the app refused it")
			}
			a.request(t, "vEth0", "mac", "02:00:c6:12:00:05", true, "address", "02:00:c6:12:00:05")
			a.WaitLog("kniapp: config_mac_address(0, 02:00:c6:12:00:05) = 0", 5*time.Second)
			a.request(t, "vEth0", "promisc", "on", true, "promisc", "on")
			a.WaitLog("kniapp: config_promiscusity(0, 1) = 0", 5*time.Second)
			a.request(t, "vEth0", "promisc", "off", false, "promisc", "off")
			a.WaitLog("kniapp: config_promiscusity(0, 0) = -16", 5*time.Second)
			if flags(t, "vEth0")&syscall.IFF_PROMISC == 0 {
				t.Errorf("vEth0 left promiscuous mode though the app refused it")
			}
			a.allmulticastFollowsTheCallback(t)
			a.request(t, "vEth0", "mtu", "1500", true, "mtu", "1500")
			sh(t, "ip", "-n", "kbt-peer", "neigh", "flush", "dev", "kbt-wire")
			harness.PingBothWays(t)
		})
		a.stop(t)
	})

	// DPVS, F-Stack, dperf and Gatekeeper link DPDK statically, which
	// orders the mempool handlers otherwise than in kbridge: the app's
	// mbufs are its own to allocate and free (kbridge.h version 7).
	t.Run("linked with DPDK statically: traffic, and the pool whole", func(t *testing.T) {
		a := startApp(t, root, []string{"KBT_KNIAPP=bin/kbridge-kniapp-static"}, nil, []string{"vEth0"}, "--loop", "one")
		harness.BedTraffic(t)
		a.stop(t)
	})

	// An app written against DPDK 22.11's own rte_kni.h, which knows
	// nothing of kbridge, linked -lrte_kni as pkg-config gives it: KNI's
	// structures as DPDK lays them out reach librte_kni (the MAC, the
	// callbacks); static, it carries librte_kni.a and no shared DPDK.
	for _, kind := range []string{"shared", "static"} {
		t.Run("built against DPDK's own rte_kni.h, linked -lrte_kni ("+kind+"): traffic, requests, the pool whole", func(t *testing.T) {
			bin, env := buildAgainstDPDKHeader(t, root, kind)
			a := startApp(t, root, append(env, "KBT_KNIAPP="+bin), nil, []string{"vEth0"}, "--loop", "split", "--ops", "all", "--mac", kniMAC)
			if got := attr(t, "vEth0", "address"); got != kniMAC {
				t.Errorf("vEth0 has MAC %s, want conf.mac_addr %s", got, kniMAC)
			}
			harness.BedTraffic(t)
			a.request(t, "vEth0", "mtu", "1400", true, "mtu", "1400")
			a.WaitLog("kniapp: change_mtu(0, 1400) = 0", 5*time.Second)
			a.request(t, "vEth0", "mtu", "1500", true, "mtu", "1500")
			a.stop(t)
		})
	}

	// librte_kni.so exports its registries (KBRIDGE_PRIVATE_<ABI>): the
	// dynamic linker binds them to the app's own kbridge.h copies, so one
	// wakeup handler knows both ports, whichever copy registered it.
	for _, kniFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("a kbridge.h port and a librte_kni KNI in one process both get wakeups (KNI first: %v)", kniFirst), func(t *testing.T) {
			mixedWakeups(t, root, kniFirst)
		})
	}

	t.Run("one loop, ops NULL, two KNIs allocated twice, named as DPVS names them (dpdk0.kni)", func(t *testing.T) {
		a := startApp(t, root, nil, nil, []string{"dpdk0.kni_0", "dpdk0.kni_1"}, "--loop", "one", "--ops", "null", "--kni", "2",
			"--realloc", "1", "--name", "dpdk0.kni")
		if got := strings.Count(a.Log.String(), "kniapp: released for realloc"); got != 2 {
			t.Errorf("the app released %d KNIs to allocate them again, want 2", got)
		}
		if a0, a1 := attr(t, "dpdk0.kni_0", "address"), attr(t, "dpdk0.kni_1", "address"); a0 == a1 {
			t.Errorf("both KNIs have MAC %s: a zero conf.mac_addr is a random one each", a0)
		}
		t.Run("ping both ways", harness.PingBothWays)
		t.Run("without callbacks every request succeeds", func(t *testing.T) {
			a.request(t, "dpdk0.kni_1", "mtu", "1400", true, "mtu", "1400")
			a.request(t, "dpdk0.kni_1", "link", "down", true, "down")
			a.request(t, "dpdk0.kni_1", "link", "up", true, "up")
			a.request(t, "dpdk0.kni_0", "promisc", "on", true, "promisc", "on")
			a.request(t, "dpdk0.kni_0", "promisc", "off", true, "promisc", "off")
			if strings.Contains(a.Log.String(), "kniapp: change_mtu") {
				t.Errorf("a callback ran though the app registered none")
			}
		})
		a.stop(t)
	})

	// DPVS's use: 64 KNIs named NAME.kni and NAME.<vlan>, one kbridge for
	// all; the app's lcore loop releases and allocates VLAN KNIs while
	// traffic goes through two others. What it costs idle, and how long
	// an allocation and a release take, are printed, not asserted.
	t.Run("64 KNIs named as DPVS names them, one kbridge, idle cost", func(t *testing.T) {
		a := startApp(t, root, nil, nil, []string{"dpdk0.kni"}, "--loop", "one", "--kni", "64", "--dotted", "--name", "dpdk0")
		for i := 1; i < 64; i++ {
			if gone, out := harness.LinkGone("kbt-dut", fmt.Sprintf("dpdk0.%d", 100+i)); gone {
				t.Fatalf("dpdk0.%d does not exist: %s", 100+i, out)
			}
		}
		pids := map[string]bool{}
		for _, l := range strings.Split(a.Log.String(), "\n") {
			if _, pid, ok := strings.Cut(l, ": kernel interface ready, served by kbridge pid "); ok {
				pids[strings.TrimSpace(pid)] = true
			}
		}
		if len(pids) != 1 {
			t.Fatalf("the KNIs are served by kbridges %v, want one", pids)
		}
		pid := a.childPID(t, "dpdk0.kni")
		time.Sleep(2 * time.Second) // settled
		cpu, rss := idleCost(t, pid, 12*time.Second)
		t.Logf("64 idle KNIs: kbridge pid %s used %.2f%% of a core over 12 s (utime+stime from /proc/%s/stat), VmRSS %d kB",
			pid, cpu, pid, rss)
		floodedRoundTrips(t)
		a.stop(t)
		t.Log(timesOf(a.Log.String()))
	})

	// DPVS links DPDK statically: the same app both ways.
	for _, kind := range []struct{ name, bin string }{{"shared", "bin/kbridge-kniapp"}, {"static", "bin/kbridge-kniapp-static"}} {
		t.Run("64 KNIs ("+kind.name+"), the lcore loop releasing and allocating VLAN KNIs while two carry traffic", func(t *testing.T) {
			churn(t, root, kind.bin)
		})
	}

	t.Run("with KBRIDGE_KNI_SPAWN=0 a kbridge instance started beside the app serves the KNI", func(t *testing.T) {
		conf := filepath.Join(t.TempDir(), "vEth0.yaml")
		if err := os.WriteFile(conf, []byte("mode: ring\ndpdk:\n  file_prefix: kbt-kni\n  wait: 60s\ninterface:\n  up: false\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		kb := harness.Start(t, "kbridge", "ip", "netns", "exec", "kbt-dut", "taskset", "-c", "0",
			filepath.Join(root, "bin/kbridge"), "run", "--instance", "vEth0", "--config", conf)
		a := startApp(t, root, []string{"KBRIDGE_KNI_SPAWN=0"}, kb, []string{"vEth0"}, "--mac", kniMAC)
		if strings.Contains(a.Log.String(), "msg=\"bridge running\"") {
			t.Errorf("the app started a kbridge of its own")
		}
		if got := attr(t, "vEth0", "address"); got != kniMAC {
			t.Errorf("vEth0 has MAC %s, want conf.mac_addr %s through kbridge_port_set_mac", got, kniMAC)
		}
		t.Run("ping both ways", harness.PingBothWays)
		a.request(t, "vEth0", "mtu", "1400", true, "mtu", "1400")
		if err := a.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if !a.ExitedWithin(30*time.Second) || a.ExitCode() != 0 {
			t.Errorf("the app did not exit 0 within 30 s of SIGINT")
		}
		if !kb.ExitedWithin(10*time.Second) || kb.ExitCode() != 1 ||
			!strings.Contains(kb.Log.String(), "the DPDK app is freeing port vEth0") {
			t.Errorf("kbridge did not stop, exit 1, when the app released the KNI:\n%s", kb.Log.String())
		}
		if gone, out := harness.LinkGone("kbt-dut", "vEth0"); !gone {
			t.Errorf("vEth0 still exists after the app released it: %s", out)
		}
	})

	t.Run("a KBRIDGE_CHILD_CPUS that is no CPU list fails rte_kni_alloc with that cause", func(t *testing.T) {
		p := launch(t, root, []string{"KBRIDGE_CHILD_CPUS=0-x"}, "--loop", "one")
		if !p.ExitedWithin(60 * time.Second) {
			t.Fatal("the app still runs 60 s after an rte_kni_alloc that must fail")
		}
		if p.ExitCode() == 0 || !strings.Contains(p.Log.String(), "KBRIDGE_CHILD_CPUS=0-x is no CPU list") {
			t.Errorf("the app exited %d without naming the bad KBRIDGE_CHILD_CPUS:\n%s", p.ExitCode(), p.Log.String())
		}
		if gone, out := harness.LinkGone("kbt-dut", "vEth0"); !gone {
			t.Errorf("vEth0 exists after a failed rte_kni_alloc: %s", out)
		}
	})

	t.Run("one loop with some callbacks, the rest KNI's defaults on the port, the kbridge on every CPU", func(t *testing.T) {
		a := startApp(t, root, nil, nil, []string{"vEth0"}, "--loop", "one", "--ops", "some")
		// The app runs on every CPU here (its lcores pinned, not the
		// process), and so does its kbridge by default.
		online, err := os.ReadFile("/sys/devices/system/cpu/online")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := a.childCPUs(t, "vEth0"), strings.TrimSpace(string(online)); got != want {
			t.Errorf("the kbridge of vEth0 may run on CPUs %s, want every online CPU, %s", got, want)
		}
		t.Run("ping both ways", harness.PingBothWays)
		a.request(t, "vEth0", "link", "down", true, "down")
		a.WaitLog("kniapp: config_network_if(0, 0) = 0", 5*time.Second)
		a.request(t, "vEth0", "link", "up", true, "up")
		a.request(t, "vEth0", "promisc", "on", true, "promisc", "on")
		a.stop(t)
	})
}

// churn runs DPVS's use of KNI from bin: 64 KNIs named NAME.kni and
// NAME.<vlan>, VLAN KNIs released and allocated again by the lcore loop
// while the first two carry traffic (ping, iperf3, NFS and big.bin read
// three times), the pool whole at the stop.
func churn(t *testing.T, root, bin string) {
	a := startApp(t, root, []string{"KBT_KNIAPP=" + bin}, nil, []string{"dpdk0.kni"}, "--loop", "one", "--kni", "64", "--dotted", "--name", "dpdk0", "--churn")
	secondKNI(t)
	t.Run("ping both ways through the first", harness.PingBothWays)
	t.Run("ping both ways through the second", func(t *testing.T) {
		for _, c := range []struct{ ns, ip string }{{"kbt-dut", secondPeerIP}, {"kbt-peer", secondDUTIP}} {
			if out := harness.In(t, nil, c.ns, "ping", "-c", "10", "-i", "0.1", "-W", "2", c.ip); !strings.Contains(out, " 0% packet loss") {
				t.Errorf("ping from %s to %s:\n%s\nneighbours: dut %s; peer %s", c.ns, c.ip, out,
					harness.In(t, nil, "kbt-dut", "ip", "neigh", "show", "dev", secondName),
					harness.In(t, nil, "kbt-peer", "ip", "neigh", "show", "dev", "kbt-wire"))
			}
		}
	})
	t.Run("NFS through the first while VLAN KNIs come and go", func(t *testing.T) {
		harness.BedTraffic(t)
		for i := 2; i <= 3; i++ {
			if got, want := harness.BigFileHash(t), harness.BigFileWant(t); got != want {
				t.Errorf("read %d of big.bin over NFS hashes to %s, want %s", i, got, want)
			}
		}
	})
	a.stop(t)
	log := a.Log.String()
	if strings.Contains(log, "kniapp: churn: KNI") {
		t.Errorf("a KNI released by the lcore loop could not be allocated again")
	}
	t.Log(timesOf(log))
}

// The second KNI of DPVS's use, dpdk0.101, on a subnet the bed leaves free.
const secondName, secondPeerIP, secondDUTIP = "dpdk0.101", "198.18.7.1", "198.18.7.2"

// secondKNI gives dpdk0.101 its address and the peer one on the same wire;
// only the KNI that holds an address answers ARP for it.
func secondKNI(t *testing.T) {
	t.Helper()
	sh(t, "ip", "-n", "kbt-peer", "addr", "add", secondPeerIP+"/24", "dev", "kbt-wire")
	t.Cleanup(func() {
		_, _ = exec.Command("ip", "-n", "kbt-peer", "addr", "del", secondPeerIP+"/24", "dev", "kbt-wire").CombinedOutput()
	})
	sh(t, "ip", "netns", "exec", "kbt-dut", "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1")
	t.Cleanup(func() {
		_, _ = exec.Command("ip", "netns", "exec", "kbt-dut", "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=0").CombinedOutput()
	})
	sh(t, "ip", "-n", "kbt-dut", "addr", "add", secondDUTIP+"/24", "dev", secondName)
	sh(t, "ip", "-n", "kbt-dut", "link", "set", "dev", secondName, "up")
}

// roundTrips pings the first KNI's address from the peer n times, 10 ms
// apart, and returns the round trips in milliseconds sorted, and how many
// got no answer.
func roundTrips(t *testing.T, n int) (ms []float64, lost int) {
	t.Helper()
	out := harness.In(t, nil, "kbt-peer", "ping", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "1", harness.DUTIP)
	for _, l := range strings.Split(out, "\n") {
		if _, v, ok := strings.Cut(l, " time="); ok {
			f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " ms"), 64)
			if err == nil {
				ms = append(ms, f)
			}
		}
	}
	slices.Sort(ms)
	return ms, n - len(ms)
}

// floodedRoundTrips prints one KNI's round trip while another is flooded:
// rounds of 200 pings through dpdk0.kni, alone and while hping3 floods
// dpdk0.101's address with UDP to a closed port from the same wire,
// interleaved. Printed, not asserted.
func floodedRoundTrips(t *testing.T) {
	t.Helper()
	secondKNI(t)
	harness.In(t, nil, "kbt-peer", "ping", "-c", "3", "-i", "0.2", "-W", "2", secondDUTIP) // ARP learnt before the flood
	pct := func(ms []float64, p float64) float64 {
		if len(ms) == 0 {
			return 0
		}
		return ms[int(p*float64(len(ms)-1))]
	}
	for round := 1; round <= 2; round++ {
		for _, flooded := range []bool{false, true} {
			var flood *harness.Proc
			if flooded {
				// At the lowest priority, the generator stands for the
				// wire: on CPU 0 beside ping, it would otherwise delay
				// ping itself by the scheduler's slices.
				flood = harness.Start(t, "hping3", "ip", "netns", "exec", "kbt-peer", "taskset", "-c", harness.ClientCPU,
					"nice", "-n", "19", "hping3", "--flood", "--udp", "-p", "9", secondDUTIP)
				time.Sleep(time.Second)
			}
			sent0, start := wireSent(t), time.Now()
			ms, lost := roundTrips(t, 200)
			rate := float64(wireSent(t)-sent0) / time.Since(start).Seconds()
			if flood != nil {
				flood.Stop(false)
			}
			t.Logf("round %d, %s flooded (%.0f frames/s from the peer): dpdk0.kni's round trip p50 %.3f ms, p99 %.3f ms, max %.3f ms, %d of 200 lost",
				round, map[bool]string{false: "no KNI", true: "dpdk0.101"}[flooded], rate, pct(ms, 0.5), pct(ms, 0.99), pct(ms, 1), lost)
		}
	}
}

// wireSent is how many frames the peer has sent on the wire.
func wireSent(t *testing.T) uint64 {
	t.Helper()
	out := strings.TrimSpace(harness.Sh(t, nil, "ip", "netns", "exec", "kbt-peer", "cat", "/sys/class/net/kbt-wire/statistics/tx_packets"))
	n, err := strconv.ParseUint(out, 10, 64)
	if err != nil {
		t.Fatalf("kbt-wire's tx_packets: %v", err)
	}
	return n
}

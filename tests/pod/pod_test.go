// Package pod runs deploy/kubernetes/sidecar.yaml with podman kube play on the
// test bed: the reference app in the pod's app container (no NET_ADMIN) and
// kbridge in its sidecar create kb0 in the pod's network namespace, which is
// the bed's kbt-dut (never podman's own network, which reaches outside).
// The bed's traffic crosses kb0 from there, the app's container is shown to
// lack CAP_NET_ADMIN, kbridge's container restarted or killed alone and the
// app's killed are served again, and the pod's teardown leaves nothing; then
// sidecar-vhost.yaml the same way, dpdk-testpmd's virtio-user port on the
// shared socket. Root only; it skips, saying why, where podman cannot run
// containers. KBT_POD_DPDK=24.11 or 25.11: the image built in that
// release's Debian root (tests/dpdkroot).
package pod

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tests/harness"
)

const (
	image    = "kbridge:pod-test"
	podName  = "dpdk-app"
	appCtr   = podName + "-app"
	kbCtr    = podName + "-kbridge"
	capNetAd = 12 // CAP_NET_ADMIN's bit in /proc/PID/status's CapEff
	// sidecar-vhost.yaml's pod and its socket in the shared volume.
	vhostPod  = "dpdk-app-vhost"
	vhostSock = "/run/vhost/kb0.sock"
)

// containersConf is what podman needs on this VM, given to it by the test
// alone (CONTAINERS_CONF) rather than set on the host: runc (crun refuses
// hybrid cgroups), cgroupfs (no systemd manager), and explicit limits: the
// test's nofile, since runc may not raise a limit above the caller's hard
// one, and nproc at most 4096 (runc was refused the caller's own nproc here).
func containersConf() string {
	var nofile, nproc unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
	_ = unix.Getrlimit(unix.RLIMIT_NPROC, &nproc)
	return fmt.Sprintf(`[containers]
default_ulimits = ["nofile=%d:%d", "nproc=%d:%d"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`, nofile.Cur, nofile.Cur, min(nproc.Cur, 4096), min(nproc.Cur, 4096))
}

// podman runs podman with the test's configuration.
func podman(t *testing.T, env []string, args ...string) string {
	t.Helper()
	return harness.Sh(t, env, "podman", args...)
}

// forBed rewrites a pod spec's documents (deploy/kubernetes/FILE) for the
// bed: the image the test built (the apps in it), the app's command on
// kbt-nic (through net_pcap, which needs NET_RAW only: net_af_packet sets
// the interface's MAC and promiscuity with ioctls that need NET_ADMIN), the
// bed's configuration in the ConfigMap, /dev/hugepages for the pod's
// hugetlbfs: a hugetlbfs the test mounts at hugeDir, as the kubelet does
// for a HugePages emptyDir (podman makes none), and no declared ports.
// Everything else is the file's.
func forBed(t *testing.T, root, file string, cfg []byte, app []any, hugeDir string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		switch doc["kind"] {
		case "ConfigMap":
			doc["data"] = map[string]any{"kbridge.yaml": string(onSpecSocket(t, doc, cfg))}
		case "Pod":
			spec := doc["spec"].(map[string]any)
			for _, c := range spec["containers"].([]any) {
				c := c.(map[string]any)
				c["image"] = "localhost/" + image
				// podman 4.3 maps every declared port on the host, which a
				// pod in a namespace of its own refuses; in Kubernetes the
				// list only names them.
				delete(c, "ports")
				if c["name"] == "app" {
					c["command"], c["args"] = app[:1], app[1:]
				}
				if c["name"] == "kbridge" {
					// The pod runs in the bed's namespace (kube play
					// --network host), where the bed's file names the
					// metrics address: the pod's own is Kubernetes' to give.
					delete(c, "env")
					c["args"] = withoutFlag(c["args"].([]any), "--metrics")
				}
			}
			for _, v := range spec["volumes"].([]any) {
				v := v.(map[string]any)
				if v["name"] == "hugepages" {
					delete(v, "emptyDir")
					v["hostPath"] = map[string]any{"path": hugeDir, "type": "Directory"}
				}
			}
		}
		if err := enc.Encode(doc); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// onSpecSocket is cfg with the control socket the spec's own ConfigMap
// doc names: kbridge's root is read-only, and only its runtime directory
// (a volume) takes the socket.
func onSpecSocket(t *testing.T, doc map[string]any, cfg []byte) []byte {
	t.Helper()
	var spec, bed map[string]any
	data, _ := doc["data"].(map[string]any)
	specYAML, _ := data["kbridge.yaml"].(string)
	if err := yaml.Unmarshal([]byte(specYAML), &spec); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(cfg, &bed); err != nil {
		t.Fatal(err)
	}
	specStats, _ := spec["stats"].(map[string]any)
	bedStats, _ := bed["stats"].(map[string]any)
	if specStats["socket"] == nil || bedStats == nil {
		t.Fatalf("the spec's ConfigMap or the bed's file names no stats.socket")
	}
	bedStats["socket"] = specStats["socket"]
	out, err := yaml.Marshal(bed)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withoutFlag is args without flag and the value after it.
func withoutFlag(args []any, flag string) []any {
	var kept []any
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			i++
			continue
		}
		kept = append(kept, args[i])
	}
	return kept
}

// readFile reads a file of the repository.
func readFile(t *testing.T, root, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vhostConfig is the bed's mode vhost configuration as sidecar-vhost.yaml
// wants it: kbridge the client of the app's socket in the shared volume.
func vhostConfig(t *testing.T, root string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(readFile(t, root, "tests/testbed/kbridge-vhost.yaml"), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["vhost"] = map[string]any{"socket": vhostSock, "queues": 1, "client": true}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// capEff reads the effective capabilities of a container's first process.
func capEff(t *testing.T, env []string, ctr string) uint64 {
	t.Helper()
	pid := ctrPid(t, env, ctr)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no CapEff in /proc/%d/status", pid)
	return 0
}

// ctrPid is the host's pid of a container's first process.
func ctrPid(t *testing.T, env []string, ctr string) int {
	t.Helper()
	pid := runningPid(env, ctr)
	if pid <= 0 {
		t.Fatalf("container %s has no process", ctr)
	}
	return pid
}

// runningPid is the host's pid of a container's first process, 0 while it
// has none (between two starts).
func runningPid(env []string, ctr string) int {
	out, err := harness.Command(env, "podman", "inspect", "--format", "{{.State.Pid}}", ctr).Output()
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return pid
}

// inDUT runs podman inside kbt-dut: a container it starts with the host's
// network mode joins its caller's namespace, which must be kbt-dut, never
// the host's.
func inDUT(t *testing.T, env []string, args ...string) string {
	t.Helper()
	return harness.Sh(t, env, "nsenter", append([]string{"--net=/run/netns/kbt-dut", "podman"}, args...)...)
}

// sameNS reports whether the processes share namespace kind ("net", "pid").
func sameNS(t *testing.T, kind string, a, b int) bool {
	t.Helper()
	sa, err := os.Stat(fmt.Sprintf("/proc/%d/ns/%s", a, kind))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Stat(fmt.Sprintf("/proc/%d/ns/%s", b, kind))
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(sa, sb)
}

// pathBack waits until kb0 answers again after a container restarted, and
// returns the new pids of the app's and kbridge's containers.
func pathBack(t *testing.T, env []string, pod string, timeout time.Duration) (app, kb int) {
	t.Helper()
	for end := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		app, kb = runningPid(env, pod+"-app"), runningPid(env, pod+"-kbridge")
		if app > 0 && kb > 0 && harness.Alive(app) && harness.Alive(kb) &&
			exec.Command("ip", "netns", "exec", "kbt-dut", "ping", "-c1", "-W1", harness.PeerIP).Run() == nil {
			break
		}
		if time.Now().After(end) {
			logs(t, env, pod)
			t.Fatalf("kb0 does not answer from the pod's namespace after %v", timeout)
		}
	}
	checkInDUT(t, app, kb)
	return app, kb
}

// kbridgeBack waits until kbridge (pid old) is gone and a new one in its
// container serves the app again, which kept running, and returns the new
// kbridge's pid.
func kbridgeBack(t *testing.T, env []string, app, old int) int {
	t.Helper()
	if !harness.WaitGone(old, 10*time.Second) {
		t.Fatalf("kbridge (pid %d) still runs", old)
	}
	now, kb := pathBack(t, env, podName, 60*time.Second)
	if now != app {
		t.Errorf("the app's container restarted too (pid %d, was %d)", now, app)
	}
	return kb
}

// bigFileOK reads big.bin over NFS through kb0 and checks its hash.
func bigFileOK(t *testing.T) {
	t.Helper()
	if got, want := harness.BigFileHash(t), harness.BigFileWant(t); got != want {
		t.Errorf("big.bin over NFS hashes to %s, want %s", got, want)
	}
}

// checkInDUT checks that the processes are in kbt-dut's network namespace.
func checkInDUT(t *testing.T, pids ...int) {
	t.Helper()
	want, err := os.Stat("/run/netns/kbt-dut")
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		got, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(got, want) {
			t.Errorf("pid %d's network namespace is not kbt-dut", pid)
		}
	}
}

// podmanRuns says why podman cannot run a container here, or "".
func podmanRuns() string {
	if _, err := exec.LookPath("podman"); err != nil {
		return "podman is not installed (make deps installs it)"
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return "runc is not installed (make deps installs it)"
	}
	return ""
}

func TestTheSidecarPodBridgesKb0InThePodsNamespaceAndItsAppLacksNetAdmin(t *testing.T) {
	harness.NeedRoot(t, "the pod test needs root (podman, namespaces, DPDK)")
	root := harness.RepoRoot(t)
	// KBT_POD_DPDK=24.11 or 25.11: the image of that root's kbridge and
	// reference app, built there (deploy/image/build.sh); else the host's.
	dpdk := os.Getenv("KBT_POD_DPDK")
	if dpdk == "" {
		for _, bin := range []string{"bin/kbridge", "bin/kbridge-refapp"} {
			if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
				t.Fatalf("%s missing: run make build (make test does)", bin)
			}
		}
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte(containersConf()), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"CONTAINERS_CONF=" + conf}
	if why := podmanRuns(); why != "" {
		t.Skip(why)
	}
	start := time.Now()
	build := harness.Command(append(env, "KBRIDGE_IMAGE_EXTRA="+filepath.Join(root, "bin/kbridge-refapp")+" /usr/bin/dpdk-testpmd", "KBRIDGE_IMAGE_DPDK="+dpdk),
		"bash", filepath.Join(root, "deploy/image/build.sh"), filepath.Join(root, "bin"), image)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/image/build.sh: %v\n%s", err, out)
	} else {
		t.Logf("%s in %v", harness.LastLine(string(out)), time.Since(start).Round(time.Second))
	}
	t.Cleanup(func() { _ = harness.Command(env, "podman", "rmi", image).Run() })
	if out, err := harness.Command(env, "podman", "run", "--rm", "--network", "none", image, "version").CombinedOutput(); err != nil {
		t.Skipf("podman cannot run a container here: %v\n%s", err, out)
	}

	harness.ClaimBed(t, root)
	bedEnv := append(append([]string(nil), harness.LockedEnv...), "KBT_NO_BRIDGE=1")
	t.Cleanup(func() {
		harness.Sh(t, bedEnv, "bash", filepath.Join(root, "tests/testbed/down.sh"))
		harness.CheckNothingLeft(t)
	})
	harness.Sh(t, bedEnv, "bash", filepath.Join(root, "tests/testbed/up.sh"))

	// The pod's own hugetlbfs, unmounted when the pod is gone as the
	// kubelet removes an emptyDir: every hugepage must be free again then.
	freeBefore := hugeFree(t)
	hugeDir := filepath.Join(dir, "hugepages")
	if err := os.Mkdir(hugeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	harness.Sh(t, nil, "mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "kbt-pod", hugeDir)
	unmount := func() { _ = exec.Command("umount", hugeDir).Run() }
	t.Cleanup(unmount)

	kube := filepath.Join(dir, "sidecar-bed.yaml")
	appCPU := strconv.Itoa(runtime.NumCPU() - 1)
	refapp := []any{"/usr/bin/kbridge-refapp", "-l", appCPU, "--file-prefix", "kbt", "--proc-type", "primary", "--no-pci",
		"--vdev", "net_pcap0,iface=kbt-nic", "--", "--port", "kb0"}
	if err := os.WriteFile(kube, forBed(t, root, "sidecar.yaml", readFile(t, root, "tests/testbed/kbridge.yaml"), refapp, hugeDir), 0o644); err != nil {
		t.Fatal(err)
	}
	down := func() { _ = harness.Command(env, "podman", "kube", "play", "--down", kube).Run() }
	down() // a crashed run's pod
	t.Cleanup(func() {
		if t.Failed() {
			logs(t, env, podName)
		}
		down()
	})
	// The pod joins kbt-dut, the namespace the bed created, where only the
	// bed's 198.18.0.0/15 is reachable. podman 4.3 refuses a pod in a named
	// namespace (--network ns:PATH), so podman runs inside kbt-dut with
	// the host's network mode: its containers stay in the namespace of
	// their caller (nsenter: ip netns exec would mount a sysfs without
	// the cgroup tree). Checked below by the containers' namespace inode.
	harness.Sh(t, env, "nsenter", "--net=/run/netns/kbt-dut", "podman", "kube", "play", "--network", "host", kube)
	harness.WaitUntil(t, "kb0 to answer for 198.18.0.1 from the pod's namespace", 60*time.Second, func() bool {
		return exec.Command("ip", "netns", "exec", "kbt-dut", "ping", "-c1", "-W1", harness.PeerIP).Run() == nil
	})
	appPid, kbPid := ctrPid(t, env, appCtr), ctrPid(t, env, kbCtr)

	t.Run("the pod's containers are in kbt-dut", func(t *testing.T) { checkInDUT(t, appPid, kbPid) })
	// kbridge watches the app's pid and each side checks the other's by
	// pid (the port's owner, the wakeup's sender): one PID namespace.
	t.Run("the pod's containers share one PID namespace", func(t *testing.T) {
		if !sameNS(t, "pid", appPid, kbPid) {
			t.Error("the app's and kbridge's containers have PID namespaces of their own: kbridge cannot see the app exit")
		}
	})
	t.Run("kb0 is in the pod's namespace", func(t *testing.T) {
		if gone, out := harness.LinkGone("kbt-dut", "kb0"); gone {
			t.Fatalf("no kb0 in kbt-dut: %s", out)
		}
	})
	t.Run("the app's container lacks CAP_NET_ADMIN, kbridge's has it", func(t *testing.T) {
		if c := capEff(t, env, appCtr); c&(1<<capNetAd) != 0 {
			t.Errorf("the app's container has CAP_NET_ADMIN (CapEff %016x)", c)
		}
		if c := capEff(t, env, kbCtr); c&(1<<capNetAd) == 0 {
			t.Errorf("kbridge's container lacks CAP_NET_ADMIN (CapEff %016x)", c)
		}
	})
	t.Run("the liveness probe's command answers", func(t *testing.T) {
		podman(t, env, "exec", kbCtr, "kbridge", "stats", "--config", "/etc/kbridge/kbridge.yaml")
	})
	harness.BedTraffic(t)

	// podman restart stops kbridge (SIGTERM) and starts it again in a
	// new container process: the port is free, the new kbridge claims it.
	// Nothing holds kb0's queues across the two (no fd store in a pod), so
	// kb0 is removed with the old kbridge and made again by the new one.
	t.Run("kbridge's container restarted alone serves the app again with kb0 made anew", func(t *testing.T) {
		index := harness.NetSys("kbt-dut", "kb0", "ifindex")
		inDUT(t, env, "restart", kbCtr)
		kbPid = kbridgeBack(t, env, appPid, kbPid)
		if now := harness.NetSys("kbt-dut", "kb0", "ifindex"); now == index {
			t.Errorf("kb0 kept ifindex %s across kbridge's restart: nothing should hold it", now)
		}
		harness.PingBothWays(t)
		bigFileOK(t)
	})
	// kbridge killed (by its pid: podman kill counts as a stop by the
	// user, which no restartPolicy restarts): its container restarts and the
	// new kbridge takes the dead one's port over, as on a host.
	t.Run("kbridge killed is restarted in its container and takes the port over", func(t *testing.T) {
		if err := unix.Kill(kbPid, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		kbPid = kbridgeBack(t, env, appPid, kbPid)
		harness.PingBothWays(t)
	})
	// The app killed: kbridge sees its pid exit, lets go of its memory and
	// runtime files and exits; both containers restart (the pod's
	// restartPolicy) and the new kbridge joins the new app. A kbridge that
	// did not see the exit would keep the dead app's fbarrays locked and
	// the new app would fail in EAL ("Cannot allocate memzone list").
	t.Run("the app killed and restarted in its container is served again", func(t *testing.T) {
		if err := unix.Kill(appPid, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if !harness.WaitGone(kbPid, 20*time.Second) {
			t.Fatalf("kbridge (pid %d) still runs 20 s after the app was killed", kbPid)
		}
		appPid, kbPid = pathBack(t, env, podName, 90*time.Second)
		bigFileOK(t)
	})

	t.Run("the pod's teardown leaves nothing", func(t *testing.T) {
		tornDown(t, env, kube, podName, appPid, kbPid)
		unmount()
		if free := hugeFree(t); free != freeBefore {
			t.Errorf("%d hugepages free after the pod's teardown, %d before it", free, freeBefore)
		}
		if left, _ := filepath.Glob("/dev/hugepages/kbtmap_*"); len(left) > 0 {
			t.Errorf("hugepage files in the host's /dev/hugepages: %v", left)
		}
	})

	// Mode vhost: dpdk-testpmd forwards between kbt-nic and its
	// virtio-user port, the vhost-user server on the socket in the volume
	// the containers share, and kbridge connects to it. No hugetlbfs and no
	// runtime directory shared: each EAL runs --in-memory.
	t.Run("mode vhost: the app's virtio-user port serves kbridge through the shared socket", func(t *testing.T) {
		kubeV := filepath.Join(dir, "sidecar-vhost-bed.yaml")
		testpmd := []any{"/usr/bin/dpdk-testpmd", "--lcores", "0@0,1@" + appCPU, "--in-memory", "--single-file-segments",
			"--no-pci", "-m", "256", "--vdev", "net_pcap0,iface=kbt-nic",
			"--vdev", "net_virtio_user0,path=" + vhostSock + ",queues=1,server=1",
			"--", "--forward-mode=io", "--auto-start", "--nb-cores=1", "--rxq=1", "--txq=1",
			"--total-num-mbufs=16384", "--disable-link-check", "--stats-period=600"}
		if err := os.WriteFile(kubeV, forBed(t, root, "sidecar-vhost.yaml", vhostConfig(t, root), testpmd, ""), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				logs(t, env, vhostPod)
			}
			_ = harness.Command(env, "podman", "kube", "play", "--down", kubeV).Run()
		})
		inDUT(t, env, "kube", "play", "--network", "host", kubeV)
		app, kb := pathBack(t, env, vhostPod, 60*time.Second)
		if c := capEff(t, env, vhostPod+"-app"); c&(1<<capNetAd) != 0 {
			t.Errorf("the app's container has CAP_NET_ADMIN (CapEff %016x)", c)
		}
		harness.PingBothWays(t)
		bigFileOK(t)
		tornDown(t, env, kubeV, vhostPod, app, kb)
		if free := hugeFree(t); free != freeBefore {
			t.Errorf("%d hugepages free after the pod's teardown, %d before it", free, freeBefore)
		}
	})
}

// tornDown takes the pod of kube down and checks that it leaves no
// process, kb0 or container.
func tornDown(t *testing.T, env []string, kube, pod string, app, kb int) {
	t.Helper()
	podman(t, env, "kube", "play", "--down", kube)
	for what, pid := range map[string]int{"the app": app, "kbridge": kb} {
		if !harness.WaitGone(pid, 10*time.Second) {
			t.Errorf("%s (pid %d) still runs after the pod's teardown", what, pid)
		}
	}
	if gone, out := harness.LinkGone("kbt-dut", "kb0"); !gone {
		t.Errorf("kb0 left in kbt-dut after the pod's teardown: %s", out)
	}
	if out := podman(t, env, "ps", "-a", "--filter", "pod="+pod, "--format", "{{.Names}}"); strings.TrimSpace(out) != "" {
		t.Errorf("containers left: %s", out)
	}
}

// logs logs the first and the last words of a pod's containers: they
// restart on failure.
func logs(t *testing.T, env []string, pod string) {
	for _, c := range []string{pod + "-app", pod + "-kbridge"} {
		out, _ := harness.Command(env, "podman", "logs", c).CombinedOutput()
		head := string(out)[:min(len(out), 2000)]
		t.Logf("%s's log:\n%s\n[...]\n%s", c, head, harness.Tail(string(out), 1500))
	}
}

// hugeFree reads HugePages_Free from /proc/meminfo.
func hugeFree(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "HugePages_Free:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no HugePages_Free in /proc/meminfo")
	return 0
}

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

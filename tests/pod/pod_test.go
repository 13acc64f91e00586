// Package pod runs deploy/kubernetes/sidecar.yaml with podman kube play on the
// test bed: the reference app in the pod's app container (no NET_ADMIN) and
// kbridge in its sidecar create kb0 in the pod's network namespace, which is
// the bed's kbt-dut (never podman's own network, which reaches outside).
// The bed's traffic crosses kb0 from there, the app's container is shown to
// lack CAP_NET_ADMIN, and the pod's teardown leaves nothing. Root only; it
// skips, saying why, where podman cannot run containers.
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

// forBed rewrites sidecar.yaml's documents for the bed: the image the test
// built (the reference app in it), the app's arguments on kbt-nic (through
// net_pcap, which needs NET_RAW only: net_af_packet sets the interface's
// MAC and promiscuity with ioctls that need NET_ADMIN), the
// bed's kbridge.yaml in the ConfigMap, and /dev/hugepages for the pod's
// hugetlbfs: a hugetlbfs the test mounts at hugeDir, as the kubelet does
// for a HugePages emptyDir (podman makes none), and no declared ports. Everything else is the file's.
func forBed(t *testing.T, root, hugeDir string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/sidecar.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, "tests/testbed/kbridge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	appCPU := strconv.Itoa(runtime.NumCPU() - 1)
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
			doc["data"] = map[string]any{"kbridge.yaml": string(cfg)}
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
					c["command"] = []any{"/usr/bin/kbridge-refapp"}
					c["args"] = []any{"-l", appCPU, "--file-prefix", "kbt", "--proc-type", "primary", "--no-pci",
						"--vdev", "net_pcap0,iface=kbt-nic", "--", "--port", "kb0"}
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
	pid, err := strconv.Atoi(strings.TrimSpace(podman(t, env, "inspect", "--format", "{{.State.Pid}}", ctr)))
	if err != nil || pid <= 0 {
		t.Fatalf("container %s has no process (%v)", ctr, err)
	}
	return pid
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
	for _, bin := range []string{"bin/kbridge", "bin/kbridge-refapp"} {
		if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
			t.Fatalf("%s missing: run make build (make test does)", bin)
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
	build := harness.Command(append(env, "KBRIDGE_IMAGE_EXTRA="+filepath.Join(root, "bin/kbridge-refapp")),
		"bash", filepath.Join(root, "deploy/image/build.sh"), filepath.Join(root, "bin"), image)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/image/build.sh: %v\n%s", err, out)
	} else {
		t.Logf("%s", harness.LastLine(string(out)))
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
	if err := os.WriteFile(kube, forBed(t, root, hugeDir), 0o644); err != nil {
		t.Fatal(err)
	}
	down := func() { _ = harness.Command(env, "podman", "kube", "play", "--down", kube).Run() }
	down() // a crashed run's pod
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{appCtr, kbCtr} {
				out, _ := harness.Command(env, "podman", "logs", c).CombinedOutput()
				// The first start's words, and the last ones: the
				// containers restart on failure.
				head := string(out)[:min(len(out), 2000)]
				t.Logf("%s's log:\n%s\n[...]\n%s", c, head, harness.Tail(string(out), 1500))
			}
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

	t.Run("the pod's containers are in kbt-dut", func(t *testing.T) {
		want, err := os.Stat("/run/netns/kbt-dut")
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range []int{appPid, kbPid} {
			got, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				t.Fatal(err)
			}
			if !os.SameFile(got, want) {
				t.Errorf("pid %d's network namespace is not kbt-dut", pid)
			}
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

	t.Run("the pod's teardown leaves nothing", func(t *testing.T) {
		podman(t, env, "kube", "play", "--down", kube)
		for what, pid := range map[string]int{"the app": appPid, "kbridge": kbPid} {
			if !harness.WaitGone(pid, 10*time.Second) {
				t.Errorf("%s (pid %d) still runs after the pod's teardown", what, pid)
			}
		}
		if gone, out := harness.LinkGone("kbt-dut", "kb0"); !gone {
			t.Errorf("kb0 left in kbt-dut after the pod's teardown: %s", out)
		}
		unmount()
		if free := hugeFree(t); free != freeBefore {
			t.Errorf("%d hugepages free after the pod's teardown, %d before it", free, freeBefore)
		}
		if left, _ := filepath.Glob("/dev/hugepages/kbtmap_*"); len(left) > 0 {
			t.Errorf("hugepage files in the host's /dev/hugepages: %v", left)
		}
		if out := podman(t, env, "ps", "-a", "--filter", "pod="+podName, "--format", "{{.Names}}"); strings.TrimSpace(out) != "" {
			t.Errorf("containers left: %s", out)
		}
	})
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

package kni

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/tests/harness"
)

// fakeKbridge stands in for kbridge in TestKbridgeChildHeader: it writes
// down its environment, its signal state and its arguments into
// $KBCHK_OUT, then lives $KBCHK_LIFE seconds, or until SIGTERM (exit 0).
// The trap comes first: the check stops it as soon as env exists.
const fakeKbridge = `#!/bin/sh
trap 'exit 0' TERM
env >"$KBCHK_OUT/env.tmp"
grep -E '^Sig(Ign|Blk):' /proc/$$/status >"$KBCHK_OUT/sig"
printf '%s\n' "$*" >"$KBCHK_OUT/args"
cp "$3" "$KBCHK_OUT/config.yaml"
mv "$KBCHK_OUT/env.tmp" "$KBCHK_OUT/env"
if [ -n "$KBCHK_LIFE" ]; then sleep "$KBCHK_LIFE"; exit 0; fi
while :; do sleep 0.05; done
`

// TestKbridgeChildHeader runs kbridge_child.h alone (testdata/childcheck.c,
// built here against the host's DPDK) with a stand-in kbridge:
//   - the child's environment is the app's without systemd's NOTIFY_SOCKET,
//     WATCHDOG_* and LISTEN_*, and it starts with no signal ignored or
//     blocked, whatever the app's thread had;
//   - a directory named kbridge on PATH is passed over for the file after it;
//   - a symbolic link planted where the configuration goes is replaced, its
//     target never written;
//   - a child that exited and was reaped by the app (SIGCHLD ignored), its
//     pid since taken by another process of the app, is forgotten by
//     kbridge_child_stop, which signals nobody (in a PID namespace of its
//     own, where ns_last_pid hands the pid on);
//   - any name the kernel takes for an interface (DPVS's dpdk0.kni, and one
//     with a quote, a backslash and a control byte) reaches kbridge whole,
//     as its own configuration loader reads the file written for it, and
//     names the instance; one the kernel refuses is refused before anything
//     runs.
func TestKbridgeChildHeader(t *testing.T) {
	harness.NeedRoot(t, "DPDK's EAL and a PID namespace need root")
	for _, c := range []string{"cc", "pkg-config", "unshare"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s missing", c)
		}
	}
	root := harness.RepoRoot(t)
	dir := t.TempDir()
	prog := filepath.Join(dir, "childcheck")
	flags := strings.Fields(harness.Sh(t, nil, "pkg-config", "--cflags", "--libs", "libdpdk"))
	build := append([]string{"-O1", "-Wall", "-Wextra", "-Werror", "-I" + filepath.Join(root, "include", "kbridge"), "-o", prog,
		filepath.Join(root, "tests/kni/testdata/childcheck.c")}, flags...)
	if out, err := exec.Command("cc", build...).CombinedOutput(); err != nil {
		t.Fatalf("building childcheck.c: %v\n%s", err, out)
	}
	fake := filepath.Join(dir, "bin", "kbridge")
	if err := os.MkdirAll(filepath.Dir(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, []byte(fakeKbridge), 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory named kbridge, first on PATH.
	shadow := filepath.Join(dir, "shadow")
	if err := os.MkdirAll(filepath.Join(shadow, "kbridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	systemd := []string{"NOTIFY_SOCKET=/run/systemd/notify", "WATCHDOG_USEC=3000000", "WATCHDOG_PID=1",
		"LISTEN_FDS=1", "LISTEN_PID=1", "LISTEN_FDNAMES=app"}
	eal := func(prefix string) []string {
		return []string{"--no-huge", "--no-pci", "--no-shconf", "-m", "32", "--file-prefix", prefix,
			"--log-level", "lib.eal:error", "--"}
	}
	for _, tc := range []struct {
		name, mode string
		env        []string
		unshare    bool
		check      func(t *testing.T, out string)
	}{
		{name: "environment", mode: "run", env: append([]string{"KBRIDGE_BIN=" + fake, "KBCHK_KEEP=kept"}, systemd...),
			check: func(t *testing.T, out string) {
				env := read(t, filepath.Join(out, "env"))
				for _, v := range systemd {
					if name, _, _ := strings.Cut(v, "="); strings.Contains(env, "\n"+name+"=") || strings.HasPrefix(env, name+"=") {
						t.Errorf("the child's environment has the app's %s", name)
					}
				}
				if !strings.Contains(env, "KBCHK_KEEP=kept\n") {
					t.Errorf("the child's environment lost the app's other variables:\n%s", env)
				}
				if sig := read(t, filepath.Join(out, "sig")); !freshSignals(sig) {
					t.Errorf("the child ignores or blocks signals a fresh process would not:\n%s", sig)
				}
				if args := read(t, filepath.Join(out, "args")); !strings.Contains(args, "run --config ") {
					t.Errorf("the child's arguments: %s", args)
				}
			}},
		{name: "DPVS's name", mode: "run", env: []string{"KBRIDGE_BIN=" + fake, "KBCHK_NAME=dpdk0.kni"},
			check: func(t *testing.T, out string) { childConfigNames(t, out, "dpdk0.kni") }},
		{name: "a name to escape", mode: "run", env: []string{"KBRIDGE_BIN=" + fake, "KBCHK_NAME=" + oddName},
			check: func(t *testing.T, out string) { childConfigNames(t, out, oddName) }},
		{name: "a name the kernel refuses", mode: "refused", env: []string{"KBRIDGE_BIN=" + fake, "KBCHK_NAME=a:b"}},
		{name: "path", mode: "run", env: []string{"PATH=" + shadow + ":" + filepath.Dir(fake) + ":/usr/bin:/bin"}},
		{name: "symlink", mode: "symlink", env: []string{"KBRIDGE_BIN=" + fake}},
		{name: "reused pid", mode: "reused", env: []string{"KBRIDGE_BIN=" + fake, "KBCHK_LIFE=0.2"}, unshare: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			// EAL leaves its runtime directory (kbridge_child.h writes the
			// configuration there): gone with the case.
			t.Cleanup(func() { os.RemoveAll(filepath.Join("/var/run/dpdk", "kbchk"+tc.mode)) })
			args := append(append([]string{prog}, eal("kbchk"+tc.mode)...), tc.mode)
			if tc.unshare {
				args = append([]string{"unshare", "--pid", "--fork", "--mount-proc"}, args...)
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(append(withoutKBRIDGE(os.Environ()), "KBCHK_OUT="+out), tc.env...)
			res, err := cmd.CombinedOutput()
			t.Logf("%s:\n%s", strings.Join(args, " "), res)
			if err != nil || strings.Contains(string(res), "childcheck: FAIL") {
				t.Errorf("childcheck %s: %v", tc.mode, err)
			}
			if tc.check != nil && err == nil {
				tc.check(t, out)
			}
		})
	}
}

// oddName is a name the kernel takes for an interface that YAML needs
// escaped: a quote, a backslash, a control byte.
const oddName = "d\"0\\.kni\x01"

// childConfigNames loads the configuration kbridge_child.h wrote (the
// stand-in's copy) with kbridge's own loader, and checks that the port,
// the interface and the instance's control socket are name's, and that the
// instance passed is name.
func childConfigNames(t *testing.T, out, name string) {
	t.Helper()
	c, err := config.Load(filepath.Join(out, "config.yaml"))
	if err != nil {
		t.Fatalf("kbridge cannot load the configuration written for %q: %v\n%s", name, err, read(t, filepath.Join(out, "config.yaml")))
	}
	if c.Port != name || c.Interface.Name != name || c.Stats.Socket != "/run/kbridge/"+name+"/control.sock" {
		t.Errorf("the configuration written for %q says port %q, interface %q, socket %q", name, c.Port, c.Interface.Name, c.Stats.Socket)
	}
	if args := read(t, filepath.Join(out, "args")); !strings.HasSuffix(args, "--instance "+name+"\n") {
		t.Errorf("the child's arguments %q do not end with --instance %q", args, name)
	}
}

// glibcReserved are signals 32 and 33 (bits 31 and 32 of /proc's masks),
// which glibc keeps for itself: its sigaction refuses them, so neither an
// app nor kbridge_child.h sets them, and an ignored one comes from whoever
// started the test (seen under CI).
const glibcReserved = 1<<31 | 1<<32

// freshSignals says whether /proc's SigBlk and SigIgn lines show nothing
// blocked or ignored, glibc's own signals aside.
func freshSignals(status string) bool {
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(status), "\n") {
		_, hex, ok := strings.Cut(l, "\t")
		mask, err := strconv.ParseUint(hex, 16, 64)
		if !ok || err != nil || mask&^glibcReserved != 0 {
			return false
		}
		n++
	}
	return n == 2
}

// withoutKBRIDGE is env without KBRIDGE_BIN: each case names its kbridge.
func withoutKBRIDGE(env []string) []string {
	var kept []string
	for _, v := range env {
		if !strings.HasPrefix(v, "KBRIDGE_BIN=") {
			kept = append(kept, v)
		}
	}
	return kept
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

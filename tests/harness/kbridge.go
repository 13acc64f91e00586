package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kbridge/kbridge/tap/taptest"
)

// The kbridge binary of this test binary: built from the working tree the
// first time a test asks for it, shared by every later test, removed by
// Main when the test binary ends.
var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// BuildKbridge builds cmd/kbridge once per process and returns its path.
func BuildKbridge() (string, error) {
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "kbridge-test-bin")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "kbridge")
		out, err := goBuild("-o", build.bin, "github.com/kbridge/kbridge/cmd/kbridge")
		if err != nil {
			build.err = fmt.Errorf("go build kbridge: %w\n%s", err, out)
		}
	})
	return build.bin, build.err
}

// goBuild runs go build with args as the Makefile builds kbridge, also
// under a plain go test: GOEXPERIMENT with norandomizedheapbase64, without
// which a kbridge's Go heap lands at a random address, now and then one
// the app's DPDK memory must be mapped at (docs/DPDK.md). A go test run
// without make met it in tests/app: EAL's "Cannot get a virtual area at
// requested address".
func goBuild(args ...string) ([]byte, error) {
	exp := os.Getenv("GOEXPERIMENT")
	if !strings.Contains(exp, "norandomizedheapbase64") {
		exp = strings.TrimPrefix(exp+",norandomizedheapbase64", ",")
	}
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), "GOEXPERIMENT="+exp) // the last one counts
	return cmd.CombinedOutput()
}

// The kbridge binary with the test hooks (ring/testhook.go, tap/testhook.go):
// built the first time a test asks for it, removed by Teardown.
var hookBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// BuildKbridgeTestHook builds cmd/kbridge with the kbridge_testhook tag once
// per process and returns its path: a kbridge whose worker parks inside a
// ring operation when KBRIDGE_TEST_PARK says so, and whose GSO writes to the
// TAP fail when KBRIDGE_TEST_REFUSE_GSO is set. Only tests run it.
func BuildKbridgeTestHook() (string, error) {
	hookBuild.once.Do(func() {
		hookBuild.dir, hookBuild.err = os.MkdirTemp("", "kbridge-test-hook-bin")
		if hookBuild.err != nil {
			return
		}
		hookBuild.bin = filepath.Join(hookBuild.dir, "kbridge")
		out, err := goBuild("-tags", "kbridge_testhook", "-o", hookBuild.bin, "github.com/kbridge/kbridge/cmd/kbridge")
		if err != nil {
			hookBuild.err = fmt.Errorf("go build -tags kbridge_testhook kbridge: %w\n%s", err, out)
		}
	})
	return hookBuild.bin, hookBuild.err
}

// Kbridge is BuildKbridge for a test: a build that fails fails t.
func Kbridge(t testing.TB) string {
	t.Helper()
	bin, err := BuildKbridge()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Main runs the tests and removes what the harness kept for the whole test
// binary (the kbridge build). A package's TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
func Main(m *testing.M) int {
	taptest.Main() // this binary started again as taptest's attacker
	code := m.Run()
	Teardown()
	return code
}

// Teardown removes the kbridge build; for a TestMain that does more than
// Main.
func Teardown() {
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	if hookBuild.dir != "" {
		_ = os.RemoveAll(hookBuild.dir)
	}
}

// KbridgeStats runs `kbridge stats` (the binary Kbridge built) on control
// socket sock and decodes its JSON into v; it fails t when either fails.
func KbridgeStats(t testing.TB, sock string, v any) {
	t.Helper()
	out, err := exec.Command(Kbridge(t), "stats", "--socket", sock).Output()
	if err == nil {
		err = json.Unmarshal(out, v)
	}
	if err != nil {
		t.Fatalf("kbridge stats: %v\n%s", err, out)
	}
}

// KbridgeAnswers reports whether a kbridge answers `kbridge stats` on sock.
func KbridgeAnswers(t testing.TB, sock string) bool {
	return exec.Command(Kbridge(t), "stats", "--socket", sock).Run() == nil
}

// WriteAtomic writes content to path through a rename, so that a kbridge
// reloading on SIGHUP (or watching the file) never reads half of it.
func WriteAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

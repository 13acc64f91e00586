package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Output runs name with args and env added to the environment and returns
// its stdout. On timeout or cancellation the
// process gets SIGTERM, then SIGKILL 3 s later; an error carries the last
// line of stderr (of stdout when stderr is empty). For programs that are not
// tests (tests/soak, tests/bench), so it takes no testing.T.
func Output(ctx context.Context, timeout time.Duration, env []string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return stdout.Bytes(), fmt.Errorf("%s timed out after %v", program(append([]string{name}, args...)), timeout)
	}
	if err != nil {
		msg := LastLine(stderr.String())
		if msg == "" {
			msg = LastLine(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%w: %s", err, msg)
	}
	return stdout.Bytes(), nil
}

// program names what args run, past the wrappers that exec it in place
// (ip netns exec NS, taskset -c CPUS).
func program(args []string) string {
	i := 0
	for i < len(args)-1 {
		switch base := filepath.Base(args[i]); {
		case base == "ip" && i+3 < len(args) && args[i+1] == "netns" && args[i+2] == "exec":
			i += 4
		case base == "taskset" && i+2 < len(args) && args[i+1] == "-c":
			i += 3
		default:
			return base
		}
	}
	return filepath.Base(args[min(i, len(args)-1)])
}

// WithPolicy returns the YAML configuration base with its top-level policy
// block replaced by block ("policy:\n  mode: busy\n").
func WithPolicy(base, block string) string {
	var keep []string
	inPolicy := false
	for _, line := range strings.Split(strings.TrimRight(base, "\n"), "\n") {
		top := line != "" && line[0] != ' ' && line[0] != '\t' && line[0] != '#'
		if top {
			inPolicy = strings.HasPrefix(line, "policy:")
		}
		if !inPolicy {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n") + "\n" + block
}

// LoadAvg is /proc/loadavg's three load averages, "?" when unreadable: what
// a soak or benchmark report says the machine was doing besides.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

package harness

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ProcStat is what /proc/<pid>/stat says of a process.
type ProcStat struct {
	State   string // field 3
	Threads int    // field 20
	Start   uint64 // field 22, clock ticks since boot
}

// ReadProcStat reads /proc/<pid>/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	threads, err1 := strconv.Atoi(f[17])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return ProcStat{State: f[0], Threads: threads, Start: start}, nil
}

// WaitProcState waits until pid's state is state.
func WaitProcState(t *testing.T, pid int, state string) {
	t.Helper()
	WaitUntil(t, fmt.Sprintf("pid %d to be in state %s", pid, state), 10*time.Second, func() bool {
		st, err := ReadProcStat(pid)
		return err == nil && st.State == state
	})
}

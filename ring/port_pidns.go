package ring

// Whether kbridge sees the app's process: the header's owner rule and the
// app's exit watch read pids, which mean the same on both sides only in one
// PID namespace.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrOtherPIDNamespace means the DPDK primary runs in a PID namespace kbridge
// cannot see into (two containers of a pod without a shared process
// namespace, say). The pids kbridge and the app exchange would then name
// other processes: kbridge could not notice the app exit, and the app would
// refuse kbridge's eventfd.
var ErrOtherPIDNamespace = errors.New("ring: the DPDK app runs in a PID namespace kbridge cannot see")

// CheckPrimaryVisible returns ErrOtherPIDNamespace when the process that
// holds the primary's configuration lock in runtimeDir is not visible from
// kbridge's PID namespace: the kernel reports such a holder's pid as 0. No
// holder, or a file it cannot read, is PrimaryAlive's to report.
func CheckPrimaryVisible(runtimeDir, prefix string) error {
	path := filepath.Join(runtimeDir, prefix, "config")
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
		return fmt.Errorf("ring: %s: F_GETLK: %w", path, err)
	}
	if lk.Type != unix.F_UNLCK && lk.Pid == 0 {
		return fmt.Errorf("%w: the process holding %s has no pid here; run kbridge in the app's PID namespace "+
			"(a pod: shareProcessNamespace: true; a DaemonSet beside a host app: hostPID: true)", ErrOtherPIDNamespace, path)
	}
	return nil
}

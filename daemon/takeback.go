package daemon

// Taking back after a handover the successor did not confirm: this
// kbridge executes itself again over the queues it kept, as reattach.go's
// path does over systemd's fd store.

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TakeBackError is what Serve returns when a handover was not confirmed:
// this process still holds the interface's queues (Fds, in queue order)
// and must serve again; TakeBack does.
type TakeBackError struct {
	Interface string
	Fds       []int
	Successor int
	Cause     error
}

func (e *TakeBackError) Error() string {
	return fmt.Sprintf("the successor (pid %d) did not confirm the takeover: %v", e.Successor, e.Cause)
}

func (e *TakeBackError) Unwrap() error { return e.Cause }

// The variables by which a kbridge executed again over its own queues
// finds them (TakeBack, TakenBack).
const (
	envTakenBackFds  = "KBRIDGE_TAKEN_BACK_FDS"  // the fd numbers, in queue order
	envTakenBackFrom = "KBRIDGE_TAKEN_BACK_FROM" // the successor's pid
)

// TakeBack executes this kbridge again, with the same pid and arguments
// (but --takeover), over the queues e holds: the new image starts as any
// kbridge does and adopts them as systemd's fd store passes them. The
// running path cannot be started again in place (the EAL starts once a
// process, librte_vhost serves one backend), and a fresh start is the
// path every start takes. It returns only if the exec failed.
func TakeBack(e *TakeBackError) error {
	var args []string
	for _, a := range os.Args {
		if flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); !strings.HasPrefix(a, "-") || flag != "takeover" {
			args = append(args, a)
		}
	}
	return execAgain("take back", args, e.Interface, e.Fds, e.Successor)
}

// execAgain executes kbridge again under this pid with args, passing the
// queues of interface iface (fds, in queue order) as TakenBack finds them,
// with from, the pid whose takeover was not confirmed (0: none, the queues
// were systemd's). The environment is kept. It returns only if the exec
// failed; what names the error.
func execAgain(what string, args []string, iface string, fds []int, from int, set ...string) error {
	// Every other fd goes with the exec: DPDK opens its files (the memseg
	// lists, the hugepages) without O_CLOEXEC and locks them, and the new
	// image's EAL, under the same pid, would find them locked.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		cloexecAll()
	}
	nums := make([]string, len(fds))
	for i, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("%s: fd %d: %w", what, fd, err)
		}
		nums[i] = strconv.Itoa(fd)
	}
	env := set
	if len(fds) > 0 {
		env = append(env, envTakenBackFds+"="+iface+":"+strings.Join(nums, ","), envTakenBackFrom+"="+strconv.Itoa(from))
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envTakenBackFds+"=") && !strings.HasPrefix(kv, envTakenBackFrom+"=") && !strings.HasPrefix(kv, envEALAttempt+"=") {
			env = append(env, kv)
		}
	}
	Notify("WATCHDOG=1") // the new image's EAL takes a second or two before it pings
	err := syscall.Exec("/proc/self/exe", args, env)
	return fmt.Errorf("%s: execute kbridge again: %w", what, err)
}

// cloexecAll marks every fd from 3 on close-on-exec, as close_range does
// from Linux 5.11.
func cloexecAll() {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// TakenBack returns the queues a kbridge executed again by TakeBack (or
// Reattach) holds, named as systemd's fd store names them, and the
// successor's pid (0 after Reattach of queues systemd had passed); none
// when it was not. The fds are marked close-on-exec and the variables
// unset.
func TakenBack() (fds []ListenFd, from int) {
	v, ok := os.LookupEnv(envTakenBackFds)
	from, _ = strconv.Atoi(os.Getenv(envTakenBackFrom))
	_ = os.Unsetenv(envTakenBackFds)
	_ = os.Unsetenv(envTakenBackFrom)
	iface, nums, _ := strings.Cut(v, ":")
	if !ok || iface == "" || nums == "" {
		return nil, 0
	}
	for q, n := range strings.Split(nums, ",") {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 0 {
			continue
		}
		unix.CloseOnExec(fd)
		fds = append(fds, ListenFd{Fd: fd, Name: queueFdName(iface, q)})
	}
	return fds, from
}

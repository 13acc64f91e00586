// Package taptest plays a local user without privileges against kbridge's
// TAP: a process of the interface's network namespace, as uid and gid
// 65534 with no supplementary group and no capability (what `setpriv
// --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all
// --bounding-set=-all` makes), asks the TUN driver to attach one more
// queue to the interface, as any user may to a TAP without an owner.
//
// The attacker is the test binary itself, started again: a TestMain calls
// Main first, which in that child does the attempt and exits.
package taptest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The child's instructions: the interface to attach to, and the network
// namespace to do it in (a path: /run/netns/NAME, /proc/PID/task/TID/ns/net).
const (
	envIface = "KBRIDGE_TAPTEST_ATTACH"
	envNetns = "KBRIDGE_TAPTEST_NETNS"
)

// Nobody is the uid and gid the attacker runs as.
const Nobody = 65534

// The child's exit codes.
const (
	exitAttached = 0
	exitRefused  = 1 // TUNSETIFF failed with EPERM
	exitOther    = 2
)

// ErrAttached is what AttachAsNobody returns when the queue attached: the
// interface lets any local user in.
var ErrAttached = errors.New("a process without privileges attached a queue")

// Main does the attacker's attempt and exits when this process was
// started as one (AttachAsNobody), and returns at once otherwise. Call
// it first in TestMain, before anything the attacker must not run.
func Main() {
	name := os.Getenv(envIface)
	if name == "" {
		return
	}
	code, msg := attach(os.Getenv(envNetns), name)
	fmt.Println(msg)
	os.Exit(code)
}

// AttachAsNobody starts this test binary again as the attacker (Main),
// in network namespace netns (a path), and has it attach a queue to TAP
// name with the flags kbridge's queues have. It returns an error wrapping
// unix.EPERM when the driver refused, one wrapping ErrAttached when the
// queue attached (and was closed again at once), and any other failure
// as it came.
func AttachAsNobody(netns, name string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), envIface+"="+name, envNetns+"="+netns)
	out, err := cmd.CombinedOutput()
	msg := strings.TrimSpace(string(out))
	var exit *exec.ExitError
	switch {
	case err == nil:
		return fmt.Errorf("%w to %s as uid %d: %s", ErrAttached, name, Nobody, msg)
	case errors.As(err, &exit) && exit.ExitCode() == exitRefused:
		return fmt.Errorf("as uid %d: %s: %w", Nobody, msg, unix.EPERM)
	}
	return fmt.Errorf("the attacker failed: %w: %s", err, msg)
}

// NetnsOfThisThread is the path of the calling thread's network namespace,
// as another process opens it (the thread must stay locked to its
// goroutine while it is used).
func NetnsOfThisThread() string {
	return fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
}

// attach is the child's attempt: it enters netns, drops every privilege,
// then opens /dev/net/tun and asks TUNSETIFF for a queue of name.
func attach(netns, name string) (code int, msg string) {
	runtime.LockOSThread() // the namespace and the bounding set are this thread's
	if netns != "" {
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return exitOther, fmt.Sprintf("open %s: %v", netns, err)
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return exitOther, fmt.Sprintf("setns %s: %v", netns, err)
		}
		unix.Close(fd)
	}
	if err := dropPrivileges(); err != nil {
		return exitOther, err.Error()
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return exitOther, fmt.Sprintf("open /dev/net/tun: %v", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return exitOther, err.Error()
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_MULTI_QUEUE | unix.IFF_VNET_HDR | unix.IFF_NO_PI)
	err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	switch {
	case err == nil:
		return exitAttached, "attached a queue to " + name
	case errors.Is(err, unix.EPERM):
		return exitRefused, fmt.Sprintf("TUNSETIFF %s: %v", name, err)
	}
	return exitOther, fmt.Sprintf("TUNSETIFF %s: %v", name, err)
}

// dropPrivileges does what setpriv --reuid=65534 --regid=65534
// --clear-groups --inh-caps=-all --bounding-set=-all does, and checks that
// no capability is left.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(Nobody, Nobody, Nobody); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(Nobody, Nobody, Nobody); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	// The uid change emptied the permitted and effective sets; the
	// inheritable one goes too.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	st, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(st))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		switch k {
		case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb":
			if strings.Trim(strings.TrimSpace(v), "0") != "" {
				return fmt.Errorf("%s %s left after dropping privileges", k, strings.TrimSpace(v))
			}
		case "Uid", "Gid":
			for _, id := range strings.Fields(v) {
				if id != fmt.Sprint(Nobody) {
					return fmt.Errorf("%s %s after dropping privileges", k, strings.TrimSpace(v))
				}
			}
		}
	}
	return nil
}

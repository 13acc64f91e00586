package tap

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Whose is a TAP interface? kbridge's TAP is not persistent: the kernel
// removes it when the last queue fd closes, so one that lingers is held
// open by someone, or was made persistent by another tool. RemoveOrphan
// (kbridge cleanup, which systemd runs after every stop, a refused start
// too) and Create (which finds the name taken) delete one only when they
// can prove nobody uses it (linkUse.orphan):
//
//   - the mark kbridge leaves in the interface's alias (aliasPrefix, its
//     pid and start time) names no live kbridge;
//   - the kernel counts no queue attached to it (IFLA_TUN_NUM_QUEUES and
//     the disabled ones): this holds whoever the holder is, also a process
//     this one may not look at;
//   - no process is seen holding a queue of it open (each TUN fd's
//     /proc/<pid>/fdinfo names its interface, "iff:");
//   - and, for an interface without kbridge's mark, the scan of /proc was
//     complete. Under kbridge.service's CapabilityBoundingSet the kernel
//     refuses to show kbridge the fds of a root process with more
//     capabilities (EACCES), and ProtectProc=invisible hides such a
//     process altogether, so there the scan is never complete and an
//     unmarked interface, another tool's, is never deleted. One marked by
//     a dead kbridge, with no queue attached, is kbridge's own leftover
//     and is deleted even so: the kernel's count is what proves nobody
//     holds it.

// aliasPrefix starts the alias kbridge gives its TAP interface:
// "kbridge pid=<pid> start=<start time in clock ticks since boot>".
const aliasPrefix = "kbridge pid="

// ownerAlias is this process's mark.
func ownerAlias() string {
	pid := os.Getpid()
	start, _, _ := procStart(pid)
	return fmt.Sprintf("%s%d start=%d", aliasPrefix, pid, start)
}

// markOwner sets the interface's alias to this process's mark. It is best
// effort: without it, RemoveOrphan still looks for holders.
func markOwner(link netlink.Link) {
	_ = netlink.LinkSetAlias(link, ownerAlias())
}

// MadeHere reports whether the interface called name is a TAP this process
// made or adopted: its alias carries this process's mark (markOwner).
func MadeHere(name string) bool {
	l, err := netlink.LinkByName(name)
	if err != nil || l.Type() != "tuntap" {
		return false
	}
	pid, alive, ok := markedOwner(l.Attrs().Alias)
	return ok && alive && pid == os.Getpid()
}

// procStart reads pid's start time (clock ticks since boot) and state from
// /proc/<pid>/stat.
func procStart(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command may hold spaces and parentheses: fields follow the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("tap: /proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("tap: /proc/%d/stat: %d fields", pid, len(f))
	}
	start, err = strconv.ParseUint(f[19], 10, 64) // field 22, starttime
	return start, f[0][0], err
}

// markedOwner parses alias. It reports the pid, and whether that process
// may still run: a mark whose pid is gone, a zombie, or another process
// (its start time differs) is dead. A process it cannot read counts as
// alive. ok is false for an alias that is no kbridge mark.
func markedOwner(alias string) (pid int, alive, ok bool) {
	rest, found := strings.CutPrefix(alias, aliasPrefix)
	if !found {
		return 0, false, false
	}
	var start uint64
	if n, err := fmt.Sscanf(rest, "%d start=%d", &pid, &start); n != 2 || err != nil || pid <= 0 {
		return 0, false, false
	}
	got, state, err := procStart(pid)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return pid, false, true
	case err != nil:
		return pid, true, true
	}
	return pid, got == start && state != 'Z' && state != 'X', true
}

// holders lists the processes, other than this one, that hold a TUN fd
// attached to an interface called name. complete is false when some
// process's fds could not be read: its fd directory, an fd's target or its
// fdinfo refused (EACCES, EPERM: another user's, a root process with more
// capabilities than this one, a non-dumpable one) rather than gone.
func holders(name string) (pids []int, complete bool) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	complete = true
	self := os.Getpid()
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || pid == self {
			continue
		}
		held, sure := holds(dir, name)
		if held {
			pids = append(pids, pid)
		}
		complete = complete && sure
	}
	return pids, complete
}

// holds reports whether the process of /proc directory dir holds a TUN fd
// attached to name; sure is false when some of its fds could not be read.
func holds(dir, name string) (held, sure bool) {
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return false, gone(err) // gone meanwhile is fine; unreadable is not
	}
	sure = true
	for _, fd := range fds {
		tun, err := isTUN(filepath.Join(dir, "fd", fd.Name()))
		if err != nil {
			sure = sure && gone(err)
			continue
		}
		if !tun {
			continue
		}
		iff, err := tunIface(filepath.Join(dir, "fdinfo", fd.Name()))
		switch {
		case err != nil:
			sure = sure && gone(err)
		case iff == name:
			return true, true
		}
	}
	return false, sure
}

// gone reports whether err says that what was read no longer exists (a
// process or fd that ended during the scan), which leaves the scan sure;
// any other error (EACCES, EPERM) leaves it unsure.
func gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// isTUN reports whether the fd behind path (/proc/PID/fd/N) is an open
// /dev/net/tun: by its device number (char 10:200), since the link's text
// depends on the reader's root and mounts (a holder in another mount
// namespace or chroot shows another path).
func isTUN(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, err
	}
	return isTUNDevice(st), nil
}

// isTUNDevice reports whether st is /dev/net/tun's: char 10:200, the
// misc device's fixed minor (TUN_MINOR).
func isTUNDevice(st unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 10 && unix.Minor(st.Rdev) == 200
}

// tunIface reads the interface a TUN fd is attached to from its fdinfo.
func tunIface(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "iff:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", sc.Err()
}

// linkUse is what is known of who uses a TAP interface.
type linkUse struct {
	markPid   int    // the pid kbridge's mark names; 0: no mark
	markAlive bool   // that kbridge may still run
	markCmd   string // its command line, when it could be read
	queues    int    // queues attached, as the kernel counts them (disabled ones too)
	holders   []int
	complete  bool // every process's fds could be read
}

// useOf gathers linkUse for TAP interface l.
func useOf(l netlink.Link) linkUse {
	var u linkUse
	pid, alive, marked := markedOwner(l.Attrs().Alias)
	if marked {
		u.markPid, u.markAlive = pid, alive
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && alive {
			u.markCmd = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if t, ok := l.(*netlink.Tuntap); ok {
		u.queues = t.Queues + t.DisabledQueues
	}
	u.holders, u.complete = holders(l.Attrs().Name)
	return u
}

// orphan returns nil when the interface called name may be deleted (see
// the top of this file), else an error wrapping ErrInUse saying who holds
// it or why that cannot be told.
func (u linkUse) orphan(name string) error {
	switch {
	case u.markPid != 0 && u.markAlive && u.markCmd != "":
		return fmt.Errorf("tap: %s: %w: made by kbridge pid %d (%s), which still runs", name, ErrInUse, u.markPid, u.markCmd)
	case u.markPid != 0 && u.markAlive:
		return fmt.Errorf("tap: %s: %w: made by kbridge pid %d, which still runs", name, ErrInUse, u.markPid)
	case len(u.holders) > 0:
		return fmt.Errorf("tap: %s: %w: held open by pid %v", name, ErrInUse, u.holders)
	case u.queues > 0:
		return fmt.Errorf("tap: %s: %w: %d queues attached, by processes this one may not look at", name, ErrInUse, u.queues)
	case u.markPid == 0 && !u.complete:
		return fmt.Errorf("tap: %s: %w as far as can be told: no kbridge mark, and some processes' fds cannot be read", name, ErrInUse)
	}
	return nil
}

// RemoveOrphan deletes the TAP interface called name if it can prove
// nobody uses it (see the top of this file), and returns an error wrapping
// ErrInUse, saying who or why not, if it cannot. A missing interface is
// not an error; one that is no TAP is refused as Remove refuses it.
func RemoveOrphan(name string) error {
	l, err := findTAP(name)
	if l == nil || err != nil {
		return err
	}
	if err := useOf(l).orphan(name); err != nil {
		return err
	}
	return removeLink(l)
}

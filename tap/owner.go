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
// too) deletes one only when it can prove nobody uses it: no process holds
// a queue of it open (each TUN fd's /proc/<pid>/fdinfo names its
// interface, "iff:"), and the mark kbridge leaves in the interface's alias
// (aliasPrefix, its pid and start time) names no live kbridge.

// ErrInUse means a TAP interface is in use: RemoveOrphan leaves it.
var ErrInUse = errors.New("in use")

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
// process's fds could not be read (another user's, under hidepid, a
// non-dumpable one).
func holders(name string) (pids []int, complete bool) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	complete = true
	self := os.Getpid()
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || pid == self {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				complete = false // gone meanwhile is fine; unreadable is not
			}
			continue
		}
		for _, fd := range fds {
			if !isTUN(filepath.Join(dir, "fd", fd.Name())) {
				continue
			}
			if tunIface(filepath.Join(dir, "fdinfo", fd.Name())) == name {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, complete
}

// isTUN reports whether the fd behind path (/proc/PID/fd/N) is an open
// /dev/net/tun: by its device number (char 10:200), since the link's text
// depends on the reader's root and mounts (a holder in another mount
// namespace or chroot shows another path).
func isTUN(path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 10 && unix.Minor(st.Rdev) == 200
}

// tunIface reads the interface a TUN fd is attached to from its fdinfo.
func tunIface(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "iff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// RemoveOrphan deletes the TAP interface called name if it can prove
// nobody uses it (see the top of this file), and returns an error wrapping
// ErrInUse, saying who or why not, if it cannot. A missing interface is
// not an error; one that is no TAP is refused as Remove refuses it.
func RemoveOrphan(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("tap: find %q: %w", name, err)
	}
	if l.Type() != "tuntap" {
		return fmt.Errorf("tap: %q is a %s, not a TAP: not removing it", name, l.Type())
	}
	pids, complete := holders(name)
	if len(pids) > 0 {
		return fmt.Errorf("tap: %s: %w: held open by pid %v", name, ErrInUse, pids)
	}
	pid, alive, marked := markedOwner(l.Attrs().Alias)
	switch {
	case marked && alive:
		return fmt.Errorf("tap: %s: %w: made by kbridge pid %d, which still runs", name, ErrInUse, pid)
	case !complete && !marked:
		return fmt.Errorf("tap: %s: %w as far as can be told: no kbridge mark, and some processes' fds cannot be read", name, ErrInUse)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("tap: remove %q: %w", name, err)
	}
	return nil
}

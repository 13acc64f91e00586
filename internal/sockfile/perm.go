package sockfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrUnsafeDir means a socket's directory, or one above it, could be
// changed by someone other than root and kbridge: a symlink planted there
// would make kbridge (root) bind, chmod and chown where it points.
var ErrUnsafeDir = errors.New("the socket's directory is not root's alone")

// CheckDir checks that dir, the directory kbridge binds a socket in, is a
// directory and not a symlink, and that it and every directory above it
// (as written and as resolved) are owned by root or this process's euid
// and writable by no one else, a sticky directory (/tmp) excepted above
// dir. Then nobody else can put a symlink at the socket's path, or swap a
// directory on the way to it, between the bind and the chmod.
func CheckDir(dir string) error {
	dir = filepath.Clean(dir)
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if fi.Mode().Type() != fs.ModeDir {
		return fmt.Errorf("%w: %s is a %s, not a directory", ErrUnsafeDir, dir, typeName(fi.Mode()))
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	for _, d := range []string{dir, resolved} {
		for p, first := d, true; ; p, first = filepath.Dir(p), false {
			if err := checkOne(p, first); err != nil {
				return err
			}
			if p == "/" {
				break
			}
		}
	}
	return nil
}

// checkOne checks one directory on the way (or a symlink to it, which only
// its owner can change: its parent is checked next). last: the socket's
// own directory, where sticky is no excuse.
func checkOne(p string, last bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fmt.Errorf("socket directory: %s: %w", p, err)
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s belongs to uid %d", ErrUnsafeDir, p, st.Uid)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	if st.Mode&0o022 != 0 && (last || st.Mode&unix.S_ISVTX == 0) {
		return fmt.Errorf("%w: %s is writable by its group or by others (mode %04o)", ErrUnsafeDir, p, st.Mode&0o7777)
	}
	return nil
}

func typeName(m fs.FileMode) string {
	if m.Type() == fs.ModeSymlink {
		return "symlink"
	}
	return m.Type().String()
}

// SetPerm gives the socket kbridge bound at path the mode and, gid >= 0,
// the group, without following a symlink there: the path is opened
// O_PATH|O_NOFOLLOW, must be a socket owned by this process's euid, and is
// changed through that descriptor. On Linux fchmod and fchown on the
// socket's own fd change its sockfs inode, not the file bind made (tried:
// the path keeps its mode), chmod(2) follows a symlink, and the fchmodat
// system call takes no AT_SYMLINK_NOFOLLOW before fchmodat2 (Linux 6.6); a
// umask around librte_vhost's bind would be process-wide, racing every
// other thread's files. So the mode goes through /proc/self/fd/N, which names exactly the file
// opened, and the group through fchownat(fd, "", AT_EMPTY_PATH).
func SetPerm(path string, mode os.FileMode, gid int) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s: %w (mode %o): not changing it", path, ErrNotSocket, st.Mode&unix.S_IFMT)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: %w: a socket of uid %d, not this process's", path, ErrUnsafeDir, st.Uid)
	}
	if gid >= 0 {
		if err := unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("chown %s to gid %d: %w", path, gid, err)
		}
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), uint32(mode.Perm()), 0); err != nil {
		return fmt.Errorf("chmod %s %04o: %w", path, mode.Perm(), err)
	}
	return nil
}

package sockfile

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is the foreign uid and gid (Debian's nobody and nogroup).
const nobody = 65534

// CheckDir passes a directory only root or kbridge may change, and refuses
// one that is a symlink, that others may write, or that lies below a
// directory another uid owns.
func TestCheckDirRefusesWhatOthersMayChange(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "run")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(dir); err != nil {
		t.Fatalf("a directory of its own: %v", err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(link); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("a symlink to it: %v, want ErrUnsafeDir", err)
	}
	for _, mode := range []os.FileMode{0o775, 0o757, 0o1777} {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := CheckDir(dir); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("mode %04o: %v, want ErrUnsafeDir", mode, err)
		}
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the rest needs root: chown to another uid")
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(dir); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("owned by uid %d: %v, want ErrUnsafeDir", nobody, err)
	}
	sub := filepath.Join(dir, "sub") // root's, in the other uid's directory
	if err := os.Mkdir(sub, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(sub); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("below a directory of uid %d: %v, want ErrUnsafeDir", nobody, err)
	}
}

// SetPerm changes the bound socket, never what a symlink at its path
// points to, nor a file that is no socket.
func TestSetPermFollowsNoSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "kb0.sock")
	if err := os.Symlink(target, sock); err != nil {
		t.Fatal(err)
	}
	if err := SetPerm(sock, 0o666, -1); !errors.Is(err, ErrNotSocket) {
		t.Errorf("a symlink at the socket's path: %v, want ErrNotSocket", err)
	}
	if err := SetPerm(target, 0o666, -1); !errors.Is(err, ErrNotSocket) {
		t.Errorf("a regular file: %v, want ErrNotSocket", err)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the symlink's target: %v, mode %04o, want it left 0600", err, fi.Mode().Perm())
	}
}

// connectScript connects to the unix socket in argv[1] and prints "ok" or
// connect's error.
const connectScript = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1]); print("ok")
except OSError as e:
    print("connect:", e.strerror)
`

// connectAs runs connectScript against sock as uid and gid nobody.
func connectAs(t *testing.T, sock string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", connectScript, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the foreign peer: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// A socket root bound in a directory of mode 0711 (what kbridge.service
// makes /run/kbridge) is reached by a non-root uid once SetPerm gave it
// the uid's group and mode 0660, and not before.
func TestSetPermLetsTheGroupConnectThroughA0711Directory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: binds as root, connects as uid nobody")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to connect as another uid: ", err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil { // t.TempDir's are 0700
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "kb0.sock")
	old := syscall.Umask(0o077) // as kbridge.service's UMask= binds it: 0600
	l, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := connectAs(t, sock); !strings.Contains(got, "Permission denied") {
		t.Errorf("uid nobody before SetPerm: %s, want Permission denied", got)
	}
	if err := SetPerm(sock, 0o660, nobody); err != nil {
		t.Fatal(err)
	}
	if got := connectAs(t, sock); got != "ok" {
		t.Errorf("uid nobody, gid nogroup, on a 0660 socket of group nogroup: %s", got)
	}
}

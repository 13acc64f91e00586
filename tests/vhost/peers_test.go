package vhost

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// nobody is the foreign uid the peer tests connect as (Debian's nobody and
// nogroup).
const nobody = 65534

// peerScript connects to the socket in argv[1], sends GET_FEATURES and
// prints "reply" when the 20-byte answer comes, "closed" when the backend
// hangs up first (a reset: it closes with the request unread), or the
// error of connect.
const peerScript = `
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect:", e.strerror); sys.exit(0)
s.settimeout(5)
got = b""
try:
    # kbridge may close a refused peer before this write: EPIPE, still no reply.
    s.sendall(struct.pack("<III", 1, 1, 0))
    while len(got) < 20:
        b = s.recv(20 - len(got))
        if not b: break
        got += b
except (ConnectionResetError, BrokenPipeError):
    pass  # closed with our request unread (a reset) or before it: no reply
except OSError as e:
    print("error:", e); sys.exit(0)
print("reply" if len(got) == 20 else "closed")
`

// asNobody runs peerScript against sock as uid and gid nobody.
func asNobody(t *testing.T, sock string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", peerScript, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the foreign peer: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func (b *bed) refusedPeers(t *testing.T) uint64 {
	t.Helper()
	var s struct {
		Peers uint64 `json:"refused_peers"`
	}
	harness.KbridgeStats(t, b.ctl, &s)
	return s.Peers
}

// withVhostKeys appends keys to the bed's vhost section.
func (b *bed) withVhostKeys(t *testing.T, keys string) {
	t.Helper()
	f, err := os.OpenFile(b.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(keys); err != nil {
		t.Fatal(err)
	}
}

// TestVhostSocketAccess: the socket file gets vhost.socket_mode (default
// 0600: a foreign uid cannot even connect) and vhost.socket_group; a
// foreign uid that can reach it (mode 0666) is refused by the peer check
// (SO_PEERCRED) before one message is served, logged with its uid and
// pid and counted (refused_peers); listed in vhost.allow_uids, it is
// served; kbridge serves its own uid all along.
//
// The socket is at the default path, in /run/kbridge with the mode
// kbridge.service gives it: a non-root app must get through it.
func TestVhostSocketAccess(t *testing.T) {
	unitRunDir(t)
	t.Run("default: mode 0600, a foreign uid cannot connect", func(t *testing.T) {
		b := newBed(t, false)
		kb := b.kbridge()
		st, err := os.Stat(b.sock)
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Mode().Perm(); m != 0o600 {
			t.Errorf("socket mode %04o, want 0600", m)
		}
		if got := asNobody(t, b.sock); !strings.Contains(got, "connect: Permission denied") {
			t.Errorf("uid nobody on a 0600 socket: %s", got)
		}
		f := dial(t, b.sock)
		if _, err := f.GetFeatures(); err != nil {
			t.Errorf("kbridge's own uid (root) is not served: %v", err)
		}
		kb.CheckRunning(t)
		kb.Stop(true)
	})
	t.Run("mode 0660, group nogroup: the file's, and the group's gid passes", func(t *testing.T) {
		b := newBed(t, false)
		b.withVhostKeys(t, "  socket_mode: \"0660\"\n  socket_group: nogroup\n")
		kb := b.kbridge()
		st, err := os.Stat(b.sock)
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Mode().Perm(); m != 0o660 {
			t.Errorf("socket mode %04o, want 0660", m)
		}
		if gid := st.Sys().(*syscall.Stat_t).Gid; gid != nobody {
			t.Errorf("socket group %d, want %d (nogroup)", gid, nobody)
		}
		// uid nobody, gid nogroup: reaches the socket through the group and
		// passes the peer check by its gid.
		if got := asNobody(t, b.sock); got != "reply" {
			t.Errorf("a peer of the socket's group: %s\n%s", got, kb.Log)
		}
		kb.CheckRunning(t)
		kb.Stop(true)
	})
	t.Run("mode 0666: a foreign uid connects and is refused before any message", func(t *testing.T) {
		b := newBed(t, false)
		b.withVhostKeys(t, "  socket_mode: \"0666\"\n")
		kb := b.kbridge()
		const line = "vhost-user peer refused, connection closed before any message"
		before := b.refusedPeers(t)
		if got := asNobody(t, b.sock); got != "closed" {
			t.Errorf("uid nobody on a 0666 socket: %s, want closed", got)
		}
		kb.WaitCountIn(t, line, 1, 5*time.Second)
		got := lastLine(kb.Log.String(), line)
		t.Log(got)
		if !strings.Contains(got, "uid 65534") || !strings.Contains(got, "pid ") {
			t.Errorf("the refusal does not name the peer's uid and pid: %s", got)
		}
		if n := b.refusedPeers(t); n != before+1 {
			t.Errorf("refused_peers %d -> %d, want +1", before, n)
		}
		if strings.Contains(kb.Log.String(), "read message VHOST_USER_GET_FEATURES") {
			t.Errorf("librte_vhost read the refused peer's message:\n%s", kb.Log)
		}
		// kbridge's own uid is still served, and a device comes up.
		f := dial(t, b.sock)
		if _, err := f.Up(); err != nil {
			t.Fatal(err)
		}
		kb.WaitCountIn(t, "vhost-user frontend connected", 1, 10*time.Second)
		kb.CheckRunning(t)
		kb.Stop(true)
	})
	t.Run("allow_uids: [65534] serves the foreign uid", func(t *testing.T) {
		b := newBed(t, false)
		b.withVhostKeys(t, "  socket_mode: \"0666\"\n  allow_uids: [65534]\n")
		kb := b.kbridge()
		if got := asNobody(t, b.sock); got != "reply" {
			t.Errorf("an allowed uid: %s\n%s", got, kb.Log)
		}
		if n := b.refusedPeers(t); n != 0 {
			t.Errorf("refused_peers %d, want 0", n)
		}
		kb.Stop(true)
	})
}

// listenerScript listens on argv[1] (mode 0666), accepts one connection
// and prints what it read before the peer hung up ("closed N bytes").
const listenerScript = `
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
c.settimeout(10)
got = b""
try:
    while True:
        b = c.recv(4096)
        if not b: break
        got += b
except OSError as e:
    print("error:", e, flush=True); sys.exit(0)
print("closed", len(got), "bytes", flush=True)
`

// TestVhostClientChecksListener: as a client (vhost.client: true),
// kbridge serves through a socket only when its listener is allowed: a
// listener running as uid nobody is refused (logged with its uid, counted)
// and hung up on before kbridge sends a message.
func TestVhostClientChecksListener(t *testing.T) {
	b := newBed(t, true)
	dir, err := os.MkdirTemp("/tmp", "kbvh-peer") // nobody must reach it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := dir + "/foreign.sock"
	vhostConfig{ifname: ifname, mac: kbMAC, addr: kbAddr, ctl: b.ctl, sock: sock, queues: 1, client: true}.write(t, b.cfg)
	lst := harness.Start(t, "foreign listener", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"/usr/bin/python3", "-c", listenerScript, sock)
	lst.WaitLog("listening", 5*time.Second)
	kb := b.kbridge()
	const line = "vhost-user peer refused, connection closed before any message"
	kb.WaitCountIn(t, line, 1, 10*time.Second)
	got := lastLine(kb.Log.String(), line)
	t.Log(got)
	if !strings.Contains(got, "the listener, uid 65534") {
		t.Errorf("the refusal does not name the listener's uid: %s", got)
	}
	lst.WaitLog("closed 0 bytes", 10*time.Second)
	if n := b.refusedPeers(t); n < 1 {
		t.Errorf("refused_peers %d, want at least 1", n)
	}
	kb.CheckRunning(t)
	kb.Stop(true)
}

// unitRunDir gives /run/kbridge, where the beds' sockets are (the default
// path), the mode deploy/kbridge.service's RuntimeDirectoryMode= gives it,
// until t ends.
func unitRunDir(t *testing.T) {
	t.Helper()
	requirements(t)
	unit, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "deploy", "kbridge.service"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RuntimeDirectoryMode=([0-7]+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("deploy/kbridge.service has no RuntimeDirectoryMode=")
	}
	mode, _ := strconv.ParseUint(string(m[1]), 8, 32)
	const dir = "/run/kbridge"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, fi.Mode().Perm()) })
	if err := os.Chmod(dir, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
}

// TestVhostRefusesASocketPathOthersMayChange: kbridge (root) binds,
// chmods and chowns the vhost-user socket, so it refuses a socket whose
// directory is a symlink or is the app's (another uid's), and a symlink
// planted at the socket's path, before it starts its EAL, and changes
// nothing where a link points.
func TestVhostRefusesASocketPathOthersMayChange(t *testing.T) {
	b := newBed(t, false)
	base, err := os.MkdirTemp("/tmp", "kbvh-unsafe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	real := filepath.Join(base, "real") // root's, 0755: a fine place itself
	appDir := filepath.Join(base, "app")
	target := filepath.Join(base, "shadow")
	for _, d := range []string{real, appDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(appDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(real, "planted.sock")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, sock, says string }{
		{"a symlinked directory", filepath.Join(base, "link", "kb.sock"), "not root's alone"},
		{"the app's directory", filepath.Join(appDir, "kb.sock"), "not root's alone"},
		{"a symlink at the socket's path", filepath.Join(real, "planted.sock"), "not a socket"},
	} {
		vhostConfig{ifname: ifname, mac: kbMAC, addr: kbAddr, ctl: b.ctl, sock: c.sock, queues: 1}.write(t, b.cfg)
		b.withVhostKeys(t, "  socket_mode: \"0666\"\n  socket_group: nogroup\n")
		kb := harness.Start(t, "kbridge", "ip", "netns", "exec", dut, harness.Kbridge(t), "run", "--config", b.cfg)
		if !kb.ExitedWithin(20 * time.Second) {
			t.Fatalf("%s: kbridge runs:\n%s", c.what, kb.Log)
		}
		log := kb.Log.String()
		t.Logf("%s: %s", c.what, harness.LastLine(log))
		if kb.ExitCode() == 0 || !strings.Contains(log, c.says) || strings.Contains(log, "EAL:") {
			t.Errorf("%s: exit %d, want a refusal saying %q before the EAL:\n%s", c.what, kb.ExitCode(), c.says, log)
		}
	}
	if _, err := os.Lstat(filepath.Join(real, "kb.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kbridge bound through the symlinked directory: %v", err)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Gid != 0 {
		t.Errorf("the planted symlink's target changed: %v %v", err, fi.Mode())
	}
}

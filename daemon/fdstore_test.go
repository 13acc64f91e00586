package daemon

import (
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func fakeEnv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func TestListenFdsReadsWhatSystemdPassedToThisPidOnly(t *testing.T) {
	env := map[string]string{"LISTEN_PID": "42", "LISTEN_FDS": "3", "LISTEN_FDNAMES": "kb0.q0:kb0.q1"}
	got, err := ListenFds(fakeEnv(env), 42)
	want := []ListenFd{{3, "kb0.q0"}, {4, "kb0.q1"}, {5, "unknown"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ListenFds = %v, %v; want %v", got, err, want)
	}
	if got, err := ListenFds(fakeEnv(env), 43); got != nil || err != nil {
		t.Errorf("for another pid: %v, %v; want none", got, err)
	}
	env["LISTEN_FDS"] = "x"
	if _, err := ListenFds(fakeEnv(env), 42); err == nil {
		t.Error("LISTEN_FDS=x taken")
	}
	if got, err := ListenFds(fakeEnv(map[string]string{}), 42); got != nil || err != nil {
		t.Errorf("without systemd: %v, %v; want none", got, err)
	}
}

// pipes returns n read ends of pipes, as stand-ins for queue fds.
func pipes(t *testing.T, n int) []int {
	t.Helper()
	var fds []int
	for range n {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[1])
		fds = append(fds, p[0])
		t.Cleanup(func() { unix.Close(p[0]) })
	}
	return fds
}

func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

func TestStoredQueuesPicksThisInterfacesQueuesInOrder(t *testing.T) {
	fds := pipes(t, 6)
	in := []ListenFd{{fds[0], "kb0.q1"}, {fds[1], "other.q0"}, {fds[2], "kb0.q0"}, {fds[3], "kb0.q3"}, {fds[4], "kb0.q0"}, {fds[5], "kb0.qx"}}
	queues, others, dropped := storedQueues(in, "kb0")
	if want := []int{fds[2], fds[0]}; !reflect.DeepEqual(queues, want) {
		t.Errorf("queues %v, want %v (q0, q1)", queues, want)
	}
	if len(others) != 2 || others[0].Name != "other.q0" || others[1].Name != "kb0.qx" {
		t.Errorf("others %v, want other.q0 and kb0.qx", others)
	}
	if want := []string{"kb0.q0", "kb0.q3"}; !reflect.DeepEqual(dropped, want) {
		t.Errorf("dropped %v, want %v (a second q0, q3 after a gap)", dropped, want)
	}
	if isOpen(fds[3]) || isOpen(fds[4]) {
		t.Error("a dropped queue fd is still open")
	}
}

// The fd store is spoken as systemd hears it: one datagram a queue, each
// with its FDNAME and its fd attached; a queue dropped is removed by name.
func TestStoreQueuesSendsEachQueueWithItsName(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("FDSTORE", "")
	s := newFdStore(quiet())
	fds := pipes(t, 2)
	s.storeQueues("kb0", fds, 3)
	for _, want := range []string{"FDSTORE=1\nFDNAME=kb0.q0", "FDSTORE=1\nFDNAME=kb0.q1", "FDSTOREREMOVE=1\nFDNAME=kb0.q2"} {
		buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := l.ReadMsgUnix(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := parseRights(oob[:oobn])
		for _, fd := range got {
			defer unix.Close(fd)
		}
		if string(buf[:n]) != want {
			t.Errorf("sent %q, want %q", buf[:n], want)
		}
		if wantFds := 1 - strings.Count(want, "REMOVE"); len(got) != wantFds {
			t.Errorf("%q came with %d fds, want %d", want, len(got), wantFds)
		}
	}
	t.Setenv("FDSTORE", "0")
	if newFdStore(quiet()).notify != nil {
		t.Error("a unit whose FileDescriptorStoreMax= is 0 gets fds")
	}
}

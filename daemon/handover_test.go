package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pipeHandOver makes c hand over port kbtest and interface kb9 with one
// fd, the read end of a pipe whose write end it returns, answering the
// requests as Serve does (startHandOver); released says whether the old
// side closed its copy (the handover confirmed), handed what came of it.
func pipeHandOver(t *testing.T, c *Control) (writeEnd int, released *atomic.Bool, handed <-chan handedOver) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[1]) })
	released = new(atomic.Bool)
	ho := pipeRunner(func(port, iface string) (Handover, []int, func(), error) {
		if port != "kbtest" || iface != "kb9" {
			return Handover{}, nil, nil, ErrTakeoverRefused
		}
		return Handover{PID: 7, Port: port, Interface: iface, Index: 99, Queues: 1}, []int{p[0]},
			func() { released.Store(true); unix.Close(p[0]) }, nil
	})
	out, quit := make(chan handedOver, 1), make(chan struct{})
	t.Cleanup(func() { close(quit) })
	reqs := c.acceptTakeovers()
	go func() {
		for {
			select {
			case req := <-reqs:
				startHandOver(ho, req, out, quiet())
			case <-quit:
				return
			}
		}
	}()
	return p[1], released, out
}

// pipeRunner is a handOverer that is its handOver.
type pipeRunner func(port, iface string) (Handover, []int, func(), error)

func (f pipeRunner) handOver(port, iface string) (Handover, []int, func(), error) {
	return f(port, iface)
}

// takeoverOfAPipe serves a control socket that hands over as pipeHandOver
// says and asks it to hand over.
func takeoverOfAPipe(t *testing.T) (*Takeover, *atomic.Bool, <-chan handedOver) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	c, _ := serveTestControl(t, path)
	_, released, handed := pipeHandOver(t, c)
	tk, err := RequestTakeover(path, "kbtest", "kb9")
	if err != nil {
		t.Fatal(err)
	}
	return tk, released, handed
}

// shortDeadlines makes the old side wait d for a confirmation and d for
// the successor to let go, for the test.
func shortDeadlines(t *testing.T, d time.Duration) {
	t.Helper()
	within, giveUp := confirmWithin, giveUpWithin
	confirmWithin, giveUpWithin = d, d
	t.Cleanup(func() { confirmWithin, giveUpWithin = within, giveUp })
}

// A takeover asked on the control socket hands the fds over with the
// answer: the successor's fds are the same files, and the old one closes
// its copies once the successor confirmed, learning whom it handed them
// to. A refusal carries its reason and no fds.
func TestTakeoverHandsTheFdsOverTheControlSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	c, _ := serveTestControl(t, path)
	w, released, handed := pipeHandOver(t, c)

	if tk, err := RequestTakeover(path, "kbtest", "other"); !errors.Is(err, ErrTakeoverRefused) || tk != nil {
		t.Fatalf("a takeover of another interface: %v, %v; want refused", tk, err)
	}
	tk, err := RequestTakeover(path, "kbtest", "kb9")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tk.Fds[0])
	if tk.PID != 7 || tk.Index != 99 || len(tk.Fds) != 1 || tk.ConfirmWithinMs != confirmWithin.Milliseconds() {
		t.Errorf("handed %+v with %d fds", tk.Handover, len(tk.Fds))
	}
	if released.Load() {
		t.Error("the old side let go of the fd before the successor confirmed")
	}
	if err := tk.Confirm(quiet()); err != nil {
		t.Fatalf("Confirm = %v", err)
	}
	got := <-handed
	if got.back != nil || got.to != unix.Getpid() || !released.Load() {
		t.Errorf("the old side saw %+v (released %v), want a handover to pid %d", got, released.Load(), unix.Getpid())
	}
	if _, err := unix.Write(w, []byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if n, err := unix.Read(tk.Fds[0], buf); n != 1 || err != nil {
		t.Errorf("the handed fd is not the pipe: read %d, %v", n, err)
	}
	if fl, _ := unix.FcntlInt(uintptr(tk.Fds[0]), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
		t.Error("the handed fd is not close-on-exec")
	}
}

// A successor that goes before it confirms (closes the connection: it
// failed or was killed) leaves the old side its fds to take back, open.
func TestTakeoverNotConfirmedIsTakenBack(t *testing.T) {
	tk, released, handed := takeoverOfAPipe(t)
	unix.Close(tk.Fds[0])
	tk.Close()
	got := <-handed
	if got.back == nil || released.Load() || len(got.back.Fds) != 1 || got.back.Successor != unix.Getpid() {
		t.Fatalf("the old side saw %+v (released %v): want the fd kept to take back", got, released.Load())
	}
	if _, err := unix.FcntlInt(uintptr(got.back.Fds[0]), unix.F_GETFD, 0); err != nil {
		t.Errorf("the kept fd is closed: %v", err)
	}
	t.Logf("logged: %v", got.logged(quiet()))
}

// A confirmation past the old side's deadline is answered abort: the
// successor learns that the old one takes back (ErrTakeoverAborted), and
// the old one keeps its fds.
func TestTakeoverConfirmedTooLateIsAborted(t *testing.T) {
	shortDeadlines(t, 200*time.Millisecond)
	tk, released, handed := takeoverOfAPipe(t)
	defer unix.Close(tk.Fds[0])
	time.Sleep(400 * time.Millisecond)
	if err := tk.Confirm(quiet()); !errors.Is(err, ErrTakeoverAborted) || !strings.Contains(err.Error(), "no confirmation within") {
		t.Errorf("a late Confirm = %v, want ErrTakeoverAborted saying why", err)
	}
	if got := <-handed; got.back == nil || released.Load() {
		t.Errorf("the old side saw %+v (released %v): want the fd kept to take back", got, released.Load())
	}
}

// A successor that neither confirms nor gives up within the deadlines is
// killed (through a pidfd), so that the port it holds can be taken back.
func TestWaitGoneKillsASuccessorThatHangs(t *testing.T) {
	hung := exec.Command("sleep", "60")
	if err := hung.Start(); err != nil {
		t.Fatal(err)
	}
	pidfd, err := unix.PidfdOpen(hung.Process.Pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	log, buf := bufLogger()
	waitGone(pidfd, hung.Process.Pid, 100*time.Millisecond, log)
	if err := hung.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the hung successor: %v, want killed", err)
	}
	if !strings.Contains(buf.String(), "neither confirmed nor gave up: killing it") {
		t.Errorf("the kill is not logged:\n%s", buf)
	}
}

// The takeover client asks only a kbridge of root or of its own user: one
// of another user could hand it fds of its choosing.
func TestTakeoverClientRefusesAServerOfAnotherUser(t *testing.T) {
	for _, tc := range []struct {
		uid, self uint32
		ok        bool
	}{{0, 1000, true}, {1000, 1000, true}, {0, 0, true}, {65534, 0, false}, {1001, 1000, false}} {
		err := checkServer(&unix.Ucred{Pid: 42, Uid: tc.uid}, tc.self)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUntrustedServer)) {
			t.Errorf("a server of uid %d, this process of uid %d: %v, want allowed %v", tc.uid, tc.self, err, tc.ok)
		}
	}
}

// The same against a real listener of uid 65534 (root only): refused
// before anything is sent.
func TestTakeoverClientRefusesARealServerOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 || testing.Short() {
		t.Skip("needs root to run a listener as another user")
	}
	dir := t.TempDir()
	for d, mode := range map[string]os.FileMode{filepath.Dir(dir): 0o755, dir: 0o777} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "foreign.sock")
	l := exec.Command(os.Args[0], "-test.run=^TestForeignListenerHelper$")
	l.Env = append(os.Environ(), foreignListenerEnv+"="+sock)
	l.Stderr = os.Stderr
	out, err := l.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Process.Kill(); _ = l.Wait() }()
	buf := make([]byte, 16)
	if _, err := out.Read(buf); err != nil {
		t.Fatalf("the foreign listener did not start: %v", err)
	}
	_, err = RequestTakeover(sock, "kbtest", "kb9")
	if !errors.Is(err, ErrUntrustedServer) || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("a takeover from a listener of uid 65534: %v, want ErrUntrustedServer naming the uid", err)
	}
}

// foreignListenerEnv names the socket TestForeignListenerHelper listens on.
const foreignListenerEnv = "KBRIDGE_TEST_FOREIGN_LISTENER"

// TestForeignListenerHelper is no test: started again by
// TestTakeoverClientRefusesARealServerOfAnotherUser, it listens on a unix
// socket as uid and gid 65534.
func TestForeignListenerHelper(t *testing.T) {
	sock := os.Getenv(foreignListenerEnv)
	if sock == "" {
		t.Skip("the helper process of TestTakeoverClientRefusesARealServerOfAnotherUser")
	}
	for _, err := range []error{syscall.Setgroups(nil), syscall.Setresgid(65534, 65534, 65534), syscall.Setresuid(65534, 65534, 65534)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("listening")
	if c, err := l.Accept(); err == nil {
		time.Sleep(5 * time.Second)
		c.Close()
	}
}

func TestTakeoverOfARunnerThatCannotIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	serveTestControl(t, path)
	if _, err := RequestTakeover(path, "kbtest", "kb9"); !errors.Is(err, ErrTakeoverRefused) {
		t.Errorf("err %v, want ErrTakeoverRefused", err)
	}
}

// A takeover asked as the kbridge stops (Serve no longer receives it) is
// refused once the control socket closes, saying so; nothing waits on.
func TestTakeoverAskedWhileStoppingIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	log, buf := bufLogger()
	c, err := ListenControl(path, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.acceptTakeovers() // nobody receives: Serve's loop has ended
	errc := make(chan error, 1)
	go func() { _, err := RequestTakeover(path, "kbtest", "kb9"); errc <- err }()
	eventually(t, "the request heard", func() bool { return strings.Contains(buf.String(), "a kbridge asks") })
	time.Sleep(50 * time.Millisecond) // the handler hijacked and waits
	_ = c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrTakeoverRefused) || !strings.Contains(err.Error(), errStopping.Error()) {
			t.Errorf("a takeover asked while stopping: %v, want ErrTakeoverRefused saying %q", err, errStopping)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the takeover is still waiting after Close")
	}
}

// What TakeBack leaves for the image it executes, TakenBack reads: the
// queue fds in queue order, named as the fd store names them, and the
// successor's pid; the variables go.
func TestTakenBackReadsTheQueuesKept(t *testing.T) {
	t.Setenv(envTakenBackFds, "kb0:7,9")
	t.Setenv(envTakenBackFrom, "4242")
	fds, from := TakenBack()
	if from != 4242 || len(fds) != 2 || fds[0] != (ListenFd{Fd: 7, Name: "kb0.q0"}) || fds[1] != (ListenFd{Fd: 9, Name: "kb0.q1"}) {
		t.Errorf("TakenBack = %v, %d", fds, from)
	}
	if _, ok := os.LookupEnv(envTakenBackFds); ok {
		t.Error("the variable is still set")
	}
	if fds, from := TakenBack(); fds != nil || from != 0 {
		t.Errorf("TakenBack without the variables = %v, %d", fds, from)
	}
}

// handingRunner hands over as Ring does: its stop closes Done before the
// successor's answer is known, and Serve must still end with the
// handover, not take the closed Done for a path that died.
type handingRunner struct {
	*fakeRunner
	fd int
}

func (h *handingRunner) handOver(port, iface string) (Handover, []int, func(), error) {
	close(h.done)
	time.Sleep(50 * time.Millisecond) // Done stays closed while the fds go
	return Handover{PID: 1, Port: port, Interface: iface, Queues: 1}, []int{h.fd}, func() { unix.Close(h.fd) }, nil
}

// serveHanding runs Serve over a handingRunner and asks it to hand over;
// confirm says whether the successor confirms, stop whether a SIGTERM
// comes before it does. It returns Serve's log and error.
func serveHanding(t *testing.T, confirm, stop bool) (string, error) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	r := &handingRunner{fakeRunner: newFake(), fd: p[0]}
	sock := filepath.Join(t.TempDir(), "kbridge.sock")
	log, buf := bufLogger()
	errc := make(chan error, 1)
	sigs := make(chan os.Signal, 1)
	go func() {
		errc <- Serve(context.Background(), r, Options{Socket: sock, Log: log, Notify: func(string) {}, Signals: sigs})
	}()
	eventually(t, "the control socket", func() bool { _, err := ReadStatusRaw(sock); return err == nil })
	tk, err := RequestTakeover(sock, "kb", "kb0")
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(tk.Fds[0])
	if stop {
		sigs <- unix.SIGTERM // during the handover: waits for its outcome
		eventually(t, "the stop heard", func() bool { return strings.Contains(buf.String(), "a stop during a handover waits") })
	}
	if confirm {
		if err := tk.Confirm(quiet()); err != nil {
			t.Fatal(err)
		}
	}
	tk.Close()
	select {
	case err := <-errc:
		return buf.String(), err
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still runs after the handover's outcome")
	}
	return "", nil
}

func TestServeEndsCleanlyOnceItHandedOver(t *testing.T) {
	log, err := serveHanding(t, true, false)
	if err != nil {
		t.Errorf("Serve = %v, want nil after a handover", err)
	}
	if !strings.Contains(log, "handed the port and the interface over") {
		t.Errorf("no handover in the log:\n%s", log)
	}
}

// Not confirmed, Serve returns the queues to take back; a stop asked
// meanwhile is a stop once the outcome is known.
func TestServeReturnsTheQueuesToTakeBackWhenNotConfirmed(t *testing.T) {
	log, err := serveHanding(t, false, false)
	var back *TakeBackError
	if !errors.As(err, &back) || len(back.Fds) != 1 || back.Successor != os.Getpid() {
		t.Fatalf("Serve = %v, want a *TakeBackError with the fd", err)
	}
	unix.Close(back.Fds[0])
	if !strings.Contains(log, "taking the port and the interface back") || !strings.Contains(log, "successor_pid="+strconv.Itoa(os.Getpid())) {
		t.Errorf("the log does not say it takes back:\n%s", log)
	}

	log, err = serveHanding(t, false, true)
	if err != nil || !strings.Contains(log, "a stop during a handover waits") || !strings.Contains(log, "stopping, as asked during the handover") {
		t.Errorf("a SIGTERM during an unconfirmed handover: Serve = %v, want nil, and the log saying so:\n%s", err, log)
	}
}

// A refusal, written on the hijacked connection, is byte for byte the 409
// net/http's http.Error writes (what kbridges answered before they
// hijacked first), but for the Date: every successor reads it as before.
func TestTakeoverRefusalIsWhatHTTPErrorWrites(t *testing.T) {
	why := fmt.Errorf("%w: this kbridge serves port a, not b", ErrTakeoverRefused)
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "http.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, why.Error(), http.StatusConflict)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	a, b := net.Pipe()
	go func() { _ = sendRefusal(a, why); a.Close() }()
	ours, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /takeover?port=b HTTP/1.1\r\nHost: kbridge\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	theirs := make([]byte, len(ours)) // a Date is always as long
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, theirs); err != nil {
		t.Fatalf("net/http's answer: %v (%q)", err, theirs)
	}
	date := regexp.MustCompile(`\r\nDate: [^\r]*\r\n`)
	if o, h := date.ReplaceAll(ours, []byte("\r\nDate: -\r\n")), date.ReplaceAll(theirs, []byte("\r\nDate: -\r\n")); !bytes.Equal(o, h) {
		t.Errorf("the refusal is\n%q\nnet/http's is\n%q", o, h)
	}
}

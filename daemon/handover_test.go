package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A takeover asked on the control socket hands the fds over with the
// answer: the successor's fds are the same files, and the old one learns
// whom it handed them to. A refusal carries its reason and no fds.
func TestTakeoverHandsTheFdsOverTheControlSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	c, _ := serveTestControl(t, path)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	released := false
	c.SetHandOver(func(port, iface string) (Handover, []int, func(), error) {
		if port != "kbtest" || iface != "kb9" {
			return Handover{}, nil, nil, ErrTakeoverRefused
		}
		return Handover{PID: 7, Port: port, Interface: iface, Index: 99, Queues: 1}, []int{p[0]},
			func() { released = true; unix.Close(p[0]) }, nil
	})

	if _, fds, err := RequestTakeover(path, "kbtest", "other"); !errors.Is(err, ErrTakeoverRefused) || fds != nil {
		t.Fatalf("a takeover of another interface: fds %v, err %v; want refused", fds, err)
	}
	h, fds, err := RequestTakeover(path, "kbtest", "kb9")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	if h.PID != 7 || h.Index != 99 || len(fds) != 1 {
		t.Errorf("handed %+v with %d fds", h, len(fds))
	}
	got := <-c.handed
	if got.err != nil || got.to != unix.Getpid() || !released {
		t.Errorf("the old side saw %+v (released %v), want a handover to pid %d", got, released, unix.Getpid())
	}
	if _, err := unix.Write(p[1], []byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if n, err := unix.Read(fds[0], buf); n != 1 || err != nil {
		t.Errorf("the handed fd is not the pipe: read %d, %v", n, err)
	}
	if fl, _ := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
		t.Error("the handed fd is not close-on-exec")
	}
}

func TestTakeoverOfARunnerThatCannotIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kbridge.sock")
	serveTestControl(t, path)
	if _, _, err := RequestTakeover(path, "kbtest", "kb9"); !errors.Is(err, ErrTakeoverRefused) {
		t.Errorf("err %v, want ErrTakeoverRefused", err)
	}
}

// handingRunner hands over as Ring does: its stop closes Done before the
// control socket's answer is sent, and Serve must still end with the
// handover, not take the closed Done for a path that died.
type handingRunner struct {
	*fakeRunner
	fd      int
	handing atomic.Bool
}

func (h *handingRunner) handOver(port, iface string) (Handover, []int, func(), error) {
	h.handing.Store(true)
	close(h.done)
	time.Sleep(50 * time.Millisecond) // Serve sees Done first
	return Handover{PID: 1, Port: port, Interface: iface, Queues: 1}, []int{h.fd}, func() { unix.Close(h.fd) }, nil
}

func (h *handingRunner) handingOver() bool { return h.handing.Load() }

func TestServeEndsCleanlyOnceItHandedOver(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	r := &handingRunner{fakeRunner: newFake(), fd: p[0]}
	sock := filepath.Join(t.TempDir(), "kbridge.sock")
	log, buf := bufLogger()
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(context.Background(), r, Options{Socket: sock, Log: log, Notify: func(string) {}, Signals: make(chan os.Signal)})
	}()
	eventually(t, "the control socket", func() bool { _, err := ReadStatusRaw(sock); return err == nil })
	_, fds, err := RequestTakeover(sock, "kb", "kb0")
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fds[0])
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Serve = %v, want nil after a handover", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still runs after handing over")
	}
	if !strings.Contains(buf.String(), "handed the port and the interface over") {
		t.Errorf("no handover in the log:\n%s", buf)
	}
}

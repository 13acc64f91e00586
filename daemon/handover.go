package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The takeover by hand, the old kbridge's side (the successor's, and the
// protocol: takeover.go): `kbridge run --takeover` started while another
// kbridge serves the same port asks that one, over its control socket
// (POST /takeover), to hand over. The old one stops its keeper and
// workers, releases the port and answers with the TAP's queue fds attached
// (SCM_RIGHTS), keeping its own copies: the queues stay attached
// throughout, frames the kernel sends meanwhile wait in them, and kb0
// (ifindex, addresses, routes, neighbours, bound sockets) is never
// touched. The new one claims the port, adopts the fds (tap.Adopt), starts
// its workers and confirms; then the old one closes its copies and exits
// 0. Without the confirmation within confirmWithin (the successor failed,
// hung or was killed) it takes the port and the interface back: it waits
// for the successor to let go (killing it if it does not), and Serve
// returns a *TakeBackError, on which kbridge executes itself again over
// the queues it kept (TakeBack). Both log it. Nothing else hands over: a
// plain second `kbridge run` is refused as before, so an accidental start
// never steals a live path.

// Handover is what a kbridge hands its successor with the queue fds.
type Handover struct {
	PID       int    `json:"pid"` // the kbridge that hands over
	Port      string `json:"port"`
	Interface string `json:"interface"`
	Index     int    `json:"ifindex"`
	Queues    int    `json:"queues"` // the fds attached, in queue order
	// ConfirmWithinMs is how long the old kbridge waits for the
	// confirmation before it takes back; 0: it waits for none (a kbridge
	// of before the confirmation).
	ConfirmWithinMs int64 `json:"confirm_within_ms"`
}

// handOverer is a Runner that can hand its interface and port over (modes
// ring and vhost; a vhost kbridge's port is its vhost-user socket). handOver stops the path but for the interface and returns its
// queue fds; release closes them once they are sent.
type handOverer interface {
	handOver(port, iface string) (h Handover, fds []int, release func(), err error)
	// handingOver reports whether a handover stopped the path (which
	// closes Done as any stop does).
	handingOver() bool
}

// handedOver is what a takeover request came to once the path had begun
// stopping: the handover confirmed (back nil), or the queues kept to take
// back.
type handedOver struct {
	h    Handover
	to   int // the successor's pid (SO_PEERCRED)
	back *TakeBackError
}

// logged logs what came of the handover and returns Serve's error: nil
// once handed over, the *TakeBackError otherwise.
func (h handedOver) logged(log *slog.Logger) error {
	if h.back != nil {
		log.Error("the successor did not confirm the takeover: taking the port and the interface back", "successor_pid", h.to,
			"interface", h.h.Interface, "queues", len(h.back.Fds), "err", h.back.Cause)
		return h.back
	}
	log.Warn("handed the port and the interface over: exiting", "successor_pid", h.to, "port", h.h.Port,
		"interface", h.h.Interface, "ifindex", h.h.Index, "queues", h.h.Queues)
	return nil
}

// confirmWithin is how long the old kbridge waits, from sending the fds,
// for the successor's confirmation: it claims the port and adopts the
// interface in well under a second (its EAL started before it asked).
// giveUpWithin is how long the successor then has to let go of the port
// before it is killed.
var confirmWithin, giveUpWithin = 10 * time.Second, 5 * time.Second

// maxHandedFds bounds the queue fds one handover carries.
const maxHandedFds = 256

// peerKey is the context key of a control connection's peer credentials.
type peerKey struct{}

// connContext records the peer's credentials for the handlers.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if uc, ok := c.(*net.UnixConn); ok {
		if cred, err := peerCred(uc); err == nil {
			return context.WithValue(ctx, peerKey{}, cred)
		}
	}
	return ctx
}

// takeover serves POST /takeover?port=P&interface=I.
func (c *Control) takeover(w http.ResponseWriter, r *http.Request) {
	f := c.handOver.Load()
	if f == nil {
		http.Error(w, "this kbridge cannot hand over (starting, or mode xdp)", http.StatusNotImplemented)
		return
	}
	peer := 0
	if cred, ok := r.Context().Value(peerKey{}).(*unix.Ucred); ok {
		peer = int(cred.Pid)
	}
	port, iface := r.URL.Query().Get("port"), r.URL.Query().Get("interface")
	c.log.Warn("a kbridge asks to take the port and the interface over", "successor_pid", peer, "port", port, "interface", iface)
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no raw connection to pass fds on", http.StatusInternalServerError)
		return
	}
	h, fds, release, err := (*f)(port, iface)
	if err != nil {
		c.log.Warn("takeover refused", "successor_pid", peer, "err", err)
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	h.ConfirmWithinMs = confirmWithin.Milliseconds()
	c.handed <- handOverOn(hj, h, fds, release, peer, c.log)
}

// handOverOn sends h and fds to the successor on the hijacked connection
// and waits for its confirmation: confirmed, release closes this process's
// copies of the fds; otherwise they are kept to take back, once the
// successor let go of the port (waitGone).
func handOverOn(hj http.Hijacker, h Handover, fds []int, release func(), peer int, log *slog.Logger) handedOver {
	out := handedOver{h: h, to: peer}
	conn, _, err := hj.Hijack()
	if err != nil {
		out.back = &TakeBackError{Interface: h.Interface, Fds: fds, Successor: peer, Cause: err}
		return out
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		err = fmt.Errorf("a %T cannot carry fds", conn)
	}
	var successor int = -1
	if err == nil {
		successor = peerPidfd(uc, peer)
		defer func() {
			if successor >= 0 {
				unix.Close(successor)
			}
		}()
		err = sendHandover(uc, h, fds)
	}
	if err == nil {
		err = awaitConfirm(uc, confirmWithin)
	}
	if err == nil {
		release() // the successor holds them now
		return out
	}
	// Not confirmed: the successor must give up, and may still hold the
	// port; the fds stay this process's.
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(conn, wordAbort+" "+strings.ReplaceAll(err.Error(), "\n", " ")+"\n")
	conn.Close()
	waitGone(successor, peer, giveUpWithin, log)
	out.back = &TakeBackError{Interface: h.Interface, Fds: fds, Successor: peer, Cause: err}
	return out
}

// sendHandover writes the 200 answer with h as its body and fds attached to
// its bytes.
func sendHandover(uc *net.UnixConn, h Handover, fds []int) error {
	body, err := json.Marshal(h)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_ = uc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	n, _, err := uc.WriteMsgUnix([]byte(msg), unix.UnixRights(fds...), nil)
	if err == nil && n < len(msg) {
		_, err = uc.Write([]byte(msg[n:]))
	}
	return err
}

// awaitConfirm waits up to within for the successor's confirmation and
// acknowledges it; any other word, the connection's end or the deadline is
// an error.
func awaitConfirm(uc *net.UnixConn, within time.Duration) error {
	_ = uc.SetDeadline(time.Now().Add(within))
	line, err := bufio.NewReader(io.LimitReader(uc, 256)).ReadString('\n')
	switch {
	case strings.TrimSpace(line) == wordConfirm:
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("no confirmation within %v", within)
	case line == "" && errors.Is(err, io.EOF):
		return errors.New("the successor went (or closed the connection) before it confirmed")
	case err != nil:
		return fmt.Errorf("reading the confirmation: %w", err)
	default:
		return fmt.Errorf("the successor said %q, not %q", strings.TrimSpace(line), wordConfirm)
	}
	// From here the successor serves: the acknowledgement is what it waits
	// for before it goes on.
	if _, err := io.WriteString(uc, wordAck+"\n"); err != nil {
		return fmt.Errorf("acknowledging the confirmation: %w", err)
	}
	return nil
}

// peerPidfd is a pidfd of the process at the other end of uc (SO_PEERPIDFD,
// Linux 6.5; else pidfd_open of its pid): a pid the successor's exit frees
// is never signalled. -1 when there is none, or when the peer is this
// process (a test's).
func peerPidfd(uc *net.UnixConn, pid int) int {
	fd := -1
	if pid == os.Getpid() {
		return fd
	}
	if raw, err := uc.SyscallConn(); err == nil {
		_ = raw.Control(func(s uintptr) {
			if v, err := unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
				fd = v
			}
		})
	}
	if fd < 0 && pid > 0 {
		if v, err := unix.PidfdOpen(pid, 0); err == nil {
			fd = v
		}
	}
	return fd
}

// waitGone waits up to within for the successor (pidfd) to exit, having
// let go of the port, and kills it (SIGKILL) if it has not: a successor
// that neither confirms nor gives up is hung, and holds the port and the
// queues.
func waitGone(pidfd, pid int, within time.Duration, log *slog.Logger) {
	if pidfd < 0 {
		return
	}
	if exited(pidfd, within) {
		return
	}
	log.Error("the successor neither confirmed nor gave up: killing it", "successor_pid", pid, "waited", within.String())
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil {
		log.Error("could not kill the successor: taking back may fail while it holds the port", "successor_pid", pid, "err", err)
		return
	}
	exited(pidfd, within)
}

// exited reports whether the process of pidfd exits within d.
func exited(pidfd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		if err == nil && n > 0 {
			return true
		}
		if (err != nil && !errors.Is(err, unix.EINTR)) || time.Now().After(deadline) {
			return false
		}
	}
}

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

// handOver hands the port and the interface over (handOverer): asked for
// another port or interface, or once the path is stopping, it refuses.
func (d *Ring) handOver(port, iface string) (Handover, []int, func(), error) {
	cfg := d.Config()
	if port != cfg.Port || iface != cfg.Interface.Name {
		return Handover{}, nil, nil, fmt.Errorf("%w: this kbridge serves port %s and interface %s, not %s and %s",
			ErrTakeoverRefused, cfg.Port, cfg.Interface.Name, port, iface)
	}
	fds, release, err := d.handOff(func() error { d.stopApp(); return nil }, func() {
		d.log.Info("handing over: workers stopped, port released", "pool_in_use", d.port.PoolInUse(), "queues", len(d.workers))
		d.port.Release()
	})
	if err != nil {
		return Handover{}, nil, nil, err
	}
	h := Handover{PID: os.Getpid(), Port: port, Interface: iface, Index: d.dev.Index(), Queues: len(fds)}
	return h, fds, release, nil
}

// errStopping refuses a takeover asked while the path stops.
var errStopping = errors.New("the data path is stopping")

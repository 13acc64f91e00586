package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The takeover by hand, the old kbridge's side (the successor's:
// takeover.go; the wire: handoverwire.go; taking back: takeback.go):
// `kbridge run --takeover` started while another kbridge serves the same
// port asks that one, over its control socket (POST /takeover), to hand
// over. The old one stops its keeper and workers, releases the port and
// answers with the TAP's queue fds attached (SCM_RIGHTS), keeping its own
// copies: the queues stay attached throughout, frames the kernel sends
// meanwhile wait in them, and kb0 (ifindex, addresses, routes,
// neighbours, bound sockets) is never touched. The new one claims the
// port, adopts the fds (tap.Adopt), starts its workers and confirms; then
// the old one closes its copies and exits 0. Without the confirmation
// within confirmWithin (the successor failed, hung or was killed) it takes
// the port and the interface back: it waits for the successor to let go
// (killing it if it does not), and Serve returns a *TakeBackError, on
// which kbridge executes itself again over the queues it kept (TakeBack).
// Both log it. Nothing else hands over: a plain second `kbridge run` is
// refused as before, so an accidental start never steals a live path.
//
// Who does what: the control socket's handler authenticates, parses and
// hijacks, and passes the request to Serve (acceptTakeovers); Serve asks
// its runner (handOver), and once the path stopped runs the protocol
// (handOverOn) on a goroutine whose outcome it reads on a channel of its
// own.

// handOverer is a Runner that can hand its interface and port over (modes
// ring and vhost; a vhost kbridge's port is its vhost-user socket).
// handOver stops the path but for the interface and returns its queue fds;
// release closes them once they are sent. Asked for another port or
// interface, or once the path is stopping, it refuses (ErrTakeoverRefused)
// and stops nothing.
type handOverer interface {
	handOver(port, iface string) (h Handover, fds []int, release func(), err error)
}

// takeoverRequest is a POST /takeover the control socket authenticated and
// parsed, its connection hijacked: Serve answers it on conn (refusal, or
// the protocol).
type takeoverRequest struct {
	port, iface string
	peer        int // the successor's pid (SO_PEERCRED)
	conn        net.Conn
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

// takeover serves POST /takeover?port=P&interface=I: it hands the request,
// its connection hijacked, to whoever accepts takeovers (Serve), and
// answers nothing itself but that this kbridge cannot hand over, or that it
// is stopping.
func (c *Control) takeover(w http.ResponseWriter, r *http.Request) {
	if !c.taking.Load() {
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
	conn, _, err := hj.Hijack()
	if err != nil {
		http.Error(w, "no raw connection to pass fds on: "+err.Error(), http.StatusInternalServerError)
		return
	}
	select {
	case c.takeovers <- takeoverRequest{port: port, iface: iface, peer: peer, conn: conn}:
	case <-c.quit:
		refuseTakeover(conn, peer, fmt.Errorf("%w: %w", ErrTakeoverRefused, errStopping), c.log)
	}
}

// startHandOver answers a takeover request with ho: it asks ho to hand
// over, refuses on the connection if it says no, else runs the protocol on
// a goroutine that reports what came of it on out. It reports whether the
// path stopped (its Done closes as on any stop).
func startHandOver(ho handOverer, req takeoverRequest, out chan<- handedOver, log *slog.Logger) bool {
	h, fds, release, err := ho.handOver(req.port, req.iface)
	if err != nil {
		refuseTakeover(req.conn, req.peer, err, log)
		return false
	}
	h.ConfirmWithinMs = confirmWithin.Milliseconds()
	go func() { out <- handOverOn(req.conn, h, fds, release, req.peer, log) }()
	return true
}

// refuseTakeover logs the refusal and answers it on conn, which it closes.
func refuseTakeover(conn net.Conn, peer int, err error, log *slog.Logger) {
	log.Warn("takeover refused", "successor_pid", peer, "err", err)
	if werr := sendRefusal(conn, err); werr != nil {
		log.Warn("the refusal did not reach the successor", "successor_pid", peer, "err", werr)
	}
	conn.Close()
}

// handOverOn sends h and fds to the successor on the hijacked connection
// and waits for its confirmation: confirmed, release closes this process's
// copies of the fds; otherwise they are kept to take back, once the
// successor let go of the port (waitGone).
func handOverOn(conn net.Conn, h Handover, fds []int, release func(), peer int, log *slog.Logger) handedOver {
	out := handedOver{h: h, to: peer}
	defer conn.Close()
	var err error
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

package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/config"
)

// The successor's side of a takeover by hand (`kbridge run --takeover`;
// the old side is handover.go, the wire handoverwire.go). The protocol, on
// one connection to the old kbridge's control socket:
//
//	successor: POST /takeover?port=P&interface=I
//	old:       200 with a Handover as its body and the queue fds attached
//	           (SCM_RIGHTS); it keeps its own copies
//	successor: claims the port, adopts the fds, starts its workers, then
//	           "confirm\n"
//	old:       "ack\n": it closes its copies and exits 0; or
//	           "abort <why>\n": too late, or it could not tell; the
//	           successor gives up (releases the port, closes its fds,
//	           exits 1) and the old one takes the port and the interface
//	           back
//
// A successor that dies or fails before it confirms closes the connection
// unconfirmed: the old one takes back. An old one that dies after handing
// over (the connection closes without a word) can take nothing back: the
// successor serves on.

// Takeover is a handover this kbridge received and has not yet confirmed:
// the old kbridge still holds the interface's queues and takes them back
// unless Confirm reaches it within Handover.ConfirmWithinMs.
type Takeover struct {
	Handover
	Fds  []int // the queue fds, in queue order: this process's, close-on-exec
	conn *net.UnixConn
	r    *bufio.Reader
}

// ackSlack is how much longer than the old kbridge's deadline the
// successor waits for its answer: it answers as soon as it reads the
// confirmation, or says abort at its deadline.
const ackSlack = 5 * time.Second

// ErrTakeoverAborted: the kbridge that handed over did not take this one's
// confirmation (it came too late, or never came) and takes the port and
// the interface back.
var ErrTakeoverAborted = errors.New("the takeover was aborted by the kbridge that handed over")

// ErrUntrustedServer: the process on the control socket runs as neither
// root nor this process's user.
var ErrUntrustedServer = errors.New("the control socket is served by another user")

// RequestTakeover asks the kbridge on the control socket sock to hand port
// and interface iface over, and returns what it handed: the queue fds are
// this process's (close-on-exec), and the old kbridge keeps its own until
// Confirm, or takes them back after Close. Only a kbridge of root or of
// this process's user is asked (SO_PEERCRED, as the control socket checks
// its clients): another user's process there would be handed nothing but
// could hand this one fds. A refusal, or an answer without fds, wraps
// ErrTakeoverRefused.
func RequestTakeover(sock, port, iface string) (*Takeover, error) {
	conn, err := net.DialTimeout("unix", sock, controlDial)
	if err != nil {
		return nil, fmt.Errorf("takeover: no kbridge answers on %s: %w", sock, err)
	}
	uc := conn.(*net.UnixConn)
	t := &Takeover{conn: uc}
	if err := t.request(sock, port, iface); err != nil {
		t.Close()
		for _, fd := range t.Fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("takeover from the kbridge on %s: %w", sock, err)
	}
	return t, nil
}

// request checks the server, asks and reads the answer into t.
func (t *Takeover) request(sock, port, iface string) error {
	cred, err := peerCred(t.conn)
	if err != nil {
		return fmt.Errorf("its credentials: %w", err)
	}
	if err := checkServer(cred, uint32(os.Geteuid())); err != nil {
		return err
	}
	// The old kbridge stops its workers before it answers: a burst, a
	// wait for the app's answer to a request.
	_ = t.conn.SetDeadline(time.Now().Add(30 * time.Second))
	q := url.Values{"port": {port}, "interface": {iface}}
	if _, err := fmt.Fprintf(t.conn, "POST /takeover?%s HTTP/1.1\r\nHost: kbridge\r\nContent-Length: 0\r\n\r\n", q.Encode()); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*maxHandedFds))
	n, oobn, _, _, err := t.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return err
	}
	t.Fds, err = parseRights(oob[:oobn])
	if err != nil {
		return err
	}
	// The reader stays: the answer to the confirmation follows on it.
	t.r = bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:n]), t.conn))
	if t.Handover, err = readHandover(t.r); err != nil {
		return err
	}
	if len(t.Fds) != t.Queues {
		return fmt.Errorf("%d fds for %d queues: %w", len(t.Fds), t.Queues, ErrTakeoverRefused)
	}
	return nil
}

// checkServer is the takeover client's rule for the process on the control
// socket: root, or this process's user (uid self), as peerAllowed is the
// server's.
func checkServer(cred *unix.Ucred, self uint32) error {
	if peerAllowed(cred.Uid, self) {
		return nil
	}
	return fmt.Errorf("%w: pid %d runs as uid %d (root and uid %d may serve it): nothing is taken from it",
		ErrUntrustedServer, cred.Pid, cred.Uid, self)
}

// Confirm tells the kbridge that handed over that this one claimed the port
// and adopted the interface, and waits for its answer: nil once it let go
// (or once it is gone without a word, which log says: it can take nothing
// back). An error wrapping ErrTakeoverAborted means it takes the port and
// the interface back: this kbridge must stop, releasing them.
func (t *Takeover) Confirm(log *slog.Logger) error {
	if t.ConfirmWithinMs == 0 {
		log.Info("the kbridge that handed over waits for no confirmation (an older kbridge): it let go already", "previous_pid", t.PID)
		return nil
	}
	within := time.Duration(t.ConfirmWithinMs)*time.Millisecond + ackSlack
	_ = t.conn.SetDeadline(time.Now().Add(within))
	// A write that fails (the old one closed) leaves its last word, if it
	// said one, to be read.
	_, werr := io.WriteString(t.conn, wordConfirm+"\n")
	line, err := t.r.ReadString('\n')
	word, why, _ := strings.Cut(strings.TrimSpace(line), " ")
	switch {
	case word == wordAck:
		return nil
	case word == wordAbort:
		return fmt.Errorf("%w: %s", ErrTakeoverAborted, why)
	case line == "" && errors.Is(err, io.EOF):
		log.Warn("the kbridge that handed over is gone without answering the confirmation: it cannot take the port and "+
			"the interface back, so this one serves on", "previous_pid", t.PID, "write", werr)
		return nil
	case err != nil:
		return fmt.Errorf("%w: no answer to the confirmation within %v: %w", ErrTakeoverAborted, within, err)
	}
	return fmt.Errorf("%w: it answered %q", ErrTakeoverAborted, line)
}

// Close ends the takeover: before Confirm, it tells the old kbridge to
// take the port and the interface back. It closes no fd of Fds.
func (t *Takeover) Close() {
	if t != nil && t.conn != nil {
		t.conn.Close()
	}
}

// The start enters here twice: takeOver at the ask, for the queues to
// adopt (adopt.go's makeDevice adopts them as any other), and
// adoption.confirm once the port is claimed and the workers run.

// takeOver asks the kbridge on the control socket to hand port (mode
// vhost: its socket) and the interface over, and returns the queues to
// adopt.
func takeOver(cfg config.Config, port string, log *slog.Logger) (*adoption, error) {
	t, err := RequestTakeover(cfg.Stats.Socket, port, cfg.Interface.Name)
	if err != nil {
		return nil, err
	}
	log.Warn("the kbridge on the control socket handed the port and the interface over", "previous_pid", t.PID,
		"interface", t.Interface, "ifindex", t.Index, "queues", t.Queues, "confirm_within_ms", t.ConfirmWithinMs)
	return &adoption{fds: t.Fds, how: HowHanded, handed: t, from: t.PID}, nil
}

// confirm tells the kbridge that handed the interface over that this one
// serves it now (Takeover.Confirm), once the port is claimed, the
// interface adopted and the workers run; nothing for another adoption. An
// error: the old kbridge takes back, and the start must fail, releasing
// the port.
func (a *adoption) confirm(log *slog.Logger) error {
	if a == nil || a.handed == nil {
		return nil
	}
	beforeConfirm(log)
	err := a.handed.Confirm(log)
	a.handed.Close()
	a.handed = nil
	if err != nil {
		return err
	}
	log.Info("the kbridge that handed over let go: the takeover is confirmed", "previous_pid", a.from)
	return nil
}

// beforeConfirm runs right before a takeover is confirmed: a test build
// holds the successor there (testhook.go).
var beforeConfirm = func(*slog.Logger) {}

package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The takeover by hand: `kbridge run --takeover` started while another
// kbridge serves the same port asks that one, over its control socket
// (POST /takeover), to hand over. The old one stops its keeper and
// workers, releases the port and answers with the TAP's queue fds attached
// (SCM_RIGHTS), then closes its copies and exits 0: the queues stay
// attached throughout, frames the kernel sends meanwhile wait in them, and
// kb0 (ifindex, addresses, routes, neighbours, bound sockets) is never
// touched. The new one claims the port and adopts the fds (tap.Adopt).
// Both log it. Nothing else hands over: a plain second `kbridge run` is
// refused as before, so an accidental start never steals a live path.

// Handover is what a kbridge hands its successor with the queue fds.
type Handover struct {
	PID       int    `json:"pid"` // the kbridge that hands over
	Port      string `json:"port"`
	Interface string `json:"interface"`
	Index     int    `json:"ifindex"`
	Queues    int    `json:"queues"` // the fds attached, in queue order
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

// handedOver is what a takeover request came to: the handover made (err
// nil), or why not after the path had begun stopping.
type handedOver struct {
	h   Handover
	to  int // the successor's pid (SO_PEERCRED)
	err error
}

// logged logs what came of the handover and returns Serve's error: nil
// once handed over.
func (h handedOver) logged(log *slog.Logger) error {
	if h.err != nil {
		log.Error("the handover failed: the interface goes with this kbridge", "successor_pid", h.to, "err", h.err)
		return h.err
	}
	log.Warn("handed the port and the interface over: exiting", "successor_pid", h.to, "port", h.h.Port,
		"interface", h.h.Interface, "ifindex", h.h.Index, "queues", h.h.Queues)
	return nil
}

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
	err = sendHandover(hj, h, fds)
	release() // the successor holds them now, or nobody does
	if err != nil {
		err = fmt.Errorf("handing the interface over to pid %d: %w", peer, err)
	}
	c.handed <- handedOver{h: h, to: peer, err: err}
}

// sendHandover writes the 200 answer with h as its body and fds attached to
// its bytes, on the hijacked connection, and closes it.
func sendHandover(hj http.Hijacker, h Handover, fds []int) error {
	conn, _, err := hj.Hijack()
	if err != nil {
		return err
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("a %T cannot carry fds", conn)
	}
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

// RequestTakeover asks the kbridge on the control socket sock to hand port
// and interface iface over, and returns what it handed: the queue fds, in
// queue order, are this process's (close-on-exec). A refusal, or an answer
// without fds, wraps ErrTakeoverRefused.
func RequestTakeover(sock, port, iface string) (Handover, []int, error) {
	conn, err := net.DialTimeout("unix", sock, controlDial)
	if err != nil {
		return Handover{}, nil, fmt.Errorf("takeover: no kbridge answers on %s: %w", sock, err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	// The old kbridge stops its workers before it answers: a burst, a
	// wait for the app's answer to a request.
	_ = uc.SetDeadline(time.Now().Add(30 * time.Second))
	q := url.Values{"port": {port}, "interface": {iface}}
	if _, err := fmt.Fprintf(uc, "POST /takeover?%s HTTP/1.1\r\nHost: kbridge\r\nContent-Length: 0\r\n\r\n", q.Encode()); err != nil {
		return Handover{}, nil, fmt.Errorf("takeover: %s: %w", sock, err)
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*maxHandedFds))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return Handover{}, nil, fmt.Errorf("takeover: %s: %w", sock, err)
	}
	fds, ferr := parseRights(oob[:oobn])
	h, err := readHandover(io.MultiReader(bytes.NewReader(buf[:n]), uc))
	if err == nil && ferr != nil {
		err = ferr
	}
	if err == nil && len(fds) != h.Queues {
		err = fmt.Errorf("%d fds for %d queues: %w", len(fds), h.Queues, ErrTakeoverRefused)
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return Handover{}, nil, fmt.Errorf("takeover from the kbridge on %s: %w", sock, err)
	}
	return h, fds, nil
}

// parseRights returns the fds of every SCM_RIGHTS message in oob.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// readHandover reads the answer to POST /takeover.
func readHandover(r io.Reader) (Handover, error) {
	resp, err := http.ReadResponse(bufio.NewReader(r), nil)
	if err != nil {
		return Handover{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Handover{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Handover{}, fmt.Errorf("%w: %s: %s", ErrTakeoverRefused, resp.Status, strings.TrimSpace(string(body)))
	}
	var h Handover
	if err := json.Unmarshal(body, &h); err != nil {
		return Handover{}, fmt.Errorf("%w: %w", ErrTakeoverRefused, err)
	}
	return h, nil
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

package daemon

// The takeover's wire, both sides (the old kbridge's: handover.go; the
// successor's: takeover.go): POST /takeover on the control socket, a
// 200 whose JSON body is a Handover with the queue fds attached to its
// bytes (SCM_RIGHTS), then the successor's confirm and the old one's ack
// (or abort), a line each. It stays byte for byte what older kbridges
// speak: a successor takes over from an older kbridge and back.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

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

// maxHandedFds bounds the queue fds one handover carries.
const maxHandedFds = 256

// The words of the confirmation.
const (
	wordConfirm = "confirm"
	wordAck     = "ack"
	wordAbort   = "abort"
)

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

// sendRefusal answers POST /takeover with err as the 409 net/http's
// http.Error writes (the answer of kbridges that refused before they
// hijacked the connection): the same status, headers and body.
func sendRefusal(conn net.Conn, err error) error {
	body := err.Error() + "\n"
	msg := fmt.Sprintf("HTTP/1.1 409 Conflict\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"+
		"Date: %s\r\nContent-Length: %d\r\n\r\n%s", time.Now().UTC().Format(http.TimeFormat), len(body), body)
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err = io.WriteString(conn, msg)
	return err
}

// readHandover reads the answer to POST /takeover.
func readHandover(r *bufio.Reader) (Handover, error) {
	resp, err := http.ReadResponse(r, nil)
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

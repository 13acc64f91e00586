package sockview

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The netlink dumps the view is read with: a request, then messages until
// NLMSG_DONE. Only dumps: nothing here changes the host.

const nlmsgHdrLen = 16

// nlSocket is one netlink socket of a protocol (NETLINK_SOCK_DIAG,
// NETLINK_ROUTE, NETLINK_NETFILTER) and its receive buffer.
type nlSocket struct {
	fd  int
	seq uint32
	buf []byte
}

func openNetlink(proto int) (*nlSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, os.NewSyscallError("socket(AF_NETLINK)", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("bind(AF_NETLINK)", err)
	}
	// Large enough for a dump's batch of messages (the kernel fills up
	// to about 32 KiB a datagram).
	return &nlSocket{fd: fd, buf: make([]byte, 64<<10)}, nil
}

func (s *nlSocket) close() {
	if s != nil {
		unix.Close(s.fd)
	}
}

// errDump wraps a dump the kernel answered with an error.
var errDump = errors.New("netlink dump refused")

// dump sends a NLM_F_DUMP request of type typ with body req and calls each
// for every message of the answer (its type and body) until NLMSG_DONE.
func (s *nlSocket) dump(typ uint16, req []byte, each func(typ uint16, body []byte) error) error {
	s.seq++
	msg := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(req))
	binary.NativeEndian.PutUint32(msg[0:], uint32(nlmsgHdrLen+len(req)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(msg[8:], s.seq)
	msg = append(msg, req...)
	if err := unix.Sendto(s.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return os.NewSyscallError("sendto(netlink)", err)
	}
	for {
		n, _, err := unix.Recvfrom(s.fd, s.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("recvfrom(netlink)", err)
		}
		done, err := s.messages(s.buf[:n], each)
		if err != nil || done {
			return err
		}
	}
}

// messages walks one datagram of a dump's answer; done at NLMSG_DONE.
func (s *nlSocket) messages(b []byte, each func(typ uint16, body []byte) error) (done bool, err error) {
	for len(b) >= nlmsgHdrLen {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		typ := binary.NativeEndian.Uint16(b[4:])
		seq := binary.NativeEndian.Uint32(b[8:])
		if l < nlmsgHdrLen || l > len(b) {
			return true, fmt.Errorf("%w: a message of %d bytes in %d", errDump, l, len(b))
		}
		body := b[nlmsgHdrLen:l]
		b = b[min(nlmsgAlign(l), len(b)):]
		if seq != s.seq {
			continue // an answer to an earlier request, abandoned
		}
		switch typ {
		case unix.NLMSG_DONE:
			// A dump's status rides its end: 0, or -errno (ENOENT: no
			// handler for that family and protocol in this kernel).
			if len(body) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(body)); e < 0 {
					return true, fmt.Errorf("%w: %w", errDump, unix.Errno(-e))
				}
			}
			return true, nil
		case unix.NLMSG_ERROR:
			if len(body) < 4 {
				return true, fmt.Errorf("%w: a short error", errDump)
			}
			if e := int32(binary.NativeEndian.Uint32(body)); e != 0 {
				return true, fmt.Errorf("%w: %w", errDump, unix.Errno(-e))
			}
			return true, nil
		}
		if err := each(typ, body); err != nil {
			return true, err
		}
	}
	return false, nil
}

func nlmsgAlign(n int) int { return (n + 3) &^ 3 }

// attrs calls each for every netlink attribute in b (type without the
// nested and byte-order bits, value).
func attrs(b []byte, each func(typ uint16, v []byte)) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff // NLA_TYPE_MASK: without NLA_F_NESTED and NLA_F_NET_BYTEORDER
		if l < 4 || l > len(b) {
			return
		}
		each(typ, b[4:l])
		b = b[min(nlmsgAlign(l), len(b)):]
	}
}

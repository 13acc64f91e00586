package harness

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"
)

// BulkTCP sends n pseudo-random bytes (seeded by port, so a run can be
// repeated) over one TCP connection from namespace from to addr:port in
// namespace to, compares the receiver's SHA-256 with the sender's and
// returns how long the send took. Any error or mismatch fails t.
func BulkTCP(t testing.TB, from, to, addr string, port, n int) time.Duration {
	t.Helper()
	hostport := net.JoinHostPort(addr, strconv.Itoa(port))
	var ln net.Listener
	if err := InNS(to, func() (err error) {
		ln, err = net.Listen("tcp", hostport)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		h := sha256.New()
		if _, err := io.Copy(h, c); err != nil {
			got <- nil
			return
		}
		got <- h.Sum(nil)
	}()
	var c net.Conn
	if err := InNS(from, func() (err error) {
		c, err = net.DialTimeout("tcp", hostport, 10*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(port)}).Read(buf)
	want := sha256.Sum256(buf)
	t0 := time.Now()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(buf); err != nil {
		c.Close()
		t.Fatalf("bulk %s -> %s: %v", from, to, err)
	}
	c.Close()
	if h := <-got; !bytes.Equal(h, want[:]) {
		t.Fatalf("bulk %s -> %s: %d bytes arrived with SHA-256 %x, sent %x", from, to, n, h, want)
	}
	return time.Since(t0)
}

package xdp

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// pingFromRemote pings dst from kbx-remote; dst may carry a %zone.
func pingFromRemote(count int, args ...string) error {
	cmd := append([]string{"netns", "exec", nsRemote, "ping", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "2"}, args...)
	out, err := exec.Command("ip", cmd...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %v: %v\n%s", args, err, out)
	}
	return nil
}

// tcpEcho sends size random bytes from kbx-remote to an echo server on kb0
// and checks that the same bytes come back: TCP through the redirect in both
// directions, with segmentation and checksums on the way.
func tcpEcho(t *testing.T, size int) {
	t.Helper()
	var ln net.Listener
	if err := inNS(nsDUT, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(kb0IP, "7007"))
		return err
	}); err != nil {
		t.Fatalf("listen on kb0: %v", err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()

	var c net.Conn
	if err := inNS(nsRemote, func() (err error) {
		c, err = net.DialTimeout("tcp4", net.JoinHostPort(kb0IP, "7007"), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect from remote: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))

	want := make([]byte, size)
	rand.Read(want)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		werr <- err
	}()
	got := make([]byte, size)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("tcp echo of %d bytes: read: %v", size, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("tcp echo: write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("tcp echo: %d bytes came back different", size)
	}
}

// udpListen opens a UDP socket on kb0's address in kbx-dut.
func udpListen(t *testing.T, port int) *net.UDPConn {
	t.Helper()
	var u *net.UDPConn
	if err := inNS(nsDUT, func() (err error) {
		u, err = net.ListenUDP("udp", &net.UDPAddr{Port: port})
		return err
	}); err != nil {
		t.Fatalf("udp listen %d: %v", port, err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

// udpSend sends n datagrams "kbx <port> <i>" from kbx-remote to dst.
func udpSend(t *testing.T, dst string, port, n int) {
	t.Helper()
	err := inNS(nsRemote, func() error {
		c, err := net.Dial("udp", net.JoinHostPort(dst, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range n {
			if _, err := fmt.Fprintf(c, "kbx %d %d", port, i); err != nil {
				return err
			}
			time.Sleep(time.Millisecond) // no burst: nothing may be lost to queueing
		}
		return nil
	})
	if err != nil {
		t.Fatalf("udp send: %v", err)
	}
}

// udpCount counts datagrams arriving within idle of each other.
func udpCount(u *net.UDPConn, idle time.Duration) int {
	buf := make([]byte, 2048)
	n := 0
	for {
		u.SetReadDeadline(time.Now().Add(idle))
		if _, _, err := u.ReadFrom(buf); err != nil {
			return n
		}
		n++
	}
}

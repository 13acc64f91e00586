package vnet_test

import (
	"fmt"

	"github.com/kbridge/kbridge/tap/vnet"
)

// The write side: one Coalesce per burst from the app, one writev per Write.
func ExampleCoalescer() {
	c := vnet.NewCoalescer(32, 0)
	var burst []vnet.Packet // filled from the mbufs of one rx burst
	for _, w := range c.Coalesce(burst) {
		_ = w.Iov // unix.Writev(fd, w.Iov); on error, count len(w.Pkts) drops
	}
	fmt.Println(c.Stats().Writes)
	// Output: 0
}

// The read side: a frame read from the TAP is cut into MTU-sized frames.
func ExampleParse() {
	const mtu = 1500
	buf := make([]byte, vnet.HdrLen+65535+18) // one read(2) from the TAP
	n := vnet.HdrLen + 60                     // pretend: a 60-byte frame arrived
	buf[vnet.HdrLen+12], buf[vnet.HdrLen+13] = 0x08, 0x06
	frame := buf[vnet.HdrLen:n]
	s, err := vnet.Parse(vnet.Decode(buf), frame, mtu)
	if err != nil {
		return // count a "bad vnet header" drop: errors.Is(err, vnet.ErrBadHeader)
	}
	dst := make([]byte, mtu+18) // an mbuf's data room
	for k := range s.N() {
		fmt.Println(s.Segment(k, frame, dst))
	}
	// Output: 60
}

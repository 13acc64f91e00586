package vhost

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tests/harness"
	vu "github.com/kbridge/kbridge/vhost/vhostusertest"
)

// FuzzVhostSequences decodes each input into a vhost-user message sequence
// (5 bytes a step: request, flags, a size, an fd from a small menu) sent
// through vhostusertest to ONE kbridge started once per fuzz worker
// process; each input reconnects. Three requests are steps of their own:
// 0xfe brings a device up; 0xfd resizes its TX vring to the step's size
// (bytes 3-4) and rebases it to the new end, posting a head there; 0xfc
// sends the header of request number flags claiming the step's size, no
// payload, and ends the input. After each input kbridge must be alive and
// its control socket answer. Seeds run in seconds under plain go test;
// go test -fuzz FuzzVhostSequences -parallel 1 runs longer.
func FuzzVhostSequences(f *testing.F) {
	for _, s := range [][]byte{
		{1, 1, 0, 0, 0},                          // GET_FEATURES
		{5, 1, 40, 0, 1},                         // SET_MEM_TABLE, an empty memfd
		{6, 9, 16, 0, 1, 32, 9, 16, 0, 1},        // SET_LOG_BASE, SET_INFLIGHT_FD
		{0xfe, 1, 0, 0, 0, 8, 1, 8, 0, 0},        // bring-up, SET_VRING_NUM
		{0xfe, 1, 0, 0, 0, 99, 9, 0xff, 0xff, 4}, // bring-up, request 99 with a pipe
		{0xfe, 1, 0, 0, 0, 37, 1, 40, 0, 3},      // bring-up, ADD_MEM_REG big memfd
		{0xfe, 1, 0, 0, 0, 0xfd, 1, 0, 0x80, 0},  // bring-up, TX vring resized to 32768
		{0xfe, 1, 0, 0, 0, 0xfc, 1, 8, 0, 0},     // bring-up, GET_FEATURES stalled
		{0xfc, 5, 40, 0, 0},                      // SET_MEM_TABLE's header alone
	} {
		f.Add(s)
	}
	b := newBed(f, false)
	kb := b.kbridge()
	f.Fuzz(func(t *testing.T, in []byte) {
		sendSequence(t, b.sock, in)
		kb.CheckRunning(t)
		_ = b.refusals(t) // the control socket answers
		// What the sequence brought up went with its connection: kbridge's
		// pool is whole again (a leak per input would empty it over a
		// long run, as make soak's runs are).
		deadline := time.Now().Add(2 * time.Second)
		for {
			var s status
			harness.KbridgeStats(t, b.ctl, &s)
			if s.PoolInUse == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kbridge's pool has %d mbufs in use 2 s after the frontend hung up", s.PoolInUse)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// sendSequence decodes in into vhost-user messages and sends them on a new
// connection to sock, which it closes.
func sendSequence(t *testing.T, sock string, in []byte) {
	fe, err := vu.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	var open []int
	defer func() {
		fe.Close()
		for _, fd := range open {
			unix.Close(fd)
		}
	}()
	for i := 0; i+5 <= len(in) && i < 5*16; i += 5 {
		req, flags := uint32(in[i]), uint32(in[i+1])
		size := int(binary.LittleEndian.Uint16(in[i+2:])) % 4096
		switch req {
		case 0xfe:
			if _, err := fe.Up(); err != nil {
				return
			}
			continue
		case 0xfd:
			num := uint32(binary.LittleEndian.Uint16(in[i+2:]))
			if fe.SetVringNum(1, num, vu.Version) != nil || fe.SetVringBase(1, num-1) != nil {
				return
			}
			_ = fe.PostAt(1, int(num-1)%vu.RingSize, 0, uint16(num))
			continue
		case 0xfc:
			// The header of request number flags (the step's second
			// byte), and
			// then nothing: kbridge must hang up by itself.
			_ = fe.SendHeader(flags, vu.Version, uint32(size))
			fe.HungUp(5 * time.Second)
			return
		}
		var fds []int
		var fd int
		var err error
		switch in[i+4] % 5 {
		case 1:
			fd, err = vu.Memfd(0)
		case 2:
			fd, err = vu.Memfd(4096)
		case 3:
			fd, err = vu.Memfd(4 << 20)
		case 4:
			var p [2]int
			err = unix.Pipe2(p[:], unix.O_CLOEXEC)
			open = append(open, p[1])
			fd = p[0]
		default:
			fd = -1
		}
		if err != nil {
			t.Fatal(err)
		}
		if fd >= 0 {
			open = append(open, fd)
			fds = append(fds, fd)
		}
		p := make([]byte, size)
		for j := range p {
			p[j] = in[(i+j)%len(in)]
		}
		if fe.Send(req, flags, p, fds...) != nil {
			break // hung up
		}
	}
	fe.HungUp(50 * time.Millisecond)
}

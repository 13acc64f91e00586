package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/doctor"
)

// fakeSockets answers doctor.SocketsReader with readings in turn.
type fakeSockets struct {
	readings []doctor.SocketsState
	err      error
	n        int
}

func (f *fakeSockets) Sockets(ctx context.Context) (doctor.SocketsState, error) {
	if f.err != nil {
		return doctor.SocketsState{}, f.err
	}
	r := f.readings[min(f.n, len(f.readings)-1)]
	f.n++
	return r, nil
}

func socketsResults(t *testing.T, r doctor.SocketsReader) []doctor.Result {
	t.Helper()
	opts := doctor.Options{Root: t.TempDir(), CoPPWindow: 10 * time.Millisecond, Sockets: r}
	var out []doctor.Result
	for _, res := range doctor.Run(context.Background(), opts) {
		if res.Check == doctor.CheckSockets {
			out = append(out, res)
		}
	}
	return out
}

func TestTheSocketsCheckCountsUnwantedFramesByReason(t *testing.T) {
	a := doctor.SocketsState{TCP: "on", UDP: "on"}
	b := a
	b.Unwanted = [3]uint64{1000, 20, 0} // in 10 ms
	got := socketsResults(t, &fakeSockets{readings: []doctor.SocketsState{a, b}})
	want := "frames no socket wants are classed unwanted: 102000/s over 10ms (udp 100000, tcp_syn 2000, tcp 0)"
	if len(got) != 1 || got[0].Status != doctor.Pass || got[0].Evidence != want {
		t.Errorf("got %+v, want one pass: %q", got, want)
	}
}

func TestTheSocketsCheckWarnsWhatTakesAProtocolsFramesWhateverTheirPort(t *testing.T) {
	s := doctor.SocketsState{TCP: "on", UDP: "a packet socket on the interface (inode 7, uid 0, protocol 0x0003: tcpdump or the like)"}
	got := socketsResults(t, &fakeSockets{readings: []doctor.SocketsState{s}})
	if len(got) != 2 || got[0].Status != doctor.Warn || !strings.Contains(got[0].Evidence, "UDP frames to ports no socket holds reach the kernel: a packet socket") ||
		got[1].Status != doctor.Pass {
		t.Errorf("got %+v, want a warning naming the packet socket for UDP, then a pass", got)
	}
	off := doctor.SocketsState{TCP: "copp.unwanted.enabled is false", UDP: "copp.unwanted.enabled is false"}
	got = socketsResults(t, &fakeSockets{readings: []doctor.SocketsState{off}})
	if len(got) != 2 || got[0].Status != doctor.Skip || got[1].Status != doctor.Skip {
		t.Errorf("switched off: got %+v, want two skips", got)
	}
	got = socketsResults(t, &fakeSockets{err: doctor.ErrNoInstance})
	if len(got) != 1 || got[0].Status != doctor.Skip {
		t.Errorf("no kbridge: got %+v, want a skip", got)
	}
}

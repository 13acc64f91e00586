package ringtest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The request types of kbridge.h.
const (
	reqMTU     = 1
	reqPromisc = 4
)

// One request, one answer: the app sees what kbridge posted, once, and
// kbridge reads the app's result for that request only.
func TestMailboxRoundTrip(t *testing.T) {
	m := NewMailbox()
	defer m.Free()
	if _, ok := m.Poll(); ok {
		t.Fatal("a request in an empty mailbox")
	}
	seq := m.Post(reqMTU, 9000, [6]byte{})
	if _, ok := m.Answer(seq); ok {
		t.Fatal("answered before the app replied")
	}
	r, ok := m.Poll()
	if !ok || r.Seq != seq || r.Type != reqMTU || r.Value != 9000 {
		t.Fatalf("poll: %+v %v, want seq %d mtu 9000", r, ok, seq)
	}
	m.Reply(r.Seq, -22)
	if res, ok := m.Answer(seq); !ok || res != -22 {
		t.Fatalf("answer: %d %v, want -22", res, ok)
	}
	if _, ok := m.Poll(); ok {
		t.Fatal("an answered request was polled again")
	}
}

// kbridge gave up on a request and posted the next: the late reply to the
// first is ignored, the app then takes the second, and kbridge reads the
// second's answer.
func TestMailboxLateReplyIgnored(t *testing.T) {
	m := NewMailbox()
	defer m.Free()
	first := m.Post(reqMTU, 1600, [6]byte{})
	old, _ := m.Poll()
	second := m.Post(reqPromisc, 1, [6]byte{})
	m.Reply(old.Seq, 0) // too late
	if _, ok := m.Answer(second); ok {
		t.Fatal("the reply to the first request answered the second")
	}
	r, ok := m.Poll()
	if !ok || r.Seq != second || r.Type != reqPromisc || r.Value != 1 {
		t.Fatalf("poll: %+v %v, want the second request (seq %d)", r, ok, second)
	}
	m.Reply(r.Seq, 0)
	if res, ok := m.Answer(second); !ok || res != 0 {
		t.Fatalf("answer to the second: %d %v", res, ok)
	}
	if first == second {
		t.Fatal("two requests with one seq")
	}
}

// A kbridge killed while posting leaves the mailbox mid-write (req_seq
// odd): the app takes nothing from it, and the next kbridge's post is taken.
func TestMailboxTornPost(t *testing.T) {
	m := NewMailbox()
	defer m.Free()
	m.Tear()
	if r, ok := m.Poll(); ok {
		t.Fatalf("the app took a half-written request: %+v", r)
	}
	seq := m.Post(reqMTU, 1400, [6]byte{})
	if seq%2 != 0 {
		t.Fatalf("a posted request has an odd seq %d", seq)
	}
	if r, ok := m.Poll(); !ok || r.Value != 1400 {
		t.Fatalf("poll after the torn post: %+v %v", r, ok)
	}
}

// A type this header does not know (a newer kbridge's) is refused by the
// poll itself with -ENOTSUP: the app never sees it.
func TestMailboxUnknownTypeRefused(t *testing.T) {
	m := NewMailbox()
	defer m.Free()
	seq := m.Post(99, 1, [6]byte{})
	if r, ok := m.Poll(); ok {
		t.Fatalf("the app saw an unknown request: %+v", r)
	}
	if res, ok := m.Answer(seq); !ok || res != -95 {
		t.Fatalf("answer %d %v, want -95 (ENOTSUP)", res, ok)
	}
}

// kbridge posts while the app polls on another thread: every request the
// app takes is one kbridge posted, whole (value matches the seq), never torn.
func TestMailboxConcurrentPostsNeverTear(t *testing.T) {
	m := NewMailbox()
	defer m.Free()
	const n = 20000
	var polled atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if r, ok := m.Poll(); ok {
				if r.Value != r.Seq*3 || r.MAC[0] != byte(r.Seq) {
					t.Errorf("torn request: %+v", r)
					return
				}
				m.Reply(r.Seq, 0)
				polled.Add(1)
			}
		}
	}()
	seq := uint32(0)
	for i := 0; i < n; i++ {
		next := seq + 2 // what the post will number it
		seq = m.Post(reqMTU, next*3, [6]byte{byte(next)})
		if seq != next {
			t.Fatalf("post %d numbered %d, want %d", i, seq, next)
		}
	}
	for deadline := time.Now().Add(time.Second); polled.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the last one at least
	}
	close(done)
	wg.Wait()
	if polled.Load() == 0 {
		t.Error("the app took none of the requests")
	}
}

// A kbridge that takes the port over withdraws what a killed one left
// unanswered: the app never takes it; the next post is taken.
func TestMailboxWithdraw(t *testing.T) {
	m := NewMailbox()
	defer m.Free()
	m.Post(reqMTU, 1600, [6]byte{})
	m.Withdraw()
	if r, ok := m.Poll(); ok {
		t.Fatalf("the app took a withdrawn request: %+v", r)
	}
	seq := m.Post(reqPromisc, 1, [6]byte{})
	r, ok := m.Poll()
	if !ok || r.Seq != seq || r.Type != reqPromisc {
		t.Fatalf("poll after the withdrawal: %+v %v", r, ok)
	}
	m.Reply(r.Seq, 0)
	m.Withdraw() // answered: nothing to withdraw
	if res, ok := m.Answer(seq); !ok || res != 0 {
		t.Fatalf("the answer after a withdrawal of nothing: %d %v", res, ok)
	}
}

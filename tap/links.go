package tap

import (
	"log/slog"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// links is the process's one link subscription, which every Watch shares:
// one netlink socket, one reader and one parse of each update, however
// many interfaces kbridge serves. A subscription of each Watch's own cost
// a port set of 64 ports 64 sockets, 64 readers, each with a 64 KiB
// receive buffer, and every update parsed 64 times
// (docs/runs/2026-12-07-64-knis.md).
var links linkHub

// linkHub shares one link subscription between the watches: the first to
// join starts it, the last to leave ends it. Its reader hands each update
// to the watches of the interface it names.
type linkHub struct {
	mu      sync.Mutex
	watches map[*Watch]struct{}
	stop    chan struct{} // ends the reader; nil while no subscription runs
	done    chan struct{} // closed when the reader returned
}

// join adds w, first starting the subscription if none runs, and reads the
// interface as it is then into w.last: a change before that read is in it,
// one after comes as an update.
func (h *linkHub) join(w *Watch, log *slog.Logger) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop == nil {
		ch, sub, err := subscribeLinks(log)
		if err != nil {
			return err
		}
		h.watches = map[*Watch]struct{}{}
		h.stop, h.done = make(chan struct{}), make(chan struct{})
		go h.read(log, ch, sub, h.stop, h.done)
	}
	w.last, _ = w.d.State()
	h.watches[w] = struct{}{}
	return nil
}

// leave takes w out; once it returns, the reader no longer touches w. The
// last watch to leave ends the subscription.
func (h *linkHub) leave(w *Watch) {
	h.mu.Lock()
	if _, ok := h.watches[w]; !ok {
		h.mu.Unlock()
		return
	}
	delete(h.watches, w)
	if len(h.watches) > 0 {
		h.mu.Unlock()
		return
	}
	stop, done := h.stop, h.done
	h.stop, h.done = nil, nil
	h.mu.Unlock()
	close(stop)
	<-done
}

// subscribeLinks starts a link subscription. Its channel closes when the
// subscription fails (a socket overrun, say) or once the returned channel
// is closed.
func subscribeLinks(log *slog.Logger) (<-chan netlink.LinkUpdate, chan struct{}, error) {
	ch := make(chan netlink.LinkUpdate, 64)
	stop := make(chan struct{})
	err := netlink.LinkSubscribeWithOptions(ch, stop, netlink.LinkSubscribeOptions{
		ErrorCallback:     func(err error) { log.Debug("link subscription", "err", err) },
		ReceiveBufferSize: 1 << 20,
	})
	if err != nil {
		close(stop)
		return nil, nil, err
	}
	return ch, stop, nil
}

// read hands the subscription's updates to the watches until stop closes.
// When the subscription fails, events may have been lost: it subscribes
// again, then has every watch look at its interface as it is (EventSync).
func (h *linkHub) read(log *slog.Logger, ch <-chan netlink.LinkUpdate, sub chan struct{}, stop, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			close(sub)
			for range ch { // until the subscription's goroutine closes it
			}
			return
		case u, ok := <-ch:
			if ok {
				h.mu.Lock()
				for w := range h.watches {
					w.add(w.event(u, &w.last))
				}
				h.mu.Unlock()
				continue
			}
			close(sub)
			for {
				var err error
				if ch, sub, err = subscribeLinks(log); err == nil {
					break
				}
				log.Warn("link subscription ended; retrying", "err", err)
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
			h.mu.Lock()
			for w := range h.watches {
				w.last, _ = w.d.State()
				w.add(EventSync)
			}
			h.mu.Unlock()
		}
	}
}

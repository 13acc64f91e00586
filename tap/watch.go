package tap

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Event says what a Watch saw change on the interface, one bit a kind. It
// is a report, not a decision: whoever reads Events decides what to do
// (kbridge: the daemon's keeper), with State to read the interface as it is
// then, since a decision may wait seconds (for the app's answer) while
// events come, and the primitives in link.go to act.
type Event uint32

// The kinds of Event.
const (
	EventMTU       Event = 1 << iota
	EventLink            // set administratively up or down
	EventMAC             // a new hardware address
	EventPromisc         // IFF_PROMISC turned on or off
	EventAllmulti        // IFF_ALLMULTI turned on or off
	EventCarrier         // the carrier came or went (IFF_LOWER_UP)
	EventRenamed         // a new name; kbridge keeps using the interface
	EventDeleted         // gone: Recreate makes it again
	EventRecreated       // seen under the ifindex Recreate gave it
	// EventSync: events may have been lost (the subscription failed and
	// was made again); look at the whole interface.
	EventSync
)

var eventNames = []string{"mtu", "link", "mac", "promisc", "allmulticast", "carrier", "renamed", "deleted", "recreated", "sync"}

func (e Event) String() string {
	var names []string
	for i, n := range eventNames {
		if e&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// Watch reports the interface's link events from the process's one link
// subscription (links), in the current network namespace. It folds what
// it saw while its reader was busy into one Event, so that a slow reader
// neither holds the subscription up nor handles a backlog of stale events.
type Watch struct {
	d      *Device
	log    *slog.Logger
	events chan Event
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	// last is the interface as the subscription last showed it; seen
	// holds the Events not yet taken, and kick says it grew. The
	// subscription's reader alone touches last once the watch joined.
	last State
	seen atomic.Uint32
	kick chan struct{}
}

// Watch starts watching the interface. Close the Watch before the Device.
func (d *Device) Watch(log *slog.Logger) (*Watch, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watch{d: d, log: log.With("interface", d.name), events: make(chan Event), done: make(chan struct{}),
		kick: make(chan struct{}, 1)}
	if err := links.join(w, log); err != nil {
		return nil, fmt.Errorf("tap: watch %s: %w", d.name, err)
	}
	w.wg.Add(1)
	go w.run()
	return w, nil
}

// Events returns the channel of events; it closes when the Watch does.
func (w *Watch) Events() <-chan Event { return w.events }

// Close leaves the subscription and closes Events. It may be called more
// than once.
func (w *Watch) Close() {
	w.once.Do(func() {
		links.leave(w)
		close(w.done)
	})
	w.wg.Wait()
}

// add folds e into what the reader has not taken yet (the subscription's
// reader calls it).
func (w *Watch) add(e Event) {
	if e == 0 {
		return
	}
	w.seen.Or(uint32(e))
	select {
	case w.kick <- struct{}{}:
	default: // a kick is pending: the reader takes e with it
	}
}

// run hands the folded Events to the reader.
func (w *Watch) run() {
	defer w.wg.Done()
	defer close(w.events)
	var pending Event
	for {
		var out chan<- Event // nil, and so never ready, while nothing is pending
		if pending != 0 {
			out = w.events
		}
		select {
		case <-w.done:
			return
		case out <- pending:
			pending = 0
		case <-w.kick:
			pending |= Event(w.seen.Swap(0))
		}
	}
}

// event is what update u says changed on the interface since last, which
// it then updates; 0 for another interface's update, or nothing new.
func (w *Watch) event(u netlink.LinkUpdate, last *State) Event {
	index := w.d.Index()
	if int(u.Index) != index {
		return 0
	}
	var e Event
	if index != last.Index {
		e |= EventRecreated
	}
	if u.Header.Type == unix.RTM_DELLINK {
		// A bridge port's DELLINK is no deletion: look.
		if _, err := w.d.State(); isGone(err) {
			return e | EventDeleted
		}
		return e
	}
	now := stateOf(u.Link)
	if now.Name != last.Name {
		e |= EventRenamed
	}
	if now.MTU != last.MTU {
		e |= EventMTU
	}
	if now.MAC.String() != last.MAC.String() {
		e |= EventMAC
	}
	for _, f := range []struct {
		now, was bool
		e        Event
	}{
		{now.Up, last.Up, EventLink}, {now.Promisc, last.Promisc, EventPromisc},
		{now.Allmulti, last.Allmulti, EventAllmulti}, {now.Carrier, last.Carrier, EventCarrier},
	} {
		if f.now != f.was {
			e |= f.e
		}
	}
	*last = now
	return e
}

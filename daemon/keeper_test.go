package daemon

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"

	"github.com/kbridge/kbridge/tap"
)

// fakeLink is a TAP interface as the keeper sees it: its kernel state, what
// it is known to be, and what the keeper did to it.
type fakeLink struct {
	state tap.State
	gone  bool
	reads int
	// goneAtRead deletes the interface at that State call (0: never).
	goneAtRead int
	known      map[tap.ChangeKind]tap.Change
	maxMTU     int
	recreate   error // what Recreate returns
	set        []tap.Change
	recreates  int
	restores   int
	// carrier is what kbridge set last; carrierSets counts RestoreCarrier's.
	carrier     bool
	carrierSets int
}

func newFakeLink() *fakeLink {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	return &fakeLink{
		state:   tap.State{Index: 7, Name: "kbt0", MTU: 1500, MAC: mac, Up: true, Carrier: true},
		carrier: true,
		maxMTU:  9000,
		known: map[tap.ChangeKind]tap.Change{
			tap.ChangeMTU: {Kind: tap.ChangeMTU, MTU: 1500}, tap.ChangeMAC: {Kind: tap.ChangeMAC, MAC: mac},
			tap.ChangeLink: {Kind: tap.ChangeLink, On: true}, tap.ChangePromisc: {Kind: tap.ChangePromisc},
			tap.ChangeAllmulti: {Kind: tap.ChangeAllmulti},
		},
	}
}

func (f *fakeLink) Name() string { return "kbt0" }
func (f *fakeLink) Index() int   { return f.state.Index }
func (f *fakeLink) State() (tap.State, error) {
	if f.reads++; f.reads == f.goneAtRead {
		f.gone = true
	}
	if f.gone {
		return tap.State{}, tap.ErrDeleted
	}
	return f.state, nil
}
func (f *fakeLink) Set(c tap.Change) error {
	f.set = append(f.set, c)
	f.apply(c)
	return nil
}
func (f *fakeLink) apply(c tap.Change) {
	switch c.Kind {
	case tap.ChangeMTU:
		f.state.MTU = c.MTU
	case tap.ChangeMAC:
		f.state.MAC = c.MAC
	case tap.ChangeLink:
		f.state.Up = c.On
	case tap.ChangePromisc:
		f.state.Promisc = c.On
	case tap.ChangeAllmulti:
		f.state.Allmulti = c.On
	}
}
func (f *fakeLink) Known(k tap.ChangeKind) tap.Change { return f.known[k] }
func (f *fakeLink) Remember(c tap.Change) error       { f.known[c.Kind] = c; return nil }
func (f *fakeLink) MTU() int                          { return f.known[tap.ChangeMTU].MTU }
func (f *fakeLink) MaxMTU() int                       { return f.maxMTU }
func (f *fakeLink) SetMTU(mtu int) error {
	f.known[tap.ChangeMTU] = tap.Change{Kind: tap.ChangeMTU, MTU: mtu}
	return nil
}
func (f *fakeLink) Recreate() error {
	f.recreates++
	if f.recreate != nil {
		return f.recreate
	}
	f.gone = false
	f.state.Index++
	for _, c := range f.known {
		f.apply(c)
	}
	return nil
}
func (f *fakeLink) RestoreRoutes() (int, int, error) { f.restores++; return 1, 1, nil }
func (f *fakeLink) Carrier() bool                    { return f.carrier }
func (f *fakeLink) RestoreCarrier() (bool, error) {
	if !f.state.Up || f.state.Carrier == f.carrier {
		return false, nil
	}
	f.state.Carrier = f.carrier
	f.carrierSets++
	return true, nil
}

// fakeApp answers the keeper's requests: with answer for each change of a
// kind it takes, and records what it was asked.
type fakeApp struct {
	takes  []tap.ChangeKind
	answer func(c tap.Change) error
	asked  []tap.Change
}

func (a *fakeApp) ask(_ context.Context, c, _ tap.Change) error {
	a.asked = append(a.asked, c)
	return a.answer(c)
}

var errRefused = errors.New("refused")

// keep starts a keeper over dev and app, makes change to dev's state and
// has the keeper handle an event, and returns what it told lost.
func keep(t *testing.T, dev *fakeLink, app *fakeApp, change func(*fakeLink)) (pokes int, lost error) {
	t.Helper()
	k := newTestKeeper(dev, app, &pokes, &lost)
	ctx := context.Background()
	if !k.start(ctx) {
		t.Fatalf("the keeper stopped at start: %v", lost)
	}
	change(dev)
	k.sync(ctx)
	return pokes, lost
}

func newTestKeeper(dev *fakeLink, app *fakeApp, pokes *int, lost *error) *keeper {
	k := &keeper{dev: dev, log: quiet(), recreated: func() { *pokes++ }, lost: func(err error) { *lost = err }}
	if app != nil {
		k.takes, k.askApp = func(c tap.ChangeKind) bool { return slices.Contains(app.takes, c) }, app.ask
	}
	return k
}

func TestTheKeeperHandlesEachEventUntilTheyEnd(t *testing.T) {
	dev := newFakeLink()
	// Reads 1 and 2 are the start's (its flags, its look); the interface
	// goes before the first event's.
	dev.goneAtRead = 3
	var pokes int
	var lost error
	events := make(chan tap.Event, 2)
	events <- tap.EventDeleted
	events <- tap.EventSync
	close(events)
	newTestKeeper(dev, nil, &pokes, &lost).run(context.Background(), events)
	if dev.reads != 6 {
		t.Errorf("the interface was read %d times, want 6: the start's two, each event's, the re-made one's flags and look", dev.reads)
	}
	if dev.recreates != 1 || pokes != 1 || lost != nil {
		t.Errorf("made again %d times, %d pokes, lost %v: want once, once, nil", dev.recreates, pokes, lost)
	}
}

func TestTheKeeperStopsWhenItsContextEnds(t *testing.T) {
	var pokes int
	var lost error
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	newTestKeeper(newFakeLink(), nil, &pokes, &lost).run(ctx, make(chan tap.Event))
}

func TestAnMTUChangeIsSetBackWhenTheAppTakesNoMTURequests(t *testing.T) {
	dev := newFakeLink()
	keep(t, dev, nil, func(f *fakeLink) { f.state.MTU = 9000 })
	if dev.state.MTU != 1500 || dev.MTU() != 1500 {
		t.Errorf("interface MTU %d, kept %d: want both 1500", dev.state.MTU, dev.MTU())
	}
}

func TestAnMTUChangeTheAppAcceptsIsKeptInTheQueues(t *testing.T) {
	dev := newFakeLink()
	app := &fakeApp{takes: []tap.ChangeKind{tap.ChangeMTU}, answer: func(tap.Change) error { return nil }}
	keep(t, dev, app, func(f *fakeLink) { f.state.MTU = 4000 })
	if dev.state.MTU != 4000 || dev.MTU() != 4000 || len(dev.set) != 0 {
		t.Errorf("interface MTU %d, kept %d, set %v: want 4000, 4000, nothing set", dev.state.MTU, dev.MTU(), dev.set)
	}
	// Asked once at start for the MTU the interface started with, then
	// for the change.
	if len(app.asked) != 2 || app.asked[0].MTU != 1500 || app.asked[1].MTU != 4000 {
		t.Errorf("the app was asked %v, want the start's 1500, then 4000", app.asked)
	}
}

func TestAnMTUChangeTheAppRefusesIsSetBack(t *testing.T) {
	dev := newFakeLink()
	app := &fakeApp{takes: []tap.ChangeKind{tap.ChangeMTU}, answer: func(c tap.Change) error {
		if c.MTU == 1500 {
			return nil
		}
		return errRefused
	}}
	keep(t, dev, app, func(f *fakeLink) { f.state.MTU = 4000 })
	if dev.state.MTU != 1500 || dev.MTU() != 1500 {
		t.Errorf("interface MTU %d, kept %d: want both 1500", dev.state.MTU, dev.MTU())
	}
}

func TestAnMTUBeyondWhatTheQueuesCarryIsSetBackUnasked(t *testing.T) {
	dev := newFakeLink()
	app := &fakeApp{takes: []tap.ChangeKind{tap.ChangeMTU}, answer: func(tap.Change) error { return nil }}
	keep(t, dev, app, func(f *fakeLink) { f.state.MTU = 9001 })
	if dev.state.MTU != 1500 || len(app.asked) != 1 {
		t.Errorf("interface MTU %d, the app asked %v: want 1500, asked only at start", dev.state.MTU, app.asked)
	}
}

func TestAChangeMadeAgainWhileTheAppWasAskedIsNotSetBack(t *testing.T) {
	dev := newFakeLink()
	app := &fakeApp{takes: []tap.ChangeKind{tap.ChangePromisc}}
	app.answer = func(tap.Change) error {
		dev.state.Promisc = false // an administrator, meanwhile
		return errRefused
	}
	keep(t, dev, app, func(f *fakeLink) { f.state.Promisc = true })
	if len(dev.set) != 0 || dev.Known(tap.ChangePromisc).On {
		t.Errorf("set %v, promisc known %v: want nothing set, off", dev.set, dev.Known(tap.ChangePromisc).On)
	}
}

func TestAFlagChangeIsRememberedWhenTheAppTakesNoRequests(t *testing.T) {
	dev := newFakeLink()
	keep(t, dev, nil, func(f *fakeLink) { f.state.Promisc, f.state.Allmulti = true, true })
	if !dev.Known(tap.ChangePromisc).On || !dev.Known(tap.ChangeAllmulti).On || len(dev.set) != 0 {
		t.Errorf("known promisc %v allmulti %v, set %v: want both on, nothing set",
			dev.Known(tap.ChangePromisc).On, dev.Known(tap.ChangeAllmulti).On, dev.set)
	}
}

func TestAMACTheAppAcceptsIsRemembered(t *testing.T) {
	dev := newFakeLink()
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 2}
	app := &fakeApp{takes: []tap.ChangeKind{tap.ChangeMAC}, answer: func(tap.Change) error { return nil }}
	keep(t, dev, app, func(f *fakeLink) { f.state.MAC = mac })
	if got := dev.Known(tap.ChangeMAC).MAC.String(); got != mac.String() || len(dev.set) != 0 {
		t.Errorf("known MAC %s, set %v: want %s, nothing set", got, dev.set, mac)
	}
}

func TestAMACChangeIsLeftWhenTheAppTakesNoMACRequests(t *testing.T) {
	dev := newFakeLink()
	old := dev.Known(tap.ChangeMAC).MAC.String()
	keep(t, dev, nil, func(f *fakeLink) { f.state.MAC = net.HardwareAddr{2, 0, 0, 0, 0, 3} })
	if got := dev.Known(tap.ChangeMAC).MAC.String(); got != old || len(dev.set) != 0 {
		t.Errorf("known MAC %s, set %v: want %s, nothing set", got, dev.set, old)
	}
}

func TestAnInterfaceUpAgainGetsItsRoutesBack(t *testing.T) {
	dev := newFakeLink()
	dev.known[tap.ChangeLink] = tap.Change{Kind: tap.ChangeLink} // it went down
	keep(t, dev, nil, func(*fakeLink) {})
	if dev.restores != 1 || !dev.Known(tap.ChangeLink).On {
		t.Errorf("routes restored %d times, known up %v: want once, up", dev.restores, dev.Known(tap.ChangeLink).On)
	}
}

func TestALinkDownTheAppRefusesIsSetBackUpWithItsRoutes(t *testing.T) {
	dev := newFakeLink()
	app := &fakeApp{takes: []tap.ChangeKind{tap.ChangeLink}, answer: func(tap.Change) error { return errRefused }}
	keep(t, dev, app, func(f *fakeLink) { f.state.Up = false })
	if !dev.state.Up || dev.restores != 1 {
		t.Errorf("up %v, routes restored %d times: want up, once", dev.state.Up, dev.restores)
	}
}

func TestADeletedInterfaceIsMadeAgainAndTheWorkersPoked(t *testing.T) {
	dev := newFakeLink()
	pokes, lost := keep(t, dev, nil, func(f *fakeLink) { f.gone = true })
	if dev.recreates != 1 || pokes != 1 || lost != nil {
		t.Errorf("made again %d times, %d pokes, lost %v: want once, once, nil", dev.recreates, pokes, lost)
	}
}

func TestAnInterfaceThatCannotBeMadeAgainStopsThePath(t *testing.T) {
	dev := newFakeLink()
	dev.recreate = tap.ErrNameTaken
	pokes, lost := keep(t, dev, nil, func(f *fakeLink) { f.gone = true })
	if !errors.Is(lost, ErrInterfaceLost) || !errors.Is(lost, tap.ErrNameTaken) || pokes != 0 {
		t.Errorf("lost %v, %d pokes: want ErrInterfaceLost wrapping tap.ErrNameTaken, none", lost, pokes)
	}
	if dev.recreates != 1 {
		t.Errorf("made again %d times: the keeper went on after losing the interface", dev.recreates)
	}
}

// A carrier turned outside kbridge (off while the app's link is up, or on
// while kbridge holds it off) is set back and counted; one kbridge turned
// itself, or that of an interface that is down, is left.
func TestACarrierTurnedOutsideKbridgeIsSetBack(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		wanted, up, kernel   bool
		restored, carrierNow bool
	}{
		{"turned off under an app link that is up", true, true, false, true, true},
		{"turned on while kbridge holds it off", false, true, true, true, false},
		{"as kbridge set it", true, true, true, false, true},
		{"on an interface that is down", true, false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newFakeLink()
			var pokes, restored int
			var lost error
			k := newTestKeeper(dev, nil, &pokes, &lost)
			k.carrierRestored = func() { restored++ }
			ctx := context.Background()
			if !k.start(ctx) {
				t.Fatal(lost)
			}
			dev.carrier = tc.wanted
			dev.state.Up, dev.state.Carrier = tc.up, tc.kernel
			dev.known[tap.ChangeLink] = tap.Change{Kind: tap.ChangeLink, On: tc.up}
			k.sync(ctx)
			if got := restored == 1; got != tc.restored || dev.state.Carrier != tc.carrierNow {
				t.Errorf("restored %d times, carrier %v; want restored %v, carrier %v", restored, dev.state.Carrier, tc.restored, tc.carrierNow)
			}
		})
	}
}

package bridge

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/policy"
)

// noKickBound bounds a park when the app cannot kick and the policy has no
// backoff ceiling to bound it with.
const noKickBound = 50 * time.Microsecond

// WorkerConfig configures one queue's worker.
type WorkerConfig struct {
	// CPU the worker's thread is pinned to; -1 leaves it unpinned.
	CPU    int
	Policy policy.Policy
}

// Worker moves packets for one queue pair. Run it on its own goroutine.
type Worker struct {
	cfg       WorkerConfig
	out       AppOut
	in        AppIn
	waker     Waker
	kernel    Kernel
	tso       AppTSO         // in, when the app's side can take super-frames whole
	split     AppSplit       // in, when the app's side cuts super-frames itself
	csum      AppCsum        // in, when the app's side finishes partial checksums
	pol       AppPolicer     // out, when the app's side polices
	reserver  AppReserver    // in, when the app's side keeps room for control frames
	residence func([]uint64) // out's residence histogram, when it keeps one

	// The hand-over's scratch, the worker's own: the app's packets for
	// Write (pkts, their burst indices idx, what Write delivered), the
	// app's slots and what Read made of them, and the kernel side's
	// Result.
	pkts    []Packet
	idx     []int
	written []bool
	slots   [][]byte
	frames  []Frame
	lens    []int
	res     Result // zero between calls: count adds and zeroes it

	counters Counters
	canKick  atomic.Bool
	// registered closes once the app took or refused the eventfd (Run's
	// first step).
	registered chan struct{}
	policy     atomic.Pointer[policy.Policy]
	stop       atomic.Bool
	beats      atomic.Uint64 // loop iterations, for liveness checks
	mu         sync.Mutex    // orders Stop's kick before the waiter is closed
	closed     bool
	waiter     *policy.Waiter
	start      time.Time
}

// ErrNoApp means an App lacks one of the parts every side has (Out, In,
// Waker).
var ErrNoApp = errors.New("bridge: the app's side needs Out, In and Waker")

// NewWorker returns a worker that moves packets between the app's queue
// (app) and the kernel's side of it.
func NewWorker(cfg WorkerConfig, app App, kernel Kernel) (*Worker, error) {
	if err := cfg.Policy.Validate("policy"); err != nil {
		return nil, err
	}
	if app.Out == nil || app.In == nil || app.Waker == nil {
		return nil, ErrNoApp
	}
	in := app.In
	waiter, err := policy.NewWaiter(kernel.Fd())
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:        cfg,
		out:        app.Out,
		in:         in,
		waker:      app.Waker,
		kernel:     kernel,
		tso:        app.TSO,
		split:      app.Split,
		csum:       app.Csum,
		pol:        app.Policer,
		reserver:   app.Reserver,
		residence:  app.Residence,
		slots:      make([][]byte, in.Cap()),
		frames:     make([]Frame, in.Cap()),
		lens:       make([]int, in.Cap()),
		waiter:     waiter,
		start:      time.Now(),
		registered: make(chan struct{}),
	}
	for i := range w.slots {
		w.slots[i] = in.Slot(i)
	}
	w.grow(in.Cap())
	p := cfg.Policy
	w.policy.Store(&p)
	waiter.Follow(kernel.FdGeneration)
	if app.WatchKicks != nil {
		app.WatchKicks(waiter)
	}
	return w, nil
}

// CanKick reports whether the app accepted the worker's eventfd; false
// until Run handed it over (Registered).
func (w *Worker) CanKick() bool { return w.canKick.Load() }

// Registered is closed once Run handed the app the worker's eventfd, taken
// or refused (CanKick says which).
func (w *Worker) Registered() <-chan struct{} { return w.registered }

// Counters returns the worker's live counters.
func (w *Worker) Counters() *Counters { return &w.counters }

// Policy returns the policy in force.
func (w *Worker) Policy() policy.Policy { return *w.policy.Load() }

// SetPolicy switches the running worker to p at its next poll. No packet is
// dropped: the switch happens between bursts.
func (w *Worker) SetPolicy(p policy.Policy) error {
	if err := p.Validate("policy"); err != nil {
		return err
	}
	w.policy.Store(&p)
	w.kick()
	return nil
}

// SetCoPP puts c in force at the worker's next burst; ErrNoCoPP when the
// app's side does not police.
func (w *Worker) SetCoPP(c copp.Config) error {
	if w.pol == nil {
		return ErrNoCoPP
	}
	if w.reserver != nil {
		w.reserver.SetReserve(c.Enabled)
	}
	return w.pol.SetCoPP(c)
}

// CoPP copies the classifier's, policers' and from-kernel reserve's
// counters into dst; false when the app's side does not police or was
// closed.
func (w *Worker) CoPP(dst *copp.Snapshot) bool {
	if w.pol == nil || !w.pol.CoPP(dst) {
		return false
	}
	if w.reserver != nil {
		w.reserver.Reserve(dst)
	}
	return true
}

// Residence copies the residence-time histogram into dst when the app side
// keeps one.
func (w *Worker) Residence(dst []uint64) bool {
	if w.residence == nil {
		return false
	}
	w.residence(dst)
	return true
}

// Beats counts the worker's loop iterations: a live worker's count moves at
// least once per park, and at once after Poke.
func (w *Worker) Beats() uint64 { return w.beats.Load() }

// Poke wakes a parked worker without changing anything, so that a liveness
// check can tell a parked worker from a stuck one.
func (w *Worker) Poke() { w.kick() }

// Stop asks Run to return. Run frees every packet it holds before it does.
func (w *Worker) Stop() {
	w.stop.Store(true)
	w.kick()
}

func (w *Worker) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.waiter.Kick()
	}
}

// Run moves packets until Stop. It locks its goroutine to an OS thread,
// pinned to the configured CPU, for the precise waits of the policy.
func (w *Worker) Run() error {
	// The eventfd goes to the app here, not in NewWorker: in ring mode it
	// is a round trip to the app's process (its EAL's IPC thread), a few
	// tenths of a millisecond, more under load, which the caller's own
	// steps then overlap instead of an app waiting for its port to be
	// served. An app that cannot kick still works: parks are then bounded
	// by the backoff ceiling instead of the park timeout, as they are
	// until the app holds the eventfd.
	w.canKick.Store(w.waker.RegisterEventfd(w.waiter.EventFD()) == nil)
	close(w.registered)
	defer policy.ReleaseThread()
	if err := policy.PrepareThread(w.cfg.CPU); err != nil {
		return err
	}
	defer w.close()

	cur := w.policy.Load()
	ladder := policy.NewLadder(*cur, w.now())
	last := w.now()
	for !w.stop.Load() {
		w.beats.Add(1)
		moved := w.FromKernel() + w.ToKernel()
		policed := w.policed()
		now := w.now()
		if p := w.policy.Load(); p != cur {
			cur = p
			ladder.Reset(*p, now)
		}
		step := ladder.Next(moved, policed, now)
		if moved == 0 && cur.Mode != policy.Fixed {
			w.counters.SpinNanos.Add(uint64(now - last))
		}
		switch step.Kind {
		case policy.Yield:
			_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		case policy.Sleep:
			w.counters.Sleeps.Add(1)
			if w.canKick.Load() && cur.Mode == policy.Adaptive {
				// A kickable sleep: the app wakes the worker as soon
				// as a packet comes, instead of it waiting out the
				// sleep. An app that cannot kick gets a plain precise
				// sleep, and so does fixed mode, whose uninterruptible
				// sleep is the KNI behaviour it exists to reproduce.
				if err := w.park(step.D, cur, false); err != nil {
					return err
				}
				break
			}
			w.waiter.Sleep(step.D)
		case policy.Park:
			if err := w.park(step.D, cur, ladder.Idle()); err != nil {
				return err
			}
		case policy.PolicedSleep:
			// A park without need-wakeup, counted as a sleep. Unpark
			// after a wakeup drains what a waker's own watched fd may
			// hold (vhost's kick), which would otherwise end every such
			// park at once.
			w.counters.Sleeps.Add(1)
			woken, err := w.waiter.Park(step.D)
			if err != nil {
				return err
			}
			if woken {
				w.waker.Unpark()
			}
		}
		last = w.now()
	}
	return nil
}

// park publishes need-wakeup, re-checks the ring (the app may have enqueued
// before it saw the flag) and blocks until a kick, TAP data or the timeout;
// idle: in the netpoller from the start (policy.Waiter.ParkIdle).
func (w *Worker) park(timeout time.Duration, p *policy.Policy, idle bool) error {
	if !w.canKick.Load() {
		// Nobody will kick: bound the park by the backoff ceiling, or
		// by noKickBound when the backoff is off, so that the app's
		// packets wait at most that long.
		bound := p.Backoff.Max
		if bound == 0 {
			bound = noKickBound
		}
		timeout = min(timeout, bound)
	}
	if w.waker.PrepareToPark() > 0 || w.stop.Load() {
		w.waker.Unpark()
		return nil
	}
	w.counters.Parks.Add(1)
	var woken bool
	var err error
	if idle && w.canKick.Load() {
		woken, err = w.waiter.ParkIdle(timeout)
	} else {
		woken, err = w.waiter.Park(timeout)
	}
	w.waker.Unpark()
	if woken {
		w.counters.Wakeups.Add(1)
	} else {
		w.counters.Timeouts.Add(1)
	}
	return err
}

func (w *Worker) now() time.Duration { return time.Since(w.start) }

func (w *Worker) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.out.Close()
	w.in.Close()
	w.waiter.Close()
}

// FromKernel moves up to one burst of frames from the kernel to the app. It
// returns the number of frames the kernel side read, dropped ones and
// super-frames handed whole included, and the frames of a super-frame cut
// by either side: all of it is work for the ladder.
//
// A super-frame goes whole to an app that takes TSO; otherwise, or when
// its port refuses it, to an app side that cuts it itself (App.Split); the
// kernel side splits it into the slots only when neither takes it.
func (w *Worker) FromKernel() int {
	var flags ReadFlags
	tso := w.tso != nil && w.tso.TakesTSO()
	if tso || w.split != nil {
		flags = ReadTSO
	}
	if w.csum != nil {
		flags |= ReadCsum
	}
	moved := 0
	for {
		n := w.kernel.Read(w.slots, w.frames, flags, &w.res)
		moved += n + w.res.Dropped
		w.count(&w.res)
		plain := n
		if n > 0 && w.frames[n-1].Super != nil {
			plain = n - 1
		}
		if plain > 0 {
			for i := range plain {
				f := &w.frames[i]
				w.lens[i] = f.Len
				if f.CsumStart != 0 {
					w.csum.PartialCsum(i, f.CsumStart, f.CsumOffset)
				}
			}
			w.queued(w.in.Put(w.lens[:plain]), w.lens[:plain])
		}
		if plain == n {
			return moved
		}
		if tso && w.putTSO(&w.frames[n-1]) {
			return moved
		}
		if k := w.putSplit(&w.frames[n-1]); k > 0 {
			return moved + k - 1
		}
		// The app's port cannot take this one whole: the kernel side
		// splits it into the slots, in this same poll.
		moved--
		flags |= ReadSplit
	}
}

// putTSO hands super-frame f to the app whole. It returns false when the
// app's port cannot take it (ErrTooManySegments).
func (w *Worker) putTSO(f *Frame) bool {
	res, err := w.tso.PutTSO(f.Super, f.TSO)
	if err != nil {
		return false
	}
	w.counters.Offload.TSOToApp.Add(1)
	w.counters.FromKernelPackets.Add(uint64(res.Queued))
	if res.Queued > 0 {
		w.counters.FromKernelBytes.Add(uint64(len(f.Super)))
	}
	w.dropped(res)
	return true
}

// putSplit has the app's side cut super-frame f (AppSplit) and counts it as
// the kernel side counts a split, its segments as they were queued: the
// first res.Queued of them. It returns the number of segments, or 0 when
// the app's side does not cut it.
func (w *Worker) putSplit(f *Frame) int {
	if w.split == nil {
		return 0
	}
	res, err := w.split.PutSplit(f.Super, f.TSO)
	if err != nil {
		return 0
	}
	hlen := f.TSO.L2 + f.TSO.L3 + f.TSO.L4
	payload := len(f.Super) - hlen
	segs := max(1, (payload+f.TSO.MSS-1)/f.TSO.MSS)
	w.counters.Offload.SplitReads.Add(1)
	w.counters.Offload.SplitFrames.Add(uint64(segs))
	w.counters.FromKernelPackets.Add(uint64(res.Queued))
	if res.Queued > 0 {
		w.counters.FromKernelBytes.Add(uint64(res.Queued*hlen + min(payload, res.Queued*f.TSO.MSS)))
	}
	w.dropped(res)
	return segs
}

// queued counts what became of the frames of lens given to AppIn.Put. The
// app's side queues a prefix of the burst (its ring takes what fits, in
// order; a mempool that runs dry fails the rest), so the bytes counted are
// those of the first res.Queued frames.
func (w *Worker) queued(res PutResult, lens []int) {
	var bytes uint64
	for _, n := range lens[:min(res.Queued, len(lens))] {
		bytes += uint64(n)
	}
	w.counters.FromKernelPackets.Add(uint64(res.Queued))
	w.counters.FromKernelBytes.Add(bytes)
	w.dropped(res)
}

func (w *Worker) dropped(res PutResult) {
	if res.NoMbuf+res.RingFull > 0 {
		w.counters.Drops[DropNoMbuf].Add(uint64(res.NoMbuf))
		w.counters.Drops[DropRingFull].Add(uint64(res.RingFull))
	}
}

// ToKernel moves one burst from the app to the kernel. It returns the number
// of packets dequeued, those the app side's policers freed included: all of
// it is work for the ladder.
func (w *Worker) ToKernel() int {
	n := w.out.Next()
	if n == 0 {
		return w.policed()
	}
	w.grow(n)
	k := 0
	for i := range n {
		p, err := w.out.Packet(i)
		switch {
		case err == nil:
			w.pkts[k], w.idx[k], w.written[k] = p, i, false
			k++
		case errors.Is(err, ErrTooManySegments):
			w.res.Drops[DropTooManySegs]++
		default:
			w.res.Drops[DropMalformed]++
		}
	}
	if k > 0 {
		w.kernel.Write(w.pkts[:k], w.written[:k], &w.res)
	}
	var pkts, bytes uint64
	for j := range k {
		if w.written[j] {
			w.out.Written(w.idx[j])
			pkts++
			bytes += uint64(w.pkts[j].Len)
		}
	}
	w.counters.ToKernelPackets.Add(pkts)
	w.counters.ToKernelBytes.Add(bytes)
	w.count(&w.res)
	return n + w.policed()
}

// policed is how many frames the app side's policers freed in the last
// burst.
func (w *Worker) policed() int {
	if w.pol == nil {
		return 0
	}
	return w.pol.Policed()
}

// count adds a kernel side's Result to the counters and zeroes it for the
// next call. Most polls have nothing to add: one comparison then.
func (w *Worker) count(r *Result) {
	if *r == (Result{}) {
		return
	}
	for i, v := range r.Drops {
		if v != 0 {
			w.counters.Drops[i].Add(v)
		}
	}
	w.counters.Offload.add(&r.Offload)
	*r = Result{}
}

// grow makes room for bursts of n packets from the app. It allocates only
// when a burst is larger than any before (in.Cap() at first).
func (w *Worker) grow(n int) {
	if n <= len(w.pkts) {
		return
	}
	w.pkts = make([]Packet, n)
	w.idx = make([]int, n)
	w.written = make([]bool, n)
}

package policy

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pipeWaiter returns a waiter on a pipe's read end, and the write end.
func pipeWaiter(tb testing.TB) (*Waiter, int) {
	r, w, err := pipe()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { closeAll([]int{r, w}) })
	wt, err := NewWaiter(r)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { wt.Close() })
	return wt, w
}

// prepareThread prepares the test's thread as a worker's, until the test
// ends, and GOMAXPROCS goes back to what it was.
func prepareThread(tb testing.TB) {
	procs := runtime.GOMAXPROCS(0)
	tb.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	if err := PrepareThread(-1); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ReleaseThread)
}

// signalWhile sends SIGURG (the runtime's preemption signal, which it
// ignores when it did not ask) to thread tid every 100 us until stop is
// closed, and returns how many it sent once it has stopped.
func signalWhile(tid int, stop <-chan struct{}) <-chan int {
	sent := make(chan int, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			default:
			}
			if unix.Tgkill(unix.Getpid(), tid, unix.SIGURG) == nil {
				n++
			}
			time.Sleep(100 * us)
		}
	}()
	return sent
}

// A park is a raw syscall: a signal ends it with EINTR, and Park goes on
// parking for the rest of its timeout instead of reporting a wakeup.
func TestSignalsDoNotEndAParkEarly(t *testing.T) {
	wt, w := pipeWaiter(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	stop := make(chan struct{})
	sent := signalWhile(unix.Gettid(), stop)
	woken, err := wt.Park(20 * time.Millisecond)
	close(stop)
	if n := <-sent; n == 0 {
		t.Skip("no signal was sent during the park")
	}
	if err != nil || woken {
		t.Fatalf("Park under signals with nothing to do: woken=%v err=%v, want its timeout", woken, err)
	}

	stop = make(chan struct{})
	sent = signalWhile(unix.Gettid(), stop)
	go func() {
		time.Sleep(5 * time.Millisecond)
		_, _ = writeByte(w)
	}()
	woken, err = wt.Park(time.Minute)
	close(stop)
	<-sent
	if err != nil || !woken {
		t.Fatalf("Park under signals, then a readable fd: woken=%v err=%v, want woken", woken, err)
	}
}

// The runtime does not see a park, so it cannot take the parked thread's P
// for a stop-the-world: it signals the thread, and Park yields. A
// collection in another goroutine finishes while the park lasts (its kick,
// sent only after the collections, is what ends the park).
func TestAStopTheWorldGetsThroughAPark(t *testing.T) {
	wt, _ := pipeWaiter(t)
	prepareThread(t)
	go func() {
		for range 20 {
			runtime.GC()
		}
		wt.Kick()
	}()
	if woken, err := wt.Park(time.Hour); err != nil || !woken {
		t.Fatalf("Park: woken=%v err=%v, want the kick after the collections", woken, err)
	}
}

// A prepared thread keeps its P while it parks: PrepareThread raises
// GOMAXPROCS so that the rest of the program keeps one, even in a process
// pinned to one CPU (GOMAXPROCS 1), and ReleaseThread gives the count back.
func TestPrepareThreadLeavesTheProgramAP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	prepared.Lock()
	base := prepared.n
	prepared.Unlock()
	const threads = 3
	var ready, release sync.WaitGroup
	ready.Add(threads)
	release.Add(1)
	errs := make(chan error, threads)
	for range threads {
		go func() {
			defer ReleaseThread()
			errs <- PrepareThread(-1)
			ready.Done()
			release.Wait()
		}()
	}
	ready.Wait()
	for range threads {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	prepared.Lock()
	n := prepared.n
	prepared.Unlock()
	if got := runtime.GOMAXPROCS(0); n != base+threads || got <= n {
		t.Errorf("%d threads prepared: count %d, GOMAXPROCS %d, want the count %d and GOMAXPROCS above it", threads, n, got, base+threads)
	}
	release.Done()
	for {
		prepared.Lock()
		n = prepared.n
		prepared.Unlock()
		if n == base {
			break
		}
		runtime.Gosched()
	}
}

// threadSwitches sums the context switches of the process's threads, as
// /proc counts them.
func threadSwitches(b *testing.B) int {
	paths, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that exited
		}
		for line := range strings.Lines(string(data)) {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasSuffix(f[0], "ctxt_switches:") {
				v, _ := strconv.Atoi(f[1])
				n += v
			}
		}
	}
	return n
}

// What the runtime adds to a worker's parks: a prepared thread parks for
// 100 us (a timeout: nothing wakes it), then works for 20 us (a spin), over
// and over; the metric is the context switches of all of the process's
// threads per park. The park itself is one. Run it pinned to one CPU, as
// the bed runs kbridge (taskset -c 0 go test -run '^$' -bench
// ParkContextSwitches ./policy).
func BenchmarkParkContextSwitches(b *testing.B) {
	wt, _ := pipeWaiter(b)
	prepareThread(b)
	before := threadSwitches(b)
	b.ResetTimer()
	for range b.N {
		if _, err := wt.Park(100 * us); err != nil {
			b.Fatal(err)
		}
		for start := time.Now(); time.Since(start) < 20*us; {
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(threadSwitches(b)-before)/float64(b.N), "switches/park")
}

// A park that outlasts RawPark goes on in a syscall the runtime sees (an
// idle worker's); a short one, as under traffic, stays raw.
func TestOnlyALongParkGoesOnWhereTheRuntimeSeesIt(t *testing.T) {
	wt, w := pipeWaiter(t)
	prepareThread(t)
	if woken, err := wt.Park(RawPark / 4); err != nil || woken {
		t.Fatalf("short Park: woken=%v err=%v, want its timeout", woken, err)
	}
	if n := wt.VisibleParks(); n != 0 {
		t.Fatalf("a park of %v went on visibly (%d), want it raw throughout", RawPark/4, n)
	}
	go func() {
		time.Sleep(4 * RawPark)
		_, _ = writeByte(w)
	}()
	if woken, err := wt.Park(time.Minute); err != nil || !woken {
		t.Fatalf("long Park, then a readable fd: woken=%v err=%v, want woken", woken, err)
	}
	if n := wt.VisibleParks(); n != 1 {
		t.Fatalf("a park woken after %v: %d visible parks, want 1", 4*RawPark, n)
	}
}

// The part of a park past RawPark waits in the runtime's netpoller: a
// kick ends it, its timeout ends it no earlier than asked, and it allocates
// nothing.
func TestAnIdleParkWakesOnAKickTimesOutAndDoesNotAllocate(t *testing.T) {
	wt, _ := pipeWaiter(t)
	prepareThread(t)
	go func() {
		time.Sleep(4 * RawPark)
		wt.Kick()
	}()
	if woken, err := wt.Park(time.Minute); err != nil || !woken {
		t.Fatalf("long Park, then a kick: woken=%v err=%v, want woken", woken, err)
	}
	start := time.Now()
	if woken, err := wt.Park(3 * RawPark); err != nil || woken {
		t.Fatalf("Park of %v with nothing to do: woken=%v err=%v, want its timeout", 3*RawPark, woken, err)
	}
	if took := time.Since(start); took < 3*RawPark {
		t.Errorf("Park of %v returned after %v", 3*RawPark, took)
	}
	if n := wt.VisibleParks(); n != 2 {
		t.Errorf("%d parks went on in the netpoller, want 2", n)
	}
	if a := testing.AllocsPerRun(100, func() {
		wt.Kick()
		// ParkIdle: straight to the netpoller, where the kick is found.
		if woken, err := wt.ParkIdle(time.Minute); err != nil || !woken {
			t.Fatalf("ParkIdle after a kick: woken=%v err=%v", woken, err)
		}
	}); a != 0 {
		t.Errorf("an idle park allocates %v times, want 0", a)
	}
	if n := wt.VisibleParks(); n < 2+100 {
		t.Errorf("%d parks went on in the netpoller after ParkIdle's, want every one", n)
	}
}

// idleParkTimeout is the timeout BenchmarkIdleWorkers parks for (its idle
// ports aside): the default policy.park_timeout.
var idleParkTimeout = Default().ParkTimeout

// What idle workers cost: prepared threads park for their whole timeout
// while nothing happens; the metrics are the context switches of all of
// the process's threads and the process's CPU time per second, for parks
// as built (raw for RawPark, then in the netpoller) and, as baselines in
// the same run, no workers at all and parks that stay raw throughout
// (sysmon preempts each of those every 10 ms); and 64 workers as a port
// set's idle ports park (ParkIdle, IdleParkMax). Run it pinned to one CPU:
// taskset -c 0 go test -run '^$' -bench IdleWorkers ./policy.

func BenchmarkIdleWorkers(b *testing.B) {
	for _, c := range []struct {
		name    string
		raw     time.Duration
		n       int
		timeout time.Duration
		idle    bool // ParkIdle
	}{
		{"none", RawPark, 0, idleParkTimeout, false},
		{"raw-throughout", time.Hour, 16, idleParkTimeout, false},
		{"as-built", RawPark, 16, idleParkTimeout, false},
		{"64-idle-ports", RawPark, 64, IdleParkMax, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			defer func(old time.Duration) { rawPark = old }(rawPark)
			rawPark = c.raw
			workers := c.n
			var wg sync.WaitGroup
			stop := make(chan struct{})
			started := make(chan struct{}, workers)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					wt, _ := pipeWaiter(b)
					if err := PrepareThread(-1); err != nil {
						b.Error(err)
					}
					defer ReleaseThread()
					started <- struct{}{}
					for {
						select {
						case <-stop:
							return
						default:
						}
						park := wt.Park
						if c.idle {
							park = wt.ParkIdle
						}
						if _, err := park(c.timeout); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			for range workers {
				<-started
			}
			time.Sleep(200 * time.Millisecond) // past the first parks' raw part
			var ru0, ru1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
			sw0, t0 := threadSwitches(b), time.Now()
			b.ResetTimer()
			for range b.N {
				time.Sleep(100 * time.Millisecond)
			}
			b.StopTimer()
			secs := time.Since(t0).Seconds()
			sw1 := threadSwitches(b)
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
			cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(sw1-sw0)/secs, "switches/s")
			b.ReportMetric(100*cpu.Seconds()/secs, "%cpu")
		})
	}
}

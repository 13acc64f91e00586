package main

// The checks: kbridge's counters sampled into windows, the app pool's
// drift, and that kbridge and the app still run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

func (s *soak) loopSampler(ctx context.Context) {
	for ctx.Err() == nil {
		sleepCtx(ctx, 5*time.Second)
		s.sample()
	}
}

// kbridge's counters: sampled every 5 s and before every stop; deltas are
// added to the window current at the sample. A new kbridge (or app) pid
// means its counters started again from zero.

type counterAcc struct {
	mu     sync.Mutex
	kbPID  int
	appPID int
	prevKb map[string]uint64
	prevAp map[string]uint64
}

type statsJSON struct {
	AppPID    int `json:"app_pid"`
	PoolInUse int `json:"pool_in_use"` // mode vhost: kbridge's own pool
	Queues    []struct {
		Mode       string            `json:"mode"`
		ToKernel   uint64            `json:"to_kernel_packets"`
		FromKernel uint64            `json:"from_kernel_packets"`
		Drops      map[string]uint64 `json:"drops"`
		Timeouts   uint64            `json:"timeouts"`
		App        struct {
			Dropped uint64 `json:"to_kernel_dropped"`
		} `json:"app"`
	} `json:"queues"`
}

func (s *soak) stats() (statsJSON, error) {
	var st statsJSON
	out, err := harness.Output(context.Background(), 10*time.Second, nil, s.bin, "stats", "--socket", statsSock)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("kbridge stats JSON: %v", err)
	}
	if len(st.Queues) == 0 {
		return st, errors.New("kbridge stats: no queues")
	}
	return st, nil
}

func (s *soak) sample() {
	kbPID, _ := harness.ReadPID("kbridge")
	st, err := s.stats()
	if err != nil {
		return // kbridge restarting; the next sample catches up
	}
	kb, ap := map[string]uint64{}, map[string]uint64{}
	for _, q := range st.Queues {
		for r, v := range q.Drops {
			kb["drop:"+r] += v
		}
		kb["to_kernel"] += q.ToKernel
		kb["from_kernel"] += q.FromKernel
		kb["timeouts"] += q.Timeouts
		ap["app_to_kernel_dropped"] += q.App.Dropped
	}
	a := &s.acc
	a.mu.Lock()
	dKb := deltas(a.prevKb, kb, a.kbPID == kbPID)
	dAp := deltas(a.prevAp, ap, a.appPID == st.AppPID)
	first := a.prevKb == nil
	a.prevKb, a.prevAp, a.kbPID, a.appPID = kb, ap, kbPID, st.AppPID
	a.mu.Unlock()
	if first {
		return
	}
	s.record(func(w *window) {
		for k, v := range dKb {
			switch {
			case strings.HasPrefix(k, "drop:"):
				w.drops[strings.TrimPrefix(k, "drop:")] += v
			case k == "to_kernel":
				w.toKernel += v
			case k == "from_kernel":
				w.fromKernel += v
			case k == "timeouts":
				w.timeouts += v
			}
		}
		w.appDropped += dAp["app_to_kernel_dropped"]
	})
}

// deltas returns cur - prev per key; when the process is new (same false)
// or a counter went backwards, cur counts whole.
func deltas(prev, cur map[string]uint64, same bool) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range cur {
		p, ok := prev[k]
		switch {
		case prev == nil:
			d[k] = 0
		case !same || !ok || v < p:
			d[k] = v
		default:
			d[k] = v - p
		}
	}
	return d
}

// The app pool's drift.

// poolReading asks the app (SIGUSR1) for in_rings and pool_in_use; in mode
// vhost it reads kbridge's own pool (nothing of it sits in a ring).
func (s *soak) poolReading() (inUse, inRings int, err error) {
	if s.side.mode == "vhost" {
		st, err := s.stats()
		return st.PoolInUse, 0, err
	}
	pid, err := harness.ReadPID("refapp")
	if err != nil {
		return 0, 0, err
	}
	logPath := filepath.Join(runDir, "refapp.log")
	off := fileSize(logPath)
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return 0, 0, fmt.Errorf("SIGUSR1 to the app (pid %d): %v", pid, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if u, r, ok := parseRefappStats(readFrom(logPath, off)); ok {
			return u, r, nil
		}
	}
	return 0, 0, fmt.Errorf("the app (pid %d) printed no stats line within 5s of SIGUSR1", pid)
}

// quietDrift quiesces the workloads, waits a moment and returns the
// smallest (in use - in rings) of three readings a second apart: what is
// held for good, not what is in flight.
func (s *soak) quietDrift() (int, error) {
	s.gate.Lock()
	defer s.gate.Unlock()
	time.Sleep(2 * time.Second)
	best, have := 0, false
	var lastErr error
	for i := 0; i < 3; i++ {
		u, r, err := s.poolReading()
		if err != nil {
			lastErr = err
		} else if d := u - r; !have || d < best {
			best, have = d, true
			s.record(func(w *window) { w.inUse, w.inRings = u, r })
		}
		if i < 2 {
			time.Sleep(time.Second)
		}
	}
	if !have {
		return 0, lastErr
	}
	return best, nil
}

// closeWindow measures the drift at the end of the window and prints its
// line.
func (s *soak) closeWindow(idx int, final bool) {
	s.sample()
	s.mu.Lock()
	w := s.windowLocked(idx)
	s.mu.Unlock()
	d, err := s.quietDrift()
	if err != nil {
		s.fail("pool drift at the end of window %d: %v", w.idx+1, err)
	} else {
		drift := d - s.baseline
		s.mu.Lock()
		w.drift = &drift
		s.mu.Unlock()
		if drift > 0 {
			s.fail("mbuf leak: %s has %d more mbufs in use than at the baseline", s.side.poolOwner(), drift)
		}
	}
	s.sample()
	s.mu.Lock()
	if final {
		w.to = min(time.Since(s.started), w.to)
	}
	line := w.row()
	s.mu.Unlock()
	if !final {
		fmt.Println(line)
	}
	logf("window %d: %s", w.idx+1, line)
}

// checkAlive notices a kbridge or app that died outside the schedule,
// counts it as a failure and restarts it (as systemd would).
func (s *soak) checkAlive() {
	kb, err1 := harness.ReadPID("kbridge")
	ap, err2 := harness.ReadPID(s.side.name)
	if err1 == nil && err2 == nil && harness.Alive(kb) && harness.Alive(ap) {
		return
	}
	if err2 != nil || !harness.Alive(ap) {
		s.fail("the app (pid %d) died outside the schedule (see %s/%s.log)", ap, runDir, s.side.name)
		if _, err := s.startApp(); err != nil {
			s.fail("restarting the app: %v", err)
		}
		time.Sleep(5 * time.Second)
	} else {
		s.fail("kbridge (pid %d) died outside the schedule (see %s/kbridge.log)", kb, runDir)
	}
	if kb, err := harness.ReadPID("kbridge"); err != nil || !harness.Alive(kb) {
		npid, err := s.startKbridge()
		if err == nil {
			err = s.waitServing(npid, 40*time.Second)
		}
		if err != nil {
			s.fail("restarting kbridge: %v", err)
		}
	}
}

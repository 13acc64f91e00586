package main

// The workloads: NFS listings and big.bin reads, iperf3 both ways and
// sockperf ping-pong, each in a loop until the soak ends. Each holds the
// gate shared for one iteration, so that quiesce waits for running
// iterations and starts no new one.

import (
	"context"
	"fmt"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

func (s *soak) loop(ctx context.Context, pause time.Duration, f func(context.Context)) {
	for ctx.Err() == nil {
		s.gate.RLock()
		if ctx.Err() == nil {
			f(ctx)
		}
		s.gate.RUnlock()
		sleepCtx(ctx, pause)
	}
}

func (s *soak) loopNFS(ctx context.Context) {
	url := fmt.Sprintf("nfs://%s/export?version=4", peerIP)
	s.loop(ctx, time.Second, func(ctx context.Context) {
		t0 := time.Now()
		cmd := s.pin("nfs-ls", "-R", url)
		out, err := harness.Output(ctx, 3*time.Minute, nil, cmd[0], cmd[1:]...)
		sec := time.Since(t0).Seconds()
		if ctx.Err() != nil {
			return
		}
		n := countLines(out)
		s.record(func(w *window) {
			if err == nil && n == nfsEntries {
				w.nfsOK++
				w.nfsSec = append(w.nfsSec, sec)
				return
			}
			w.nfsFail++
			w.nfsErrs = append(w.nfsErrs, fmt.Sprintf("+%v: %d entries, %v", time.Since(s.started).Round(time.Second), n, err))
		})
	})
}

func (s *soak) loopRead(ctx context.Context) {
	url := fmt.Sprintf("nfs://%s/export/big.bin?version=4", peerIP)
	s.loop(ctx, time.Second, func(ctx context.Context) {
		t0 := time.Now()
		sum, n, err := hashCmd(ctx, 3*time.Minute, s.pin("nfs-cat", url)...)
		sec := time.Since(t0).Seconds()
		if ctx.Err() != nil {
			return
		}
		at := time.Since(s.started).Round(time.Second)
		switch {
		case err != nil:
			s.record(func(w *window) {
				w.readFail++
				w.readErrs = append(w.readErrs, fmt.Sprintf("+%v: %d bytes, %v", at, n, err))
			})
		case n != bigBytes || sum != s.wantSHA:
			// nfs-cat said it succeeded: what it returned is wrong.
			s.record(func(w *window) { w.readMismatch++ })
			s.fail("big.bin read at +%v: %d bytes, sha256 %s, want %d bytes, %s", at, n, sum, bigBytes, s.wantSHA)
		default:
			s.record(func(w *window) {
				w.readOK++
				w.readMBs = append(w.readMBs, float64(n)/1e6/sec)
			})
		}
	})
}

func (s *soak) loopIperf(ctx context.Context) {
	reverse := false
	s.loop(ctx, time.Second, func(ctx context.Context) {
		args := []string{"iperf3", "-c", peerIP, "-p", "5201", "-J", "--connect-timeout", "5000", "-t", "5"}
		if reverse {
			args = append(args, "-R")
		}
		rev := reverse
		reverse = !reverse
		cmd := s.pin(args...)
		out, err := harness.Output(ctx, time.Minute, nil, cmd[0], cmd[1:]...)
		if ctx.Err() != nil {
			return
		}
		var g float64
		if err == nil {
			g, err = harness.Iperf3Gbps(out)
		}
		s.record(func(w *window) {
			switch {
			case err != nil:
				w.iperfFail++
				w.iperfErrs = append(w.iperfErrs, fmt.Sprintf("+%v: %v", time.Since(s.started).Round(time.Second), err))
			case rev:
				w.down = append(w.down, g)
			default:
				w.up = append(w.up, g)
			}
		})
	})
}

func (s *soak) loopPingPong(ctx context.Context) {
	s.loop(ctx, time.Second, func(ctx context.Context) {
		cmd := s.pin("sockperf", "pp", "--tcp", "-i", peerIP, "-p", "11111", "-t", "5")
		out, err := harness.Output(ctx, time.Minute, nil, cmd[0], cmd[1:]...)
		if ctx.Err() != nil {
			return
		}
		var p50, p99 float64
		if err == nil {
			p50, p99, err = parseSockperf(string(out))
		}
		s.record(func(w *window) {
			if err != nil {
				w.ppFail++
				w.ppErrs = append(w.ppErrs, fmt.Sprintf("+%v: %v", time.Since(s.started).Round(time.Second), err))
				return
			}
			w.p50 = append(w.p50, p50)
			w.p99 = append(w.p99, p99)
		})
	})
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/doctor"
	"github.com/kbridge/kbridge/policy"
)

func doctorCmd(args []string) error {
	fset := flag.NewFlagSet("doctor", flag.ContinueOnError)
	src := addConfigSource(fset, "kbridge configuration (used if it exists)")
	root := fset.String("root", "/", "read /proc and /sys under this `dir` (fixture trees)")
	jsonOut := fset.Bool("json", false, "print JSON for machines")
	fix := fset.Bool("fix", false, "apply the suggested IRQ affinity")
	nic := fset.String("nic", "", "kernel `netdev` of the NIC, for IRQ and XDP checks")
	lcores := fset.String("app-lcores", "", "the DPDK app's lcore `cpus` (default: read from the running app)")
	probe := fset.Duration("probe-wakeup", doctor.DefaultWakeupProbe, "measure what waking a parked worker costs, spending at most this `duration` (0: skip)")
	coppWindow := fset.Duration("copp-window", doctor.DefaultCoPPWindow, "read the running kbridge's policed counters this `duration` apart (0: skip)")
	if err := fset.Parse(args); err != nil {
		return usageError{err}
	}
	cfg, err := src.defaults()
	if err != nil {
		return usageError{err}
	}
	if c, err := src.load(); err == nil {
		cfg = c
	} else if !errors.Is(err, fs.ErrNotExist) {
		return usageError{err}
	}
	opts := doctor.Options{
		Root:        *root,
		FilePrefix:  cfg.DPDK.FilePrefix,
		WorkerCPUs:  cfg.WorkerCPUs(),
		Interface:   cfg.Interface.Name,
		NIC:         *nic,
		PolicyMode:  string(cfg.Policy.Mode),
		Learn:       cfg.Policy.Learn,
		WakeupProbe: *probe,
		CoPPRates:   cfg.CoPP.Rates(),
		CoPPWindow:  *coppWindow,
	}
	if *coppWindow > 0 && *root == "/" {
		opts.CoPP = socketCoPP(cfg.Stats.Socket)
		opts.Sockets = socketCoPP(cfg.Stats.Socket)
	}
	if cfg.Policy.Mode == policy.Fixed {
		opts.FixedInterval = cfg.Policy.Interval
	}
	if *lcores != "" {
		for _, f := range strings.Split(*lcores, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return usageError{fmt.Errorf("--app-lcores %q: want a comma-separated list of CPUs", *lcores)}
			}
			opts.AppLcores = append(opts.AppLcores, n)
		}
	}
	if *fix {
		changes, err := doctor.FixIRQ(opts)
		for _, c := range changes {
			fmt.Printf("IRQ %d (%s): %s -> %s\n", c.IRQ, c.Name, c.Old, c.New)
		}
		if err != nil {
			return err
		}
		if len(changes) == 0 {
			fmt.Println("kbridge doctor: IRQ affinity needs no change")
		}
	}
	results := doctor.Run(context.Background(), opts)
	if err := doctor.Render(os.Stdout, results, *jsonOut); err != nil {
		return err
	}
	if code := doctor.ExitCode(results); code != 0 {
		os.Exit(code)
	}
	return nil
}

// socketCoPP reads the policed counters from the status a kbridge serves on
// its control socket.
type socketCoPP string

// Policed implements doctor.CoPPReader.
func (s socketCoPP) Policed(ctx context.Context) ([copp.NumClasses]uint64, error) {
	raw, err := s.status(ctx)
	if err != nil {
		return [copp.NumClasses]uint64{}, err
	}
	return policedInStatus(raw)
}

// status reads the status document; doctor.ErrNoInstance when no kbridge
// answers.
func (s socketCoPP) status(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	raw, err := daemon.ReadStatusRaw(string(s))
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%w on %s", doctor.ErrNoInstance, string(s))
	}
	return raw, err
}

// Sockets implements doctor.SocketsReader.
func (s socketCoPP) Sockets(ctx context.Context) (doctor.SocketsState, error) {
	raw, err := s.status(ctx)
	if err != nil {
		return doctor.SocketsState{}, err
	}
	return socketsInStatus(raw)
}

// socketsInStatus reads a status document's sockets state and sums its
// queues' unwanted counters; doctor.ErrCoPPOff without a sockets state.
func socketsInStatus(raw []byte) (doctor.SocketsState, error) {
	var out doctor.SocketsState
	var st struct {
		Sockets *struct {
			TCP string `json:"tcp"`
			UDP string `json:"udp"`
		} `json:"sockets"`
		Queues []struct {
			CoPP *struct {
				Unwanted [copp.NumUnwantedWhys]uint64 `json:"unwanted"`
			} `json:"copp"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return out, fmt.Errorf("status: %w", err)
	}
	if st.Sockets == nil {
		return out, doctor.ErrCoPPOff
	}
	out.TCP, out.UDP = st.Sockets.TCP, st.Sockets.UDP
	for _, q := range st.Queues {
		if q.CoPP == nil {
			continue
		}
		for k, n := range q.CoPP.Unwanted {
			out.Unwanted[k] += n
		}
	}
	return out, nil
}

// policedInStatus sums a status document's policed counters over its
// queues, whatever its mode; doctor.ErrCoPPOff when no queue has any.
func policedInStatus(raw []byte) ([copp.NumClasses]uint64, error) {
	var sum [copp.NumClasses]uint64
	var st struct {
		Queues []struct {
			CoPP *struct {
				Policed [copp.NumClasses]uint64 `json:"policed"`
			} `json:"copp"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return sum, fmt.Errorf("status: %w", err)
	}
	on := false
	for _, q := range st.Queues {
		if q.CoPP == nil {
			continue
		}
		on = true
		for c, n := range q.CoPP.Policed {
			sum[c] += n
		}
	}
	if !on {
		return sum, doctor.ErrCoPPOff
	}
	return sum, nil
}

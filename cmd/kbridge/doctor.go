package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/doctor"
	"github.com/kbridge/kbridge/policy"
)

func doctorCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check the host: hugepages, CPUs, IRQs, timer, wakeup cost, ENA, XDP, CoPP",
		Long: `Check the host for kbridge: ENA write-combining and LLQ headers, the kernel
timer against the polling policy, hugepages, hugetlbfs and the DPDK runtime
directory, worker CPUs against the app's lcores and CPU isolation, what waking
a parked worker costs here and why, NIC IRQ affinity, XDP programs, and the
CoPP class a running kbridge polices now. Each check prints its evidence and a
one-line fix. Exit status 1 when a check failed (warnings are advice).
--fix applies the suggested IRQ affinity. The checks: docs/DOCTOR.md.`,
		Example: `  kbridge doctor
  kbridge doctor --nic eth1 --fix
  kbridge doctor --json --probe-wakeup 0`,
	}
	fl := c.Flags()
	src := addConfigSource(fl)
	var o doctorFlags
	o.root = fl.String("root", "/", "read /proc and /sys under this `dir` (fixture trees)")
	o.json = fl.Bool("json", false, "print JSON for machines")
	o.fix = fl.Bool("fix", false, "apply the suggested IRQ affinity")
	o.nic = fl.String("nic", "", "the NIC's kernel `netdev`, for the IRQ and XDP checks")
	o.lcores = fl.String("app-lcores", "", "the DPDK app's lcore `cpus`, comma-separated (default: read from the running app)")
	o.probe = addDuration(fl, "probe-wakeup", doctor.DefaultWakeupProbe, "measure what waking a parked worker costs, spending at most this long (0: skip)")
	o.coppWindow = addDuration(fl, "copp-window", doctor.DefaultCoPPWindow, "read the running kbridge's policed counters this far apart (0: skip)")
	c.RunE = func(c *cobra.Command, _ []string) error { return doctorCmd(src, o, c.OutOrStdout()) }
	return c
}

// doctorFlags are kbridge doctor's flags beside the configuration's.
type doctorFlags struct {
	root, nic, lcores *string
	json, fix         *bool
	probe, coppWindow *time.Duration
}

func doctorCmd(src configSource, f doctorFlags, stdout io.Writer) error {
	root, nic, lcores, jsonOut, fix, probe, coppWindow := f.root, f.nic, f.lcores, f.json, f.fix, f.probe, f.coppWindow
	cfg, _, err := src.load()
	if err != nil {
		return usageError{err}
	}
	opts := doctor.Options{
		Root:        *root,
		FilePrefix:  cfg.DPDK.FilePrefix,
		RuntimeDir:  cfg.DPDK.RuntimeDir,
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
			fmt.Fprintf(stdout, "IRQ %d (%s): %s -> %s\n", c.IRQ, c.Name, c.Old, c.New)
		}
		if err != nil {
			return err
		}
		if len(changes) == 0 {
			fmt.Fprintln(stdout, "kbridge doctor: IRQ affinity needs no change")
		}
	}
	results := doctor.Run(context.Background(), opts)
	if err := doctor.Render(stdout, results, *jsonOut); err != nil {
		return err
	}
	if code := doctor.ExitCode(results); code != 0 {
		return exitError{code}
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

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

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

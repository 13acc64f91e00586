package ring

// Starting DPDK's EAL for either app side, once per process, with one
// placement of threads: ring mode joins the app's EAL as a secondary
// (InitSecondary), mode vhost runs kbridge's own primary (InitVhostEAL),
// and both start it here.
//
// rte_eal_init pins its calling thread to the main lcore's CPU, and threads
// created from it inherit that mask. startEAL therefore runs it on a locked
// OS thread that restores its CPU mask and then exits, so the Go runtime
// never schedules a goroutine on a thread DPDK considers its main lcore.
// EAL puts its own threads (interrupts, multi-process IPC) on every CPU
// that is not one of this process's lcores, which can be the app's busy
// lcores; startEAL moves them to the CPUs it is given.

/*
#include <stdlib.h>
#include "eal.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrStarted means the EAL of this process was started already: DPDK
// starts it once.
var ErrStarted = errors.New("EAL already initialised")

// ealConfig says how to start the EAL.
type ealConfig struct {
	// CPU is the CPU the EAL main lcore is bound to while EAL starts.
	CPU int
	// ControlCPUs are the CPUs for EAL's own threads; empty leaves them
	// where EAL put them.
	ControlCPUs []int
	// Args are the mode's arguments (--proc-type, --file-prefix, ...) and
	// then the configuration's extra ones (for example --log-level=...).
	Args []string
}

// ealArgs returns what startEAL passes to rte_eal_init: kbridge's own
// arguments (no PCI probing, no telemetry, main lcore 0 on cfg.CPU), then
// cfg.Args.
func ealArgs(cfg ealConfig) []string {
	args := []string{"kbridge", "--no-pci", "--no-telemetry", fmt.Sprintf("--lcores=0@%d", cfg.CPU)}
	return append(args, cfg.Args...)
}

var ealState struct {
	sync.Mutex
	done bool
}

// startEAL runs rte_eal_init with ealArgs(cfg) and moves EAL's own threads
// to cfg.ControlCPUs. It may succeed once per process.
func startEAL(cfg ealConfig) error {
	ealState.Lock()
	defer ealState.Unlock()
	if ealState.done {
		return ErrStarted
	}
	args := ealArgs(cfg)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked on purpose: this thread exits with the goroutine.
		var mask unix.CPUSet
		if err := unix.SchedGetaffinity(0, &mask); err != nil {
			errc <- fmt.Errorf("read CPU mask: %w", err)
			return
		}
		errc <- initArgs(args)
		_ = unix.SchedSetaffinity(0, &mask)
	}()
	if err := <-errc; err != nil {
		return err
	}
	ealState.done = true
	if len(cfg.ControlCPUs) > 0 {
		return pinControlThreads(cfg.ControlCPUs)
	}
	return nil
}

func initArgs(args []string) error {
	argv := make([]*C.char, len(args))
	for i, a := range args {
		argv[i] = C.CString(a)
	}
	// EAL keeps pointers into argv; these few bytes live for the process.
	cargv := (**C.char)(C.malloc(C.size_t(len(argv)) * C.size_t(unsafe.Sizeof(argv[0]))))
	copy(unsafe.Slice(cargv, len(argv)), argv)
	if rc := C.kb_eal_init(C.int(len(args)), cargv); rc < 0 {
		err := fmt.Errorf("rte_eal_init %q: %w", args, unix.Errno(-rc))
		if unix.Errno(-rc) == unix.ENOMEM && randomHeapBase {
			err = fmt.Errorf("%w (%s)", err, heapBaseHint)
		}
		return err
	}
	return nil
}

// heapBaseHint explains the one failure a build option causes: a secondary
// must map the primary's memory at the primary's addresses, and a Go heap
// placed at random may already sit there.
const heapBaseHint = "this kbridge was built with Go's randomized heap base, which can take " +
	"the addresses the app's DPDK memory must be mapped at: start it again, and build it " +
	"with GOEXPERIMENT=norandomizedheapbase64 as make does (docs/DPDK.md)"

// threads are the names DPDK gives the threads EAL starts itself: 22.11's,
// and from 23.11 on "dpdk-" and a short name (rte_thread_create_internal_control).
var ealThreads = map[string]bool{
	"eal-intr-thread": true, "rte_mp_handle": true, "telemetry-v2": true, // 22.11
	"dpdk-intr": true, "dpdk-mp-msg": true, "dpdk-telemet-v2": true, // 23.11, 24.11
}

// pinControlThreads moves EAL's own threads to cpus, away from the app's
// lcores, where an interrupt or IPC thread would wait for a busy poller.
func pinControlThreads(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("list threads: %w", err)
	}
	for _, t := range tasks {
		comm, err := os.ReadFile(filepath.Join("/proc/self/task", t.Name(), "comm"))
		if err != nil || !ealThreads[strings.TrimSpace(string(comm))] {
			continue
		}
		tid, _ := strconv.Atoi(t.Name())
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pin EAL thread %s to CPUs %v: %w", strings.TrimSpace(string(comm)), cpus, err)
		}
	}
	return nil
}

// Package ring binds the parts of DPDK (22.11, 24.11: docs/DPDK.md) that kbridge
// needs as a secondary process: EAL start-up, the exception port an app
// created with include/kbridge.h, and burst moves between its rings and Go.
// eal.go joins the app's DPDK instance (InitSecondary, PrimaryAlive), keeping
// EAL's threads off the app's lcores. port.go (over port.c) finds the port
// (OpenPort checks the control block's magic, version 1 to 3, and length),
// reports the app's mempool and TSO declaration, and gives each Queue the
// worker's half of the need-wakeup handshake (PrepareToPark: flag, full
// fence and ring re-check in one C call; RegisterEventfd over DPDK's
// multi-process IPC) and the app's counters. burst.go (over burst.c) moves
// packets: Out implements bridge.AppOut and In implements bridge.AppIn and
// bridge.AppTSO, each with preallocated C burst buffers, and the
// residence-time histogram lives there too. version.go refuses, before EAL
// starts, an app running another DPDK than kbridge was built with.
//
// Every function that touches packets crosses cgo once per burst; the
// per-packet work happens in burst.c. Mbuf ownership and the handshake's
// fences are in docs/ARCHITECTURE.md, "The data path and its contracts".
package ring

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wno-deprecated-declarations -I${SRCDIR}/../internal/mbuf
#include <stdlib.h>
#include "port.h"
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

// DefaultRuntimeDir is where a DPDK process running as root keeps the
// state of each file prefix, unless RUNTIME_DIRECTORY says otherwise.
const DefaultRuntimeDir = "/var/run/dpdk"

// ErrNoPrimary means no DPDK primary process with the given file prefix runs.
var ErrNoPrimary = errors.New("ring: no DPDK primary process is running")

// EALConfig says how to join the app's DPDK instance.
type EALConfig struct {
	// FilePrefix is the app's --file-prefix.
	FilePrefix string
	// RuntimeDir is the app's DPDK runtime directory, holding
	// FilePrefix/config; it must end in "/dpdk". Empty: DefaultRuntimeDir.
	RuntimeDir string
	// CPU is the CPU the EAL main lcore is bound to while EAL starts.
	CPU int
	// ControlCPUs are the CPUs for DPDK's own threads (interrupts, IPC).
	// EAL puts them on every CPU that is not an lcore of this process,
	// which in a secondary means the app's busy lcores; empty leaves them.
	ControlCPUs []int
	// Args are extra EAL arguments (for example --log-level=...).
	Args []string
}

var eal struct {
	sync.Mutex
	done bool
}

// InitSecondary starts the EAL as a secondary process of the primary that
// runs with cfg.FilePrefix. It may be called once per process.
//
// rte_eal_init pins its calling thread to the main lcore's CPU, and threads
// created from it inherit that mask. It therefore runs on a locked OS thread
// that restores its CPU mask and then exits, so the Go runtime never
// schedules a worker on a thread DPDK considers its main lcore.
func InitSecondary(cfg EALConfig) error {
	eal.Lock()
	defer eal.Unlock()
	if eal.done {
		return errors.New("ring: EAL already initialised")
	}
	if cfg.FilePrefix == "" {
		return errors.New("ring: empty DPDK file prefix")
	}
	if cfg.RuntimeDir == "" {
		cfg.RuntimeDir = DefaultRuntimeDir
	}
	if err := PrimaryAlive(cfg.RuntimeDir, cfg.FilePrefix); err != nil {
		return err
	}
	// EAL derives its runtime directory from RUNTIME_DIRECTORY (plus
	// "/dpdk"). systemd sets that variable to the unit's own runtime
	// directories, which are not the primary's: a secondary must use
	// exactly the primary's, so say it.
	if err := os.Setenv("RUNTIME_DIRECTORY", filepath.Dir(cfg.RuntimeDir)); err != nil {
		return fmt.Errorf("ring: %w", err)
	}
	args := []string{"kbridge",
		"--proc-type=secondary",
		"--file-prefix=" + cfg.FilePrefix,
		"--no-pci",
		"--no-telemetry",
		fmt.Sprintf("--lcores=0@%d", cfg.CPU),
	}
	args = append(args, cfg.Args...)

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked on purpose: this thread exits with the goroutine.
		var mask unix.CPUSet
		if err := unix.SchedGetaffinity(0, &mask); err != nil {
			errc <- fmt.Errorf("ring: read CPU mask: %w", err)
			return
		}
		errc <- ealInit(args)
		_ = unix.SchedSetaffinity(0, &mask)
	}()
	if err := <-errc; err != nil {
		return err
	}
	eal.done = true
	if len(cfg.ControlCPUs) > 0 {
		if err := pinControlThreads(cfg.ControlCPUs); err != nil {
			return err
		}
	}
	return nil
}

// ealThreads are the names DPDK gives the threads it starts itself: 22.11's,
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
		return fmt.Errorf("ring: list threads: %w", err)
	}
	for _, t := range tasks {
		comm, err := os.ReadFile(filepath.Join("/proc/self/task", t.Name(), "comm"))
		if err != nil || !ealThreads[strings.TrimSpace(string(comm))] {
			continue
		}
		tid, _ := strconv.Atoi(t.Name())
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("ring: pin EAL thread %s to CPUs %v: %w", strings.TrimSpace(string(comm)), cpus, err)
		}
	}
	return nil
}

func ealInit(args []string) error {
	argv := make([]*C.char, len(args))
	for i, a := range args {
		argv[i] = C.CString(a)
	}
	// EAL keeps pointers into argv; these few bytes live for the process.
	cargv := (**C.char)(C.malloc(C.size_t(len(argv)) * C.size_t(unsafe.Sizeof(argv[0]))))
	copy(unsafe.Slice(cargv, len(argv)), argv)
	if rc := C.kb_eal_init(C.int(len(args)), cargv); rc < 0 {
		return fmt.Errorf("ring: rte_eal_init %q: %w", args, unix.Errno(-rc))
	}
	return nil
}

// PrimaryAlive reports ErrNoPrimary, with what to start, when no primary with
// that file prefix holds its configuration lock in runtimeDir.
func PrimaryAlive(runtimeDir, prefix string) error {
	path := filepath.Join(runtimeDir, prefix, "config")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w with --file-prefix=%s (%s: %v): start the DPDK application first",
			ErrNoPrimary, prefix, path, errors.Unwrap(err))
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if C.rte_eal_primary_proc_alive(cpath) == 0 {
		return fmt.Errorf("%w with --file-prefix=%s (%s exists but no process holds it: the app exited, or is still starting): start the DPDK application first",
			ErrNoPrimary, prefix, path)
	}
	return nil
}

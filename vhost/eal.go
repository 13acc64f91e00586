// Package vhost makes kbridge a vhost-user backend (DPDK's librte_vhost) for
// an unmodified DPDK app that adds one virtio-user port:
//
//	--vdev net_virtio_user0,path=/run/kbridge/kb0.sock,queues=1
//
// kbridge runs its own EAL as a primary (no shared hugepages with the app:
// vhost-user shares the app's memory through the memory table's fds), its
// own mbuf pool, and one app side per queue pair: Out dequeues what the app
// sends from the guest's TX vring, In enqueues the kernel's frames into the
// guest's RX vring, and Waker arms the vring's kick eventfd when the worker
// parks. As in package ring, every burst is one cgo call.
package vhost

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wno-deprecated-declarations -I${SRCDIR}/../internal/burst
#include <stdlib.h>
#include "vhost.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EALConfig says how kbridge starts its own DPDK instance.
type EALConfig struct {
	// CPU is the CPU the EAL main lcore is bound to while EAL starts.
	CPU int
	// Args are extra EAL arguments; by default kbridge runs --in-memory.
	Args []string
}

var eal struct {
	sync.Mutex
	done bool
}

// EALArgs returns the EAL arguments kbridge starts with.
func EALArgs(cfg EALConfig) []string {
	args := []string{"kbridge", "--proc-type=primary", "--no-pci", "--no-telemetry",
		fmt.Sprintf("--lcores=0@%d", cfg.CPU)}
	own := false
	for _, a := range cfg.Args {
		if a == "--in-memory" || a == "--file-prefix" || len(a) > 14 && a[:14] == "--file-prefix=" {
			own = true
		}
	}
	if !own {
		args = append(args, "--in-memory")
	}
	return append(args, cfg.Args...)
}

// InitEAL starts the EAL as kbridge's own primary. It may be called once per
// process. As ring.InitSecondary, it runs on a locked OS thread that restores
// its CPU mask and exits, so that no Go code runs on what DPDK considers its
// main lcore.
func InitEAL(cfg EALConfig) error {
	eal.Lock()
	defer eal.Unlock()
	if eal.done {
		return errors.New("vhost: EAL already initialised")
	}
	args := EALArgs(cfg)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var mask unix.CPUSet
		if err := unix.SchedGetaffinity(0, &mask); err != nil {
			errc <- fmt.Errorf("vhost: read CPU mask: %w", err)
			return
		}
		errc <- ealInit(args)
		_ = unix.SchedSetaffinity(0, &mask)
	}()
	if err := <-errc; err != nil {
		return err
	}
	eal.done = true
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
	if rc := C.kb_vh_eal_init(C.int(len(args)), cargv); rc < 0 {
		return fmt.Errorf("vhost: rte_eal_init %q: %w", args, unix.Errno(-rc))
	}
	return nil
}

// CreatePool creates kbridge's mbuf pool: n mbufs of dataRoom bytes.
func CreatePool(n, dataRoom int) error {
	if rc := C.kb_vh_pool_create(C.uint(n), C.uint16_t(dataRoom)); rc < 0 {
		return fmt.Errorf("vhost: mbuf pool of %d x %d bytes: %w", n, dataRoom, unix.Errno(-rc))
	}
	return nil
}

// PoolInUse returns how many mbufs of kbridge's pool are allocated.
func PoolInUse() int { return int(C.kb_vh_pool_in_use()) }

// PoolSize returns the number of mbufs in kbridge's pool.
func PoolSize() int { return int(C.kb_vh_pool_size()) }

// Package vhost is kbridge's app side in mode vhost: a vhost-user backend
// (DPDK's librte_vhost) for an unmodified DPDK app that adds one
// virtio-user port:
//
//	--vdev net_virtio_user0,path=/run/kbridge/kb0.sock,queues=1
//
// kbridge runs its own EAL as a primary (InitEAL; no shared hugepages with
// the app: vhost-user shares the app's memory through the memory table's
// fds) and its own mbuf pool (CreatePool). Backend serves the socket, one
// frontend at a time, and refuses what a hostile frontend could crash it
// with (a memory region past the end of its file, a descriptor chain
// librte_vhost would be stuck on), saying why. Each queue pair's app side
// is a Queue (bridge.AppOut over the app's TX vring, and bridge.FdWaker:
// the vring's kick eventfd armed while the worker parks) and an In
// (bridge.AppIn and bridge.AppTSO over its RX vring), moved by the burst
// core of internal/burst: every burst is one cgo call, with no Go
// allocation, and every mbuf is freed exactly once.
package vhost

/*
#cgo pkg-config: libdpdk
#cgo CFLAGS: -O2 -Wall -Wno-deprecated-declarations -I${SRCDIR}/../internal/burst
#include <stdlib.h>
#include "vhost.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/internal/eal"
)

// EALConfig says how kbridge starts its own DPDK instance.
type EALConfig struct {
	// CPU is the CPU the EAL main lcore is bound to while EAL starts.
	CPU int
	// ControlCPUs are the CPUs for DPDK's own threads (interrupts, IPC):
	// EAL puts them on every CPU that is not kbridge's lcore, the app's
	// busy ones too; empty leaves them there.
	ControlCPUs []int
	// Args are extra EAL arguments; by default kbridge runs --in-memory.
	Args []string
}

func (cfg EALConfig) eal() eal.Config {
	args := []string{"--proc-type=primary"}
	if !slices.ContainsFunc(cfg.Args, func(a string) bool {
		return a == "--in-memory" || a == "--file-prefix" || strings.HasPrefix(a, "--file-prefix=")
	}) {
		args = append(args, "--in-memory")
	}
	return eal.Config{CPU: cfg.CPU, ControlCPUs: cfg.ControlCPUs, Args: append(args, cfg.Args...)}
}

// EALArgs returns the EAL arguments kbridge starts with.
func EALArgs(cfg EALConfig) []string { return eal.Args(cfg.eal()) }

// InitEAL starts the EAL as kbridge's own primary, placing its threads as
// ring.InitSecondary does (internal/eal). It may succeed once per process.
func InitEAL(cfg EALConfig) error {
	if err := eal.Start(cfg.eal()); err != nil {
		return fmt.Errorf("vhost: %w", err)
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

package ring

// Mode vhost's EAL, a primary of kbridge's own, and its mbuf pool.

/*
#include "vhost.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// VhostEALConfig says how kbridge starts its own DPDK instance.
type VhostEALConfig struct {
	// CPU is the CPU the EAL main lcore is bound to while EAL starts.
	CPU int
	// ControlCPUs are the CPUs for DPDK's own threads (interrupts, IPC):
	// EAL puts them on every CPU that is not kbridge's lcore, the app's
	// busy ones too; empty leaves them there.
	ControlCPUs []int
	// Args are extra EAL arguments; by default kbridge runs --in-memory.
	Args []string
}

func (cfg VhostEALConfig) eal() ealConfig {
	args := []string{"--proc-type=primary"}
	if !slices.ContainsFunc(cfg.Args, func(a string) bool {
		return a == "--in-memory" || a == "--file-prefix" || strings.HasPrefix(a, "--file-prefix=")
	}) {
		args = append(args, "--in-memory")
	}
	return ealConfig{CPU: cfg.CPU, ControlCPUs: cfg.ControlCPUs, Args: append(args, cfg.Args...)}
}

// VhostEALArgs returns the EAL arguments kbridge starts with.
func VhostEALArgs(cfg VhostEALConfig) []string { return ealArgs(cfg.eal()) }

// InitVhostEAL starts the EAL as kbridge's own primary, placing its threads
// as InitSecondary does (startEAL). It may succeed once per process.
func InitVhostEAL(cfg VhostEALConfig) error {
	if err := startEAL(cfg.eal()); err != nil {
		return fmt.Errorf("vhost: %w", err)
	}
	return nil
}

// CreateVhostPool creates kbridge's mbuf pool: n mbufs of dataRoom bytes.
func CreateVhostPool(n, dataRoom int) error {
	if rc := C.kb_vh_pool_create(C.uint(n), C.uint16_t(dataRoom)); rc < 0 {
		return fmt.Errorf("vhost: mbuf pool of %d x %d bytes: %w", n, dataRoom, unix.Errno(-rc))
	}
	return nil
}

// VhostPoolInUse returns how many mbufs of kbridge's pool are allocated.
func VhostPoolInUse() int { return int(C.kb_vh_pool_in_use()) }

// VhostPoolSize returns the number of mbufs in kbridge's pool.
func VhostPoolSize() int { return int(C.kb_vh_pool_size()) }

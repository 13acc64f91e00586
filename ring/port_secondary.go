package ring

// Ring mode's EAL: a secondary process of the app's.

/*
#include <stdlib.h>
#include <rte_eal.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultRuntimeDir is where a DPDK process running as root keeps the
// state of each file prefix, unless RUNTIME_DIRECTORY says otherwise.
const DefaultRuntimeDir = "/var/run/dpdk"

// ErrNoPrimary means no DPDK primary process with the given file prefix runs.
var ErrNoPrimary = errors.New("ring: no DPDK primary process is running")

// ErrAddressTaken means EAL could not map the app's DPDK memory: a
// secondary must map it at the very addresses the primary chose, and
// something of this process (its Go heap, a library, a thread's stack:
// placed at random) already sat at one of them. EAL reports it as
// "Cannot get a virtual area at requested address", "Cannot init memory"
// (rte_errno ENOMEM). DPDK's guide (Multi-process Support, its limitations)
// knows it: mappings differ per process under ASLR. EAL starts once per
// process, so only a fresh process, with a fresh layout, can try again
// (daemon.Reattach executes kbridge again).
var ErrAddressTaken = errors.New("EAL could not map the app's DPDK memory at the app's addresses")

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
	// Attempt counts this process's starts of EAL before this one
	// (executed again after ErrAddressTaken); a kbridge built with the
	// test hook reads it (occupyForTest).
	Attempt int
}

// InitSecondary starts the EAL as a secondary process of the primary that
// runs with cfg.FilePrefix (startEAL: on a throwaway thread, EAL's own
// threads moved to cfg.ControlCPUs). It may succeed once per process.
func InitSecondary(cfg EALConfig) error {
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
	occupyForTest(cfg.Attempt)
	err := startEAL(ealConfig{
		CPU:         cfg.CPU,
		ControlCPUs: cfg.ControlCPUs,
		Args:        append([]string{"--proc-type=secondary", "--file-prefix=" + cfg.FilePrefix}, cfg.Args...),
	})
	if errors.Is(err, unix.ENOMEM) { // a secondary allocates nothing: its mapping failed
		return fmt.Errorf("ring: %w: %w", ErrAddressTaken, err)
	}
	if err != nil {
		return fmt.Errorf("ring: %w", err)
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

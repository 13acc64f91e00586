package xdp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// pinnedMaps are the names the object pins by name (LIBBPF_PIN_BY_NAME).
// Only these files are ever removed from a pin directory.
var pinnedMaps = []string{
	steerMapXsksMap,
	steerMapSteerConfig,
	steerMapStats,
}

func isBPFFS(p string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return false, err
	}
	return uint32(st.Type) == unix.BPF_FS_MAGIC, nil
}

// ensurePinDir mounts bpffs on /sys/fs/bpf when the pin path lies below it
// and nothing is mounted there yet (minimal systems and fresh namespaces do
// not mount it), then creates the pin directory. It returns the directories
// it created, deepest last, so that Close removes exactly those.
func ensurePinDir(pinPath string) (created []string, mounted bool, err error) {
	if underPinRoot(pinPath) {
		ok, err := isBPFFS(DefaultPinRoot)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(DefaultPinRoot, 0o755); err != nil {
				return nil, false, fmt.Errorf("create %s: %w", DefaultPinRoot, err)
			}
		} else if err != nil {
			return nil, false, fmt.Errorf("statfs %s: %w", DefaultPinRoot, err)
		}
		if !ok {
			if err := unix.Mount("bpf", DefaultPinRoot, "bpf", 0, "mode=0700"); err != nil {
				return nil, false, fmt.Errorf("mount bpffs on %s: %w", DefaultPinRoot, err)
			}
			mounted = true
		}
	}

	// Create missing components one by one to know which ones are ours.
	var missing []string
	for d := pinPath; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, mounted, fmt.Errorf("pin path: %w", err)
		}
		missing = append(missing, d)
		if d == "/" {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		err := os.Mkdir(missing[i], 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue // another path created it meanwhile: not ours to remove
		}
		if err != nil {
			return created, mounted, fmt.Errorf("create pin directory: %w", err)
		}
		created = append(created, missing[i])
	}

	ok, err := isBPFFS(pinPath)
	if err != nil {
		return created, mounted, fmt.Errorf("statfs %s: %w", pinPath, err)
	}
	if !ok {
		return created, mounted, fmt.Errorf("pin_path %s is not on a bpf filesystem: %w", pinPath, ErrNotSupported)
	}
	return created, mounted, nil
}

// underPinRoot: is p /sys/fs/bpf or below it?
func underPinRoot(p string) bool {
	rel, err := filepath.Rel(DefaultPinRoot, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// removePins removes kbridge's pins from dir; missing ones are fine.
func removePins(dir string) error {
	var errs []error
	for _, name := range pinnedMaps {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unpin: %w", err))
		}
	}
	return errors.Join(errs...)
}

// pinsPresent reports whether any of kbridge's pins exist in dir.
func pinsPresent(dir string) bool {
	for _, name := range pinnedMaps {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// pinUsers returns the IDs of loaded programs that use any of kbridge's maps
// pinned in dir. Pins with users belong to a live path (in this or another
// network namespace, or the PMD's copy of the program); pins without users
// are left over from a crash.
func pinUsers(dir string) (map[ebpf.ProgramID]string, error) {
	mapIDs := map[ebpf.MapID]bool{}
	for _, name := range pinnedMaps {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open pinned %s: %w", name, err)
		}
		if info, err := m.Info(); err == nil {
			if id, ok := info.ID(); ok {
				mapIDs[id] = true
			}
		}
		m.Close()
	}
	users := map[ebpf.ProgramID]string{}
	if len(mapIDs) == 0 {
		return users, nil
	}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, fs.ErrNotExist) {
			break // ENOENT: no more programs
		}
		if err != nil {
			// EPERM without CAP_SYS_ADMIN: the list is unknown, not
			// empty, and live pins must not pass for stale ones.
			return nil, fmt.Errorf("cannot tell whether the maps pinned in %s are in use: listing BPF programs: %w%s", dir, err, capHint(err))
		}
		id = next
		prog, err := ebpf.NewProgramFromID(id)
		if errors.Is(err, fs.ErrNotExist) {
			continue // unloaded meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("cannot tell whether the maps pinned in %s are in use: program id %d: %w%s", dir, id, err, capHint(err))
		}
		info, err := prog.Info()
		prog.Close()
		if err != nil {
			continue
		}
		ids, _ := info.MapIDs()
		for _, mid := range ids {
			if mapIDs[mid] {
				users[id] = info.Name
				break
			}
		}
	}
	return users, nil
}

// capHint explains an EPERM from the BPF ID calls, which need CAP_SYS_ADMIN.
func capHint(err error) string {
	if !errors.Is(err, unix.EPERM) {
		return ""
	}
	return " (the BPF_*_GET_*_ID calls need CAP_SYS_ADMIN, which kbridge.service does not grant:" +
		" if no kbridge or DPDK app uses these pins, remove them, or grant the capability in a drop-in)"
}

package ring

/*
#include "port.h"
*/
import "C"

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A DPDK secondary process must run exactly the primary's DPDK: the EAL of
// the secondary compares the RTE_VERSION the primary wrote into its shared
// configuration (struct rte_mem_config: magic, then version, the first two
// 32-bit words of the file <runtime dir>/<prefix>/config, in every release
// since the multi-process model began) with its own, all four parts
// (year.month.minor and release), and on a difference fails rte_eal_init
// with "Primary and secondary process DPDK version mismatch" and "Cannot
// init config", without setting rte_errno. kbridge reads the same word
// before it starts its EAL, so it refuses with both versions named, whether
// or not the app's kbridge.h records its own (control block version 3).
// Mode vhost runs an EAL of its own and speaks vhost-user, which is
// versioned by feature bits: it needs no match.

// rteMagic is RTE_MAGIC, written by the primary when its initialisation is
// complete.
const rteMagic = 19820526

// Version is a DPDK release as RTE_VERSION numbers it: year << 24 | month
// << 16 | minor << 8 | release (99 for a release, N for -rcN).
type Version uint32

// String formats v as DPDK does, e.g. "22.11.11" or "24.11.0-rc2".
func (v Version) String() string {
	s := fmt.Sprintf("%d.%02d.%d", v>>24, v>>16&0xff, v>>8&0xff)
	if r := v & 0xff; r != 99 && r != 16 {
		s += fmt.Sprintf("-rc%d", r)
	}
	return s
}

// BuiltWith is the DPDK this kbridge was built with (RTE_VERSION).
func BuiltWith() Version { return Version(C.kb_rte_version()) }

// ErrVersionMismatch means the app's DPDK is not the one kbridge was built
// with: ring mode cannot attach. It matches a *VersionError.
var ErrVersionMismatch = errors.New("ring: DPDK version mismatch")

// VersionError says which DPDK the app runs and which kbridge was built
// with, and what to do.
type VersionError struct {
	App, Kbridge Version
	// PkgConfigDir is where the app's DPDK keeps libdpdk.pc, when it was
	// found beside the app's librte_eal; "" when not.
	PkgConfigDir string
}

func (e *VersionError) Error() string {
	where := "<the directory of the app's libdpdk.pc>"
	if e.PkgConfigDir != "" {
		where = e.PkgConfigDir
	}
	return fmt.Sprintf("the app runs DPDK %s, this kbridge was built with DPDK %s: build kbridge against the app's DPDK (PKG_CONFIG_PATH=%s make build), or serve the app in mode vhost, which needs no match",
		e.App, e.Kbridge, where)
}

// Is makes errors.Is(err, ErrVersionMismatch) true.
func (e *VersionError) Is(target error) bool { return target == ErrVersionMismatch }

// readPrimaryVersion reads magic and version from the start of the
// primary's shared configuration.
func readPrimaryVersion(r io.Reader) (magic uint32, v Version, err error) {
	var w [2]uint32
	if err := binary.Read(r, binary.NativeEndian, &w); err != nil {
		return 0, 0, err
	}
	return w[0], Version(w[1]), nil
}

// checkVersion compares the primary's recorded version with mine; a
// primary still starting (no magic yet, no version) is let through, its
// EAL's own check then decides.
func checkVersion(magic uint32, app, mine Version) error {
	if app == 0 && magic != rteMagic {
		return nil
	}
	if app != mine {
		return &VersionError{App: app, Kbridge: mine}
	}
	return nil
}

// CheckPrimaryVersion refuses, with a *VersionError, a primary running
// another DPDK than this kbridge was built with, before EAL would fail on
// it. It reads <runtimeDir>/<prefix>/config; errors reading it are left to
// the EAL (nil).
func CheckPrimaryVersion(runtimeDir, prefix string) error {
	if runtimeDir == "" {
		runtimeDir = DefaultRuntimeDir
	}
	path := filepath.Join(runtimeDir, prefix, "config")
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	magic, app, err := readPrimaryVersion(f)
	if err != nil {
		return nil
	}
	err = checkVersion(magic, app, BuiltWith())
	var ve *VersionError
	if errors.As(err, &ve) {
		ve.PkgConfigDir = appPkgConfigDir(f)
	}
	return err
}

// appPkgConfigDir finds the primary (the holder of the config file's lock)
// and, beside the librte_eal it mapped, the pkgconfig directory of its
// DPDK; "" when any step fails (a static build, no libdpdk.pc there). The
// paths of /proc/<pid>/maps are in this process's view of the file system,
// so an app in a container or a chroot is found too.
func appPkgConfigDir(f *os.File) string {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK || lk.Pid <= 0 {
		return ""
	}
	maps, err := os.Open("/proc/" + strconv.Itoa(int(lk.Pid)) + "/maps")
	if err != nil {
		return ""
	}
	defer maps.Close()
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(filepath.Base(fields[5]), "librte_eal.so") {
			continue
		}
		dir := filepath.Join(filepath.Dir(fields[5]), "pkgconfig")
		if _, err := os.Stat(filepath.Join(dir, "libdpdk.pc")); err != nil {
			return ""
		}
		return dir
	}
	return ""
}

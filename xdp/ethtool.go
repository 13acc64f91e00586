package xdp

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolValue is struct ethtool_value, used by the legacy per-feature
// ethtool ioctls (ETHTOOL_[GS]{TXCSUM,GRO,TSO}). They still work on every
// kernel kbridge supports and need no generic-netlink family lookup.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqPtr is struct ifreq with ifr_data set, as SIOCETHTOOL wants it.
type ifreqPtr struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [40 - unix.IFNAMSIZ - unsafe.Sizeof(uintptr(0))]byte
}

func ethtool(ifname string, cmd uint32, data uint32) (uint32, error) {
	// The socket, and so the device lookup, lives in the calling thread's
	// network namespace.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("ethtool socket: %w", err)
	}
	defer unix.Close(fd)

	val := &ethtoolValue{cmd: cmd, data: data}
	ifr := &ifreqPtr{data: unsafe.Pointer(val)}
	copy(ifr.name[:unix.IFNAMSIZ-1], ifname)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
	runtime.KeepAlive(ifr)
	runtime.KeepAlive(val)
	if errno != 0 {
		return 0, errno
	}
	return val.data, nil
}

// ethtoolSet turns one offload on or off (ETHTOOL_STXCSUM, ETHTOOL_SGRO, ...).
func ethtoolSet(ifname string, cmd uint32, on bool) error {
	var v uint32
	if on {
		v = 1
	}
	if _, err := ethtool(ifname, cmd, v); err != nil {
		return fmt.Errorf("ethtool cmd %#x on %s: %w", cmd, ifname, err)
	}
	return nil
}

package tap

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The legacy ethtool commands (linux/ethtool.h): the kernel converts them
// to the link_ksettings the TUN driver keeps (tun_set_link_ksettings), and
// their fixed 44-byte struct needs no size handshake.
const (
	ethtoolGSet   = 0x1
	ethtoolSSet   = 0x2
	duplexHalf    = 0
	duplexFull    = 1
	autonegOff    = 0
	ethtoolCmdLen = 44
)

// ethtoolCmd is struct ethtool_cmd.
type ethtoolCmd struct {
	Cmd           uint32
	Supported     uint32
	Advertising   uint32
	Speed         uint16
	Duplex        uint8
	Port          uint8
	PhyAddress    uint8
	Transceiver   uint8
	Autoneg       uint8
	MdioSupport   uint8
	Maxtxpkt      uint32
	Maxrxpkt      uint32
	SpeedHi       uint16
	EthTpMdix     uint8
	EthTpMdixCtrl uint8
	LpAdvertising uint32
	Reserved      [2]uint32
}

var _ = [1]struct{}{}[unsafe.Sizeof(ethtoolCmd{})-ethtoolCmdLen]

// ifreqData is struct ifreq with ifr_data.
type ifreqData struct {
	Name [unix.IFNAMSIZ]byte
	Data unsafe.Pointer
	_    [16]byte
}

// setSpeed gives interface name the link speed (Mb/s) and duplex that
// ethtool and /sys/class/net/<name>/speed report, as a NIC's driver reports
// its link's: bonding, LACP and routing daemons read them.
func setSpeed(name string, mbps uint32, full bool) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	var cmd ethtoolCmd
	ifr := ifreqData{Data: unsafe.Pointer(&cmd)}
	copy(ifr.Name[:unix.IFNAMSIZ-1], name)
	ioctl := func(c uint32) error {
		cmd.Cmd = c
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
			return e
		}
		return nil
	}
	if err := ioctl(ethtoolGSet); err != nil {
		return fmt.Errorf("ETHTOOL_GSET: %w", err)
	}
	cmd.Speed, cmd.SpeedHi = uint16(mbps), uint16(mbps>>16)
	cmd.Duplex, cmd.Autoneg = duplexHalf, autonegOff
	if full {
		cmd.Duplex = duplexFull
	}
	if err := ioctl(ethtoolSSet); err != nil {
		return fmt.Errorf("ETHTOOL_SSET speed %d: %w", mbps, err)
	}
	return nil
}

package tap

import (
	"fmt"

	"github.com/mdlayher/ethtool"
)

// setSpeed gives interface name the link speed (Mb/s) and duplex that
// ethtool and /sys/class/net/<name>/speed report, as a NIC's driver reports
// its link's: bonding, LACP and routing daemons read them. It speaks the
// ethtool netlink family (ETHTOOL_MSG_LINKMODES_SET, through
// mdlayher/ethtool), which the TUN driver serves with the link settings it
// keeps (tun_set_link_ksettings); autonegotiation off, as a fixed link.
func setSpeed(name string, mbps uint32, full bool) error {
	c, err := ethtool.New()
	if err != nil {
		return fmt.Errorf("ethtool netlink: %w", err)
	}
	defer c.Close()
	speed, duplex, autoneg := int(mbps), ethtool.Half, ethtool.AutonegOff
	if full {
		duplex = ethtool.Full
	}
	err = c.UpdateLinkMode(ethtool.Interface{Name: name},
		&ethtool.LinkModeUpdate{SpeedMegabits: &speed, Duplex: &duplex, Autoneg: &autoneg})
	if err != nil {
		return fmt.Errorf("ethtool linkmodes %s speed %d: %w", name, mbps, err)
	}
	return nil
}

package xdp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// aliasPrefix marks the veth ends kbridge created (IFLA_IFALIAS), so that a
// later Attach can tell its own leftovers from somebody else's kb0.
const aliasPrefix = "kbridge-xdp:"

// createVeth creates and configures the exception pair: Exception (kb0, the
// kernel side) and ExceptionPeer (the end the NIC redirects into). With
// keep, a pair that an earlier kbridge left (a crash, interface.on_stop:
// keep, or for the DPDK app's program under loader pmd, see Close) is
// configured again instead of being replaced: that program redirects into
// its ifindex, and kb0's ifindex, addresses, routes and neighbours survive.
func (p *Path) createVeth(nic netlink.Link, keep bool) error {
	cfg := p.cfg
	marker := aliasPrefix + cfg.NIC
	var left []netlink.Link
	for _, name := range []string{cfg.Exception, cfg.ExceptionPeer} {
		l, err := p.nl.LinkByName(name)
		if err != nil {
			continue
		}
		if l.Attrs().Alias != marker {
			return fmt.Errorf("xdp: exception interface %q: %w (not created by kbridge for %s)", name, ErrExists, cfg.NIC)
		}
		// A live path keeps kbridge_return attached through its BPF link;
		// after a crash the link is gone with the process.
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return fmt.Errorf("xdp: exception interface %q runs program id %d of a live path: %w", name, x.ProgId, ErrBusy)
		}
		left = append(left, l)
	}
	reuse := keep && len(left) == 2 && left[0].Type() == "veth" && left[0].Attrs().ParentIndex == left[1].Attrs().Index
	if reuse {
		p.log.Info("xdp: keeping the exception veth an earlier kbridge left", "interface", cfg.Exception,
			"ifindex", left[0].Attrs().Index)
	} else {
		for _, l := range left {
			p.log.Warn("xdp: removing leftover exception veth", "interface", l.Attrs().Name)
			if err := p.nl.LinkDel(l); err != nil {
				var nf netlink.LinkNotFoundError
				if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
					continue // went with its peer
				}
				return fmt.Errorf("xdp: remove leftover %q: %w", l.Attrs().Name, err)
			}
		}
	}

	mac := nic.Attrs().HardwareAddr
	if cfg.MAC != "" {
		mac = mustMAC(cfg.MAC)
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = nic.Attrs().MTU
	}
	// One queue per CPU: redirected frames land on the queue of the CPU
	// that received them, so each CPU gets its own NAPI context on kb0.
	q := runtime.NumCPU()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name: cfg.Exception, MTU: mtu, HardwareAddr: mac,
			NumTxQueues: q, NumRxQueues: q,
		},
		PeerName:        cfg.ExceptionPeer,
		PeerMTU:         uint32(mtu),
		PeerNumTxQueues: uint32(q),
		PeerNumRxQueues: uint32(q),
	}
	if !reuse {
		if err := p.nl.LinkAdd(veth); err != nil {
			return fmt.Errorf("xdp: create veth %s/%s: %w", cfg.Exception, cfg.ExceptionPeer, err)
		}
	}
	inner, err := p.nl.LinkByName(cfg.Exception)
	if err != nil {
		return fmt.Errorf("xdp: exception %q: %w", cfg.Exception, err)
	}
	p.vethIndex = inner.Attrs().Index
	outer, err := p.nl.LinkByName(cfg.ExceptionPeer)
	if err != nil {
		return fmt.Errorf("xdp: exception peer %q: %w", cfg.ExceptionPeer, err)
	}
	if reuse { // what LinkAdd would have set
		for _, l := range []netlink.Link{inner, outer} {
			if l.Attrs().MTU != mtu {
				if err := p.nl.LinkSetMTU(l, mtu); err != nil {
					return fmt.Errorf("xdp: mtu on %s: %w", l.Attrs().Name, err)
				}
			}
		}
		if !bytes.Equal(inner.Attrs().HardwareAddr, mac) {
			if err := p.nl.LinkSetHardwareAddr(inner, mac); err != nil {
				return fmt.Errorf("xdp: mac on %s: %w", cfg.Exception, err)
			}
		}
	}
	for _, l := range []netlink.Link{inner, outer} {
		if err := p.nl.LinkSetAlias(l, marker); err != nil {
			return fmt.Errorf("xdp: alias on %s: %w", l.Attrs().Name, err)
		}
	}
	// The outer end must stay silent: no link-local address, so no DAD or
	// router solicitations leak into kb0.
	if err := p.nl.LinkSetIP6AddrGenMode(outer, 1 /* IN6_ADDR_GEN_MODE_NONE */); err != nil {
		return fmt.Errorf("xdp: addrgenmode on %s: %w", cfg.ExceptionPeer, err)
	}

	// An XDP-redirected frame carries no checksum state, so a frame kb0
	// sends with CHECKSUM_PARTIAL would leave the NIC with a wrong TCP/UDP
	// checksum: make the stack finish checksums before transmitting on kb0.
	if err := ethtoolSet(cfg.Exception, unix.ETHTOOL_STXCSUM, false); err != nil {
		return fmt.Errorf("xdp: tx checksum off on %s: %w", cfg.Exception, err)
	}
	// A native redirect into a veth (ndo_xdp_xmit) is dropped unless the
	// receiving end has NAPI; GRO on kb0 gives it NAPI without running a
	// program there. (napi: xdp attaches kbridge_pass instead.)
	if cfg.NAPI == NAPIGRO {
		if err := ethtoolSet(cfg.Exception, unix.ETHTOOL_SGRO, true); err != nil {
			return fmt.Errorf("xdp: GRO on %s: %w", cfg.Exception, err)
		}
	}

	for _, a := range cfg.Addresses {
		pfx := netip.MustParsePrefix(a) // Validate ran before
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen())}}
		if err := p.nl.AddrReplace(inner, addr); err != nil { // kept: may be there
			return fmt.Errorf("xdp: address %s on %s: %w", a, cfg.Exception, err)
		}
	}
	for _, l := range []netlink.Link{outer, inner} {
		if err := p.nl.LinkSetUp(l); err != nil {
			return fmt.Errorf("xdp: set %s up: %w", l.Attrs().Name, err)
		}
	}
	return nil
}

// deleteVeth removes the pair if this Path created it.
func (p *Path) deleteVeth() error {
	if p.vethIndex == 0 {
		return nil
	}
	l, err := p.nl.LinkByIndex(p.vethIndex)
	p.vethIndex = 0
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find exception veth: %w", err)
	}
	if err := p.nl.LinkDel(l); err != nil {
		return fmt.Errorf("delete exception veth %s: %w", l.Attrs().Name, err)
	}
	return nil
}

package config

// Mode is the data path kbridge runs: the value of the mode key.
type Mode string

// The modes. daemon.StartWith picks each one's runner.
const (
	// ModeRing: the app's DPDK rings <-> the TAP interface (the default).
	ModeRing Mode = "ring"
	// ModeXDP: an XDP program on the NIC steers exception traffic into the
	// interface (see package xdp).
	ModeXDP Mode = "xdp"
	// ModeVhost: kbridge is the vhost-user backend of the app's
	// virtio-user port (see package vhost); the kernel side is the TAP, as
	// in mode ring.
	ModeVhost Mode = "vhost"
)

func (m Mode) String() string { return string(m) }

// valid reports whether m is one of the modes.
func (m Mode) valid() bool {
	switch m {
	case ModeRing, ModeXDP, ModeVhost:
		return true
	}
	return false
}

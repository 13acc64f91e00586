package tap

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/tap/vnet"
)

// TUNSETOFFLOAD flags (linux/if_tun.h); golang.org/x/sys/unix lacks them.
const (
	tunFCsum = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04
)

// offloads is what kbridge asks the kernel to hand it: checksum offload and
// TSO for both IP versions. TSO is honoured only with CSUM. USO is not asked
// for, since the splitter handles TCP only.
const offloads = tunFCsum | tunFTSO4 | tunFTSO6

// Options are what a Device needs beyond the interface's configuration.
type Options struct {
	Queues  int
	Batch   int // packets per burst, as the worker's
	MaxSegs int // segments of one app packet
	// MaxMTU is the largest MTU SetMTU may set (0, or less than the
	// configured MTU: that MTU); the queues' buffers are sized for it.
	MaxMTU int
	Log    *slog.Logger
}

// Device is a TAP interface with one non-blocking queue per worker.
type Device struct {
	name   string
	queues []*Queue
	// cfg is what a deleted interface is made again with: the MAC is the
	// one the kernel gave it when the configuration names none.
	cfg     Config
	index   atomic.Int64 // the interface's ifindex; Recreate changes it
	offload atomic.Bool  // cfg.Offload as switched live by SetOffload
	maxMTU  int          // the bound of SetMTU, fixed at Create
	// carrier is what SetCarrier last set (true: the kernel's default for a
	// TAP with a queue open); mu orders SetCarrier against Recreate,
	// which gives a re-made interface the same carrier. SetMTU
	// writes cfg.MTU under mu too.
	mu      sync.Mutex
	carrier bool
	// speed and full are what SetSpeed last set (speed 0: never; the TUN
	// driver's own 10000 Mb/s full duplex stays), for a re-made interface.
	speed uint32
	full  bool
	// promisc and allmulti are the flags the interface is known to have
	// (Known: as the kernel made it, or as remembered), for a re-made
	// interface.
	promisc, allmulti bool
}

// Create makes the TAP interface with opt.Queues queues, configures it and,
// with cfg.Offload, turns on the offloads and probes that the kernel takes
// coalesced writes. On error nothing is left behind. An interface of that
// name that someone uses (another kbridge's, say) is refused with an error
// wrapping ErrInUse and left as it is; a leftover nobody uses is removed
// and made anew (openFirst).
func Create(cfg Config, opt Options) (d *Device, err error) {
	if opt.Queues < 1 {
		return nil, fmt.Errorf("tap: %d queues", opt.Queues)
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if l, err := netlink.LinkByName(cfg.Name); err == nil && l.Type() != "tuntap" {
		return nil, fmt.Errorf("tap: interface %q exists and is a %s, %w: pick another interface.name or remove it",
			cfg.Name, l.Type(), ErrNotTAP)
	}
	d = &Device{name: cfg.Name, carrier: true, maxMTU: max(opt.MaxMTU, cfg.MTU)}
	d.offload.Store(cfg.Offload)
	made := d // the error returns below clear d
	defer func() {
		if err != nil {
			made.Close()
		}
	}()
	var link netlink.Link // the interface as made: one lookup serves the steps after
	for q := 0; q < opt.Queues; q++ {
		var fd int
		if q == 0 {
			fd, err = openFirst(cfg.Name, opt.Log)
		} else {
			fd, err = openQueue(cfg.Name, false)
		}
		if errors.Is(err, ErrInUse) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("tap: create %q queue %d: %w", cfg.Name, q, err)
		}
		if q == 0 {
			// Owner, group, header size and offloads are the device's,
			// not the queue's: set once, the owner first.
			link, err = ownFirst(fd, cfg.Name)
			if err == nil {
				err = setOffloads(fd, cfg.Offload)
			}
			if err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("tap: %s: %w", cfg.Name, err)
			}
		}
		d.queues = append(d.queues, NewQueue(fd, QueueConfig{
			MTU: cfg.MTU, MaxMTU: d.maxMTU, Batch: opt.Batch, MaxSegs: opt.MaxSegs, Merge: cfg.Offload, Log: opt.Log.With("queue", q),
		}))
	}
	if err := configure(cfg, link); err != nil {
		return nil, err
	}
	if err := d.remember(cfg, link); err != nil {
		return nil, err
	}
	d.probe(cfg, opt)
	return d, nil
}

// probe checks, with the offloads on and the interface up, whether the
// kernel takes coalesced writes with a short last segment, and merges only
// runs of equal segments if not.
func (d *Device) probe(cfg Config, opt Options) {
	if !cfg.Offload || !cfg.Up {
		return
	}
	if err := d.queues[0].probeShortLastSegment(); err != nil {
		opt.Log.Warn("this kernel refuses coalesced writes whose last segment is short (6.6.44+/6.10.3+ before 89add40066f9): merging only runs of equal segments",
			"interface", cfg.Name, "err", err)
		for _, q := range d.queues {
			q.co.SetShortLast(false)
		}
	}
}

// openFirst opens the first queue of TAP name, which makes the interface:
// with IFF_TUN_EXCL, the kernel refuses (EBUSY) when an interface of that
// name exists, instead of adding the queue to it. Without it a second
// kbridge with the same interface.name would join the first one's TAP
// (its queues, its MTU, its share of the frames). A name that is taken is
// cleared only when the interface is an orphan (linkUse.orphan: a kbridge
// killed with its TAP made persistent, or one still being torn down);
// otherwise the error wraps ErrInUse and says who holds it.
func openFirst(name string, log *slog.Logger) (int, error) {
	for range 3 {
		fd, err := openQueue(name, true)
		if !errors.Is(err, unix.EBUSY) {
			return fd, err
		}
		l, ferr := findTAP(name)
		switch {
		case ferr != nil:
			return -1, ferr
		case l == nil:
			continue // gone meanwhile: the previous owner's last fd closed
		}
		if err := useOf(l).orphan(name); err != nil {
			return -1, fmt.Errorf("%w: pick another interface.name, or stop what holds it", err)
		}
		if err := removeLink(l); err != nil {
			if gone, ferr := findTAP(name); gone == nil && ferr == nil {
				continue // its teardown finished first
			}
			return -1, err
		}
		log.Warn("removed a leftover TAP interface of this name that nobody used", "interface", name, "alias", l.Attrs().Alias)
	}
	return -1, fmt.Errorf("tap: %s: %w: made again by someone else as fast as it was removed", name, ErrInUse)
}

// ownFirst makes the interface of its first queue fd, just made, kbridge's
// alone (setAccess) and checks that nobody attached a queue before it was:
// one that did would read a share of the frames the kernel sends toward
// the app. The interface is not up yet. It returns the interface as made.
func ownFirst(fd int, name string) (netlink.Link, error) {
	if err := setAccess(fd); err != nil {
		return nil, err
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("find %q: %w", name, err)
	}
	a, err := readAccess(l.Attrs().Index)
	if err != nil {
		return nil, err
	}
	if a.queues != 1 {
		pids, _ := holders(name)
		return nil, fmt.Errorf("%w: %d queues attached to the interface before kbridge gave it an owner (holders %v): not serving beside them",
			ErrInUse, a.queues, pids)
	}
	return l, nil
}

// openQueue opens one queue of TAP name: a non-blocking fd with a virtio-net
// header on every frame. IFF_MULTI_QUEUE is set for every queue, also for a
// single one, so that a later queue count never meets a device of the other
// kind. excl: make the interface, never join one that exists (EBUSY).
func openQueue(name string, excl bool) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	feat, err := unix.IoctlGetUint32(fd, unix.TUNGETFEATURES)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNGETFEATURES: %w", err)
	}
	for _, f := range []struct {
		bit  uint32
		name string
	}{{unix.IFF_VNET_HDR, "IFF_VNET_HDR"}, {unix.IFF_MULTI_QUEUE, "IFF_MULTI_QUEUE"}} {
		if feat&f.bit == 0 {
			unix.Close(fd)
			return -1, fmt.Errorf("%s: %w", f.name, ErrNotSupported)
		}
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE)
	if excl {
		flags |= unix.IFF_TUN_EXCL
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EBUSY) {
			return -1, fmt.Errorf("TUNSETIFF: %w (an interface %q exists)", err, name)
		}
		if errors.Is(err, unix.EINVAL) {
			return -1, fmt.Errorf("TUNSETIFF: %w (a TAP %q of other flags exists: remove it, or run `kbridge cleanup`)", err, name)
		}
		return -1, fmt.Errorf("TUNSETIFF: %w", err)
	}
	return fd, nil
}

// setOffloads fixes the header size and asks for the offloads, or for none
// (the kernel then finishes every checksum and segments every frame itself).
func setOffloads(fd int, on bool) error {
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnet.HdrLen); err != nil {
		return fmt.Errorf("TUNSETVNETHDRSZ %d: %w", vnet.HdrLen, err)
	}
	flags := 0
	if on {
		flags = offloads
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, flags); err != nil {
		return fmt.Errorf("TUNSETOFFLOAD %#x: %w", flags, err)
	}
	return nil
}

// SetOffload switches the offloads live: TUNSETOFFLOAD for what the kernel
// hands kbridge (super-frames the kernel already queued are still split) and
// coalescing for what kbridge writes, from each worker's next burst.
func (d *Device) SetOffload(on bool) error {
	if len(d.queues) == 0 {
		return fmt.Errorf("tap: %w", ErrClosed)
	}
	flags := 0
	if on {
		flags = offloads
	}
	if err := unix.IoctlSetInt(d.queues[0].fd, unix.TUNSETOFFLOAD, flags); err != nil {
		return fmt.Errorf("tap: %s: TUNSETOFFLOAD %#x: %w", d.name, flags, err)
	}
	d.offload.Store(on)
	for _, q := range d.queues {
		q.merge.Store(on)
	}
	return nil
}

// SetCarrier turns the interface's carrier on or off (TUNSETCARRIER), as a
// NIC's driver does when its link comes and goes: off, the kernel shows
// NO-CARRIER, operstate DOWN and its routes linkdown, and a routing daemon
// on it sees the link fail at once. A TAP's carrier is on while a queue is
// open; a re-made interface gets what was set last.
func (d *Device) SetCarrier(on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queues) == 0 {
		return fmt.Errorf("tap: %w", ErrClosed)
	}
	d.carrier = on // first, as SetSpeed: an interface being made again gets it
	if err := setCarrier(d.queues[0].fd, on); err != nil {
		return fmt.Errorf("tap: %s: %w", d.name, err)
	}
	return nil
}

// SetSpeed gives the interface the link speed (Mb/s) and duplex of the
// app port's link, as a NIC's driver reports its own (ethtool kb0,
// /sys/class/net/kb0/speed); bonding and routing daemons read them. A
// re-made interface gets what was set last.
func (d *Device) SetSpeed(mbps uint32, full bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.speed, d.full = mbps, full // first: an interface re-made meanwhile gets it
	if err := setSpeed(d.name, mbps, full); err != nil {
		return fmt.Errorf("tap: %s: %w", d.name, err)
	}
	return nil
}

// Carrier reports the carrier SetCarrier was last asked for (a re-made
// interface gets it, even when setting it failed while the interface was gone).
func (d *Device) Carrier() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.carrier
}

// RestoreCarrier sets the carrier back to what SetCarrier last asked for
// when the kernel shows another: someone else turned it (TUNSETCARRIER
// from a queue of theirs, `ip link set kb0 carrier off`), and a routing
// daemon on the interface would take the link for down while the app's is
// up. It reports whether it did. An interface that is down shows no
// carrier whatever it is: left alone.
func (d *Device) RestoreCarrier() (restored bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queues) == 0 {
		return false, fmt.Errorf("tap: %w", ErrClosed)
	}
	l, err := d.link()
	if err != nil {
		return false, err
	}
	// Read and set under mu: SetCarrier cannot change the wanted carrier
	// between the two.
	if s := stateOf(l); !s.Up || s.Carrier == d.carrier {
		return false, nil
	}
	if err := setCarrier(d.queues[0].fd, d.carrier); err != nil {
		return false, fmt.Errorf("tap: %s: %w", d.name, err)
	}
	return true, nil
}

func setCarrier(fd int, on bool) error {
	v := 0
	if on {
		v = 1
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETCARRIER, v); err != nil {
		return fmt.Errorf("TUNSETCARRIER %d: %w", v, err)
	}
	return nil
}

// SetMTU changes the MTU kbridge holds frames to, on every queue from its
// worker's next burst, and records it as the MTU a deleted interface is made
// again with. An MTU below limits.MinMTU or above MaxMTU is refused with an
// error matching ErrMTURange, and no queue changes.
//
// It does not set the kernel interface's MTU: the caller does that with
// netlink (or an administrator did it). A caller that sets both calls SetMTU
// first: the keeper takes a kernel MTU that differs from the
// recorded one for a change made outside kbridge. Until both agree, frames
// the kernel sends longer than the MTU set here are dropped as oversize.
func (d *Device) SetMTU(mtu int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queues) == 0 {
		return fmt.Errorf("tap: %w", ErrClosed)
	}
	// All or none: every queue has the device's MaxMTU, but check each
	// before any changes.
	for _, q := range d.queues {
		if err := q.checkMTU(mtu); err != nil {
			return fmt.Errorf("tap: %s: %w", d.name, err)
		}
	}
	for _, q := range d.queues {
		q.nextMTU.Store(int32(mtu))
	}
	d.cfg.MTU = mtu
	return nil
}

// MTU returns the MTU the queues hold frames to: the configured one, or what
// SetMTU last set.
func (d *Device) MTU() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg.MTU
}

// MaxMTU returns the largest MTU SetMTU takes.
func (d *Device) MaxMTU() int { return d.maxMTU }

// Name returns the interface name.
func (d *Device) Name() string { return d.name }

// NumQueues returns the number of queues.
func (d *Device) NumQueues() int { return len(d.queues) }

// Queue returns queue q.
func (d *Device) Queue(q int) *Queue { return d.queues[q] }

// Close closes every queue; the kernel then removes the interface.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, q := range d.queues {
		errs = append(errs, q.Close())
	}
	d.queues = nil
	return errors.Join(errs...)
}

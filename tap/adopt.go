package tap

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/internal/limits"
	"github.com/kbridge/kbridge/tap/vnet"
)

// Adopting an interface that outlived the kbridge that made it: its queue
// fds handed over by that kbridge (the control socket's takeover) or kept
// by systemd's fd store across a restart, or, for a persistent interface
// (interface.on_stop: keep) that nobody holds, queues opened on it again.
// Whatever is adopted stays as the host has it: ifindex, MTU, MAC, flags,
// addresses, routes, neighbours, qdisc and the sockets bound to it. The
// kernel is the one record of the interface: Adopt reads it, never a
// predecessor's word.

// Adopted says what Adopt took over.
type Adopted struct {
	// From is the pid in the interface's kbridge mark: the kbridge that
	// served it last.
	From   int `json:"from_pid"`
	Index  int `json:"ifindex"`
	Handed int `json:"queues_handed"` // queue fds adopted
	Opened int `json:"queues_opened"` // queues opened to make up Options.Queues
	Closed int `json:"queues_closed"` // handed queues beyond Options.Queues, closed
	// Foreign is the queues attached that kbridge does not hold: another
	// process's (takeAccess); logged, not detachable.
	Foreign int `json:"queues_foreign,omitempty"`
}

// Adopt makes a Device of the TAP interface cfg.Name from fds, queue fds of
// it a predecessor held. It checks that every fd is a queue of that
// interface with kbridge's flags (TAP, no packet information, virtio-net
// headers, multi-queue) and header size, and that the interface carries
// kbridge's mark (owner.go); anything else is refused with an error
// wrapping ErrNotAdoptable. Queues are opened or closed to make
// opt.Queues. The offloads are set as cfg.Offload says; the MTU, MAC, admin
// state and flags stay as the interface has them, each difference from
// cfg logged; cfg's addresses and routes are added where missing, nothing
// is removed. A persistent interface stops being one (TUNSETPERSIST 0):
// whether it outlives this kbridge is decided at its stop (Persist).
//
// On error every fd (adopted or opened) is closed: the kernel removes the
// interface if nothing else holds it, and the caller makes it anew.
func Adopt(fds []int, cfg Config, opt Options) (d *Device, a Adopted, err error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	owned := append([]int(nil), fds...)
	defer func() {
		if err != nil {
			for _, fd := range owned {
				unix.Close(fd)
			}
			err = fmt.Errorf("tap: adopt %s: %w", cfg.Name, err)
		}
	}()
	if opt.Queues < 1 || len(fds) == 0 {
		return nil, a, fmt.Errorf("%d queues, %d fds: %w", opt.Queues, len(fds), ErrNotAdoptable)
	}
	for i, fd := range fds {
		if err := checkQueueFd(fd, cfg.Name); err != nil {
			return nil, a, fmt.Errorf("fd %d (queue %d): %w", fd, i, err)
		}
	}
	if err := checkDistinct(fds); err != nil {
		return nil, a, err
	}
	l, err := findTAP(cfg.Name)
	switch {
	case err != nil:
		return nil, a, err
	case l == nil:
		return nil, a, fmt.Errorf("no interface of that name: %w", ErrNotAdoptable)
	}
	pid, _, marked := markedOwner(l.Attrs().Alias)
	if !marked {
		return nil, a, fmt.Errorf("no kbridge mark in its alias (%q): %w", l.Attrs().Alias, ErrNotAdoptable)
	}
	a = Adopted{From: pid, Index: l.Attrs().Index, Handed: len(fds)}
	for len(owned) > opt.Queues {
		unix.Close(owned[len(owned)-1])
		owned = owned[:len(owned)-1]
		a.Closed++
	}
	for len(owned) < opt.Queues {
		fd, err := openQueue(cfg.Name, false)
		if err != nil {
			return nil, a, fmt.Errorf("open queue %d: %w", len(owned), err)
		}
		owned = append(owned, fd)
		a.Opened++
	}
	if err := setOffloads(owned[0], cfg.Offload); err != nil {
		return nil, a, err
	}
	if err := unix.IoctlSetInt(owned[0], unix.TUNSETPERSIST, 0); err != nil {
		return nil, a, fmt.Errorf("TUNSETPERSIST 0: %w", err)
	}
	if a.Foreign, err = takeAccess(owned[0], linkRef{cfg.Name, a.Index}, len(owned), a.Closed, opt.Log); err != nil {
		return nil, a, err
	}
	st := stateOf(l)
	maxMTU := max(opt.MaxMTU, cfg.MTU)
	if st.MTU < limits.MinMTU || st.MTU > maxMTU {
		// Frames of that size would not fit the buffers: the one value
		// of the interface that is set, not kept.
		opt.Log.Warn("the adopted interface's MTU is beyond what this kbridge's buffers hold: set to interface.mtu",
			"interface", cfg.Name, "mtu", st.MTU, "max_mtu", maxMTU, "interface_mtu", cfg.MTU)
		if err := netlink.LinkSetMTU(l, cfg.MTU); err != nil {
			return nil, a, fmt.Errorf("set mtu %d: %w", cfg.MTU, err)
		}
		st.MTU = cfg.MTU
	}
	kept := keptAsItIs(cfg, st)
	for _, k := range []struct {
		key       string
		differs   bool
		conf, has any
	}{
		{"mtu", cfg.MTU != kept.MTU, cfg.MTU, kept.MTU},
		{"mac", cfg.MAC != "" && !sameMAC(cfg.MAC, kept.MAC), cfg.MAC, kept.MAC},
		{"up", cfg.Up != kept.Up, cfg.Up, kept.Up},
	} {
		if k.differs {
			opt.Log.Info("the adopted interface keeps its "+k.key+"; interface."+k.key+" applies when kbridge makes the interface",
				"interface", cfg.Name, "kept", k.has, "configured", k.conf)
		}
	}
	dev := &Device{name: cfg.Name, carrier: st.Carrier, maxMTU: maxMTU, promisc: st.Promisc, allmulti: st.Allmulti}
	dev.offload.Store(cfg.Offload)
	for q, fd := range owned {
		dev.queues = append(dev.queues, NewQueue(fd, QueueConfig{
			MTU: kept.MTU, MaxMTU: maxMTU, Batch: opt.Batch, MaxSegs: opt.MaxSegs, Merge: cfg.Offload, Log: opt.Log.With("queue", q),
		}))
		dev.queues[q].drainBacklog()
	}
	owned = nil // the Device's now: its Close closes them
	defer func() {
		if err != nil {
			dev.Close()
		}
	}()
	if err := addConfigured(l, kept); err != nil {
		return nil, a, err
	}
	if err := dev.remember(kept, l); err != nil {
		return nil, a, err
	}
	dev.probe(kept, opt)
	return dev, a, nil
}

// keptAsItIs is cfg with the values an adopted interface keeps: its MTU,
// MAC and admin state.
func keptAsItIs(cfg Config, st State) Config {
	cfg.MTU, cfg.MAC, cfg.Up = st.MTU, st.MAC.String(), st.Up
	return cfg
}

// addConfigured adds cfg's addresses, and its routes on an interface that
// is up, where the interface lacks them; nothing is removed.
func addConfigured(l netlink.Link, cfg Config) error {
	for _, s := range cfg.Addresses {
		addr, _ := netlink.ParseAddr(s)
		if err := netlink.AddrReplace(l, addr); err != nil {
			return fmt.Errorf("add address %s: %w", s, err)
		}
	}
	if !cfg.Up {
		return nil
	}
	for _, r := range cfg.Routes {
		if err := netlink.RouteReplace(route(l, r)); err != nil {
			return fmt.Errorf("route %s: %w", r.To, err)
		}
	}
	return nil
}

// checkQueueFd checks that fd is an open /dev/net/tun (a macvtap or
// ipvtap fd answers TUNGETIFF too), attached to TAP name of this network
// namespace (a TAP of that name in another namespace is another
// interface), with kbridge's flags and header size.
func checkQueueFd(fd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if !isTUNDevice(st) {
		return fmt.Errorf("not /dev/net/tun (mode %#o, device %d:%d): %w",
			st.Mode&unix.S_IFMT, unix.Major(st.Rdev), unix.Minor(st.Rdev), ErrNotAdoptable)
	}
	if err := checkNetns(fd); err != nil {
		return err
	}
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		// EBADFD: a queue detached (TUNSETQUEUE) or of a deleted interface.
		return fmt.Errorf("TUNGETIFF: %w: %w", err, ErrNotAdoptable)
	}
	const want = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE
	if got := ifr.Name(); got != name {
		return fmt.Errorf("a queue of %q, not of %q: %w", got, name, ErrNotAdoptable)
	}
	if flags := ifr.Uint16(); flags&want != want || flags&unix.IFF_TUN != 0 {
		return fmt.Errorf("TUN flags %#x, want %#x: %w", flags, want, ErrNotAdoptable)
	}
	sz, err := unix.IoctlGetInt(fd, unix.TUNGETVNETHDRSZ)
	if err != nil {
		return fmt.Errorf("TUNGETVNETHDRSZ: %w", err)
	}
	if sz != vnet.HdrLen {
		return fmt.Errorf("virtio-net header of %d bytes, want %d: %w", sz, vnet.HdrLen, ErrNotAdoptable)
	}
	return nil
}

// checkNetns checks that the interface of TUN fd lives in this thread's
// network namespace (TUNGETDEVNETNS: an fd of the device's namespace,
// compared by inode with ours).
func checkNetns(fd int) error {
	nsfd, err := unix.IoctlRetInt(fd, unix.TUNGETDEVNETNS)
	if err != nil {
		return fmt.Errorf("TUNGETDEVNETNS: %w: %w", err, ErrNotAdoptable)
	}
	defer unix.Close(nsfd)
	var dev, own unix.Stat_t
	if err := unix.Fstat(nsfd, &dev); err != nil {
		return fmt.Errorf("the device's network namespace: %w", err)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &own); err != nil {
		return fmt.Errorf("this thread's network namespace: %w", err)
	}
	if dev.Dev != own.Dev || dev.Ino != own.Ino {
		return fmt.Errorf("a queue of an interface in another network namespace (net:[%d], this one net:[%d]): %w",
			dev.Ino, own.Ino, ErrNotAdoptable)
	}
	return nil
}

// checkDistinct checks that no two fds are one open file (kcmp
// KCMP_FILE): a duplicate would put two workers on one queue and leave a
// queue count the kernel does not have.
func checkDistinct(fds []int) error {
	pid := uintptr(os.Getpid())
	for i := range fds {
		for j := i + 1; j < len(fds); j++ {
			r, _, errno := unix.Syscall6(unix.SYS_KCMP, pid, pid, kcmpFile, uintptr(fds[i]), uintptr(fds[j]), 0)
			if errno != 0 {
				return fmt.Errorf("kcmp fds %d and %d: %w", fds[i], fds[j], errno)
			}
			if r == 0 {
				return fmt.Errorf("fds %d and %d (queues %d and %d) are one open file: %w", fds[i], fds[j], i, j, ErrNotAdoptable)
			}
		}
	}
	return nil
}

// kcmpFile is KCMP_FILE (linux/kcmp.h); golang.org/x/sys/unix lacks it.
const kcmpFile = 0

// Fds returns the queues' fds, in queue order: what a successor adopts
// (handed over, or kept in systemd's fd store). They stay the Device's.
func (d *Device) Fds() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	fds := make([]int, len(d.queues))
	for i, q := range d.queues {
		fds[i] = q.fd
	}
	return fds
}

// Backlog sums the queues' Backlog: the frames an adopted interface's
// queues held when it was adopted (and any that joined them before each
// was first read empty), delivered since; drained once every queue was
// read empty.
func (d *Device) Backlog() (frames uint64, drained bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	drained = true
	for _, q := range d.queues {
		n, done := q.Backlog()
		frames += n
		drained = drained && done
	}
	return frames, drained
}

// Persist makes the interface persistent (TUNSETPERSIST), or not: a
// persistent interface outlives its last queue fd, carrier down, for the
// next kbridge to adopt (OpenPersistent); `kbridge cleanup` removes it.
func (d *Device) Persist(on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queues) == 0 {
		return fmt.Errorf("tap: %w", ErrClosed)
	}
	v := 0
	if on {
		v = 1
	}
	if err := unix.IoctlSetInt(d.queues[0].fd, unix.TUNSETPERSIST, v); err != nil {
		return fmt.Errorf("tap: %s: TUNSETPERSIST %d: %w", d.name, v, err)
	}
	return nil
}

// OpenPersistent opens queues queues on TAP name when it is persistent,
// carries kbridge's mark and nobody holds it (linkUse.orphan): what a
// kbridge stopped with interface.on_stop: keep, or killed after it, left.
// It returns nil fds and no error when there is no such interface; one in
// use wraps ErrInUse. The fds are Adopt's to check.
func OpenPersistent(name string, queues int) ([]int, error) {
	l, err := findTAP(name)
	if l == nil || err != nil {
		return nil, err
	}
	t, ok := l.(*netlink.Tuntap)
	if !ok || t.NonPersist {
		return nil, nil
	}
	if _, _, marked := markedOwner(l.Attrs().Alias); !marked {
		return nil, nil
	}
	if err := useOf(l).orphan(name); err != nil {
		return nil, err
	}
	var fds []int
	for range queues {
		fd, err := openQueue(name, false)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("tap: %s: open a queue of the persistent interface: %w", name, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// sameMAC reports whether two spellings name one hardware address.
func sameMAC(a, b string) bool {
	x, errx := net.ParseMAC(a)
	y, erry := net.ParseMAC(b)
	return errx == nil && erry == nil && x.String() == y.String()
}

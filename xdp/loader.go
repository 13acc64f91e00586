package xdp

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/xdp/xdpconfig"
)

// Path is an attached XDP redirect path. Close it to detach.
type Path struct {
	mu     sync.Mutex
	closed bool

	cfg Config
	log *slog.Logger
	nl  *netlink.Handle

	objs steerObjects

	nicIndex   int
	peerIndex  int       // outer end of the exception veth
	nicLink    link.Link // nil with loader pmd
	returnLink link.Link
	napiLink   link.Link // XDP_PASS on kb0 when napi: xdp
	mode       Mode      // how kbridge_steer sits on the NIC
	returnMode Mode

	vethIndex     int  // inner end; deleting it removes both ends
	pinsOwned     bool // the pins in cfg.PinPath are this Path's to remove
	promiscSet    bool
	createdDirs   []string
	objectFile    string
	createdObjDir string
	warnings      []string
}

// Object returns a copy of the compiled BPF object (steer_bpfel.o). Its
// first program is kbridge_steer, which is what DPDK's net_af_xdp attaches
// when given the file with xdp_prog=.
func Object() []byte { return bytes.Clone(_SteerBytes) }

// Attach validates cfg and builds the path: pinned maps, the exception veth,
// kbridge_return on the veth's outer end and (with loader kbridge)
// kbridge_steer on the NIC. On error everything done so far is undone.
func Attach(cfg Config) (*Path, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Every step below must see the same network namespace: the one of the
	// thread we were called on.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("xdp: raise memlock limit: %w", err)
	}
	// A handle in the current namespace: NewHandleAt would setns(2) into
	// it, which needs CAP_SYS_ADMIN even for the namespace we are in, and
	// the systemd unit does not grant it. The sockets stay in the
	// namespace they were created in.
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("xdp: netlink: %w", err)
	}
	p := &Path{cfg: cfg, log: cfg.Logger, nl: nl}
	if err := p.setup(); err != nil {
		if cerr := p.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("xdp: undo: %w", cerr))
		}
		return nil, err
	}
	return p, nil
}

func (p *Path) setup() error {
	cfg := p.cfg
	nic, err := p.nl.LinkByName(cfg.NIC)
	if err != nil {
		return fmt.Errorf("xdp: nic %q: %w (%w)", cfg.NIC, ErrNoDevice, err)
	}
	p.nicIndex = nic.Attrs().Index
	if len(nic.Attrs().HardwareAddr) != 6 {
		return fmt.Errorf("xdp: nic %q is not an Ethernet device: %w", cfg.NIC, ErrNotSupported)
	}

	nicProg, err := p.checkNICProgram(nic)
	if err != nil {
		return err
	}

	created, mounted, err := ensurePinDir(cfg.PinPath)
	p.createdDirs = created
	if mounted {
		p.log.Info("xdp: mounted bpffs", "path", DefaultPinRoot)
	}
	if err != nil {
		return fmt.Errorf("xdp: %w", err)
	}
	if err := p.claimPins(nicProg); err != nil {
		return err
	}

	// A veth the kbridge before this one left (a crash, a stop with
	// interface.on_stop: keep, or a PMD's program redirecting into it) is
	// kept: kb0's ifindex, addresses, routes and neighbours survive.
	if err := p.createVeth(nic, true); err != nil {
		return err
	}

	spec, err := loadSteer()
	if err != nil {
		return fmt.Errorf("xdp: %w", err)
	}
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: cfg.PinPath}}
	if err := spec.LoadAndAssign(&p.objs, opts); err != nil {
		return fmt.Errorf("xdp: load BPF objects: %w", err)
	}

	peer, err := p.nl.LinkByName(cfg.ExceptionPeer)
	if err != nil {
		return fmt.Errorf("xdp: exception peer %q: %w", cfg.ExceptionPeer, err)
	}
	p.peerIndex = peer.Attrs().Index
	if err := p.SetRules(cfg.FastPath, cfg.XSKFallback); err != nil {
		return err
	}

	if cfg.NAPI == NAPIXDP {
		l, _, err := p.attach(p.objs.KbridgePass, p.vethIndex, cfg.Exception, ModeNative)
		if err != nil {
			return err
		}
		p.napiLink = l
	}

	// The NIC program decides the mode of the return program: a NIC that
	// only takes generic XDP will not take native redirects (ndo_xdp_xmit)
	// either, while generic redirects work into any device.
	returnMode := cfg.Mode
	if cfg.Loader == LoaderKbridge {
		l, mode, err := p.attach(p.objs.KbridgeSteer, p.nicIndex, cfg.NIC, cfg.Mode)
		if err != nil {
			return err
		}
		p.nicLink, p.mode = l, mode
		returnMode = mode
	}
	l, mode, err := p.attach(p.objs.KbridgeReturn, p.peerIndex, cfg.ExceptionPeer, returnMode)
	if err != nil {
		return err
	}
	p.returnLink, p.returnMode = l, mode

	if err := p.setPromisc(nic); err != nil {
		return err
	}
	if cfg.ObjectFile != "" {
		if err := p.writeObject(); err != nil {
			return err
		}
	}
	p.nicWarnings(nic)
	return nil
}

// checkNICProgram refuses a NIC that already runs someone else's XDP
// program. With loader pmd, a kbridge_steer attached by the PMD is expected;
// its ID is returned so that claimPins can accept its maps.
func (p *Path) checkNICProgram(nic netlink.Link) (ebpf.ProgramID, error) {
	x := nic.Attrs().Xdp
	if x == nil || !x.Attached || x.ProgId == 0 {
		return 0, nil
	}
	name := "?"
	if prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId)); err == nil {
		if info, err := prog.Info(); err == nil {
			name = info.Name
		}
		prog.Close()
	} else if errors.Is(err, unix.EPERM) {
		name = "? (reading a program by id needs CAP_SYS_ADMIN)"
	}
	if p.cfg.Loader == LoaderPMD && name == steerProgKbridgeSteer {
		return ebpf.ProgramID(x.ProgId), nil
	}
	return 0, fmt.Errorf("xdp: nic %q runs program id %d (%s): %w", p.cfg.NIC, x.ProgId, name, ErrBusy)
}

// claimPins decides what to do with maps already pinned in the pin path.
// Pins that no loaded program uses are left over from a crash and are
// removed: reusing them would carry over old counters. Pins in use belong to
// a live path (the same NIC name in another namespace, or another kbridge
// with loader pmd, which shares the bpffs root) and are refused, except the
// ones used by the PMD's kbridge_steer on our own NIC.
func (p *Path) claimPins(nicProg ebpf.ProgramID) error {
	dir := p.cfg.PinPath
	if !pinsPresent(dir) {
		p.pinsOwned = true
		return nil
	}
	users, err := pinUsers(dir)
	if err != nil {
		return fmt.Errorf("xdp: %w", err)
	}
	if len(users) == 0 {
		p.log.Warn("xdp: removing stale pinned maps", "path", dir)
		if err := removePins(dir); err != nil {
			return fmt.Errorf("xdp: %w", err)
		}
		p.pinsOwned = true
		return nil
	}
	// The PMD's libbpf loads every program of the object, so besides its
	// kbridge_steer on our NIC its unattached kbridge_return and
	// kbridge_pass use the maps too. Another path shows up as another
	// kbridge_steer (or as users while our NIC runs no kbridge_steer).
	_, ours := users[nicProg]
	for id, name := range users {
		if !ours || (name == steerProgKbridgeSteer && id != nicProg) {
			return fmt.Errorf("xdp: maps pinned in %s are in use by program id %d (%s): %w", dir, id, name, ErrBusy)
		}
	}
	p.pinsOwned = true // the PMD's program shares them with us from now on
	return nil
}

// attach puts prog on ifindex. With ModeAuto a refused native attach is
// retried in generic mode and the reason is logged and kept as a warning.
func (p *Path) attach(prog *ebpf.Program, ifindex int, ifname string, mode Mode) (link.Link, Mode, error) {
	name := progName(prog)
	try := func(flags link.XDPAttachFlags) (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	}
	switch mode {
	case ModeGeneric:
		l, err := try(link.XDPGenericMode)
		if err != nil {
			return nil, "", fmt.Errorf("xdp: attach %s to %s in generic mode: %w", name, ifname, err)
		}
		return l, ModeGeneric, nil
	case ModeNative, ModeAuto:
		l, err := try(link.XDPDriverMode)
		if err == nil {
			return l, ModeNative, nil
		}
		if mode == ModeNative {
			return nil, "", fmt.Errorf("xdp: attach %s to %s in native mode: %w (%w)", name, ifname, ErrNotSupported, err)
		}
		l, gerr := try(link.XDPGenericMode)
		if gerr != nil {
			return nil, "", fmt.Errorf("xdp: attach %s to %s: native: %w; generic: %w", name, ifname, err, gerr)
		}
		p.warn("native XDP refused, running in generic (SKB) mode: every frame now costs an skb and the fast path loses most of its advantage",
			"interface", ifname, "native_error", err)
		return l, ModeGeneric, nil
	}
	return nil, "", fmt.Errorf("xdp: mode %q: %w", mode, ErrInvalidConfig)
}

func progName(prog *ebpf.Program) string {
	if info, err := prog.Info(); err == nil {
		return info.Name
	}
	return prog.String()
}

// warn logs and keeps a warning; args are slog key-value pairs.
func (p *Path) warn(msg string, args ...any) {
	p.log.Warn("xdp: "+msg, args...)
	var b strings.Builder
	b.WriteString(msg)
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %v=%v", args[i], args[i+1])
	}
	p.warnings = append(p.warnings, b.String())
}

// setPromisc puts the NIC into promiscuous mode when kb0's MAC is not the
// NIC's (the NIC would filter kb0's unicast frames) or when asked to.
func (p *Path) setPromisc(nic netlink.Link) error {
	differs := p.cfg.MAC != "" && !bytes.Equal(mustMAC(p.cfg.MAC), nic.Attrs().HardwareAddr)
	if !p.cfg.Promisc && !differs {
		return nil
	}
	if nic.Attrs().Promisc != 0 {
		return nil // already on; not ours to turn off later
	}
	if err := p.nl.SetPromiscOn(nic); err != nil {
		return fmt.Errorf("xdp: promiscuous mode on %s: %w", p.cfg.NIC, err)
	}
	p.promiscSet = true
	return nil
}

func (p *Path) writeObject() error {
	dir := filepath.Dir(p.cfg.ObjectFile)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("xdp: object_file: %w", err)
		}
		p.createdObjDir = dir
	}
	if err := os.WriteFile(p.cfg.ObjectFile, _SteerBytes, 0o644); err != nil {
		return fmt.Errorf("xdp: object_file: %w", err)
	}
	p.objectFile = p.cfg.ObjectFile
	return nil
}

// nicWarnings reports facts about the NIC that Attach cannot fix.
func (p *Path) nicWarnings(nic netlink.Link) {
	if nic.Attrs().Flags&net.FlagUp == 0 {
		p.warn("nic is down: nothing flows until it is up", "nic", p.cfg.NIC)
	}
	if nic.Type() == "veth" && p.returnMode == ModeNative {
		p.warn("nic is a veth: frames returned from kb0 are dropped unless the nic's peer has NAPI "+
			"(GRO on, or an XDP program), and TCP needs tx checksum offload off on the peer",
			"nic", p.cfg.NIC)
	}
}

// pmdProgramAttached: with loader pmd kbridge never attaches to the NIC,
// so a program there is the DPDK app's (netlink, no CAP_SYS_ADMIN needed).
func (p *Path) pmdProgramAttached() bool {
	if p.nicIndex == 0 || p.nl == nil {
		return false
	}
	nic, err := p.nl.LinkByIndex(p.nicIndex)
	if err != nil {
		return false
	}
	x := nic.Attrs().Xdp
	return x != nil && x.Attached && x.ProgId != 0
}

func mustMAC(s string) []byte {
	m, err := xdpconfig.ParseUnicastMAC(s)
	if err != nil {
		panic(err) // Validate ran before
	}
	return m
}

// Mode reports how kbridge_steer is attached to the NIC ("" with loader pmd).
func (p *Path) Mode() Mode { return p.mode }

// ReturnMode reports how kbridge_return is attached to the exception peer.
func (p *Path) ReturnMode() Mode { return p.returnMode }

// Warnings lists what Attach had to warn about (also logged).
func (p *Path) Warnings() []string { return append([]string(nil), p.warnings...) }

// Config returns the configuration in effect, defaults filled in.
func (p *Path) Config() Config { return p.cfg }

// XSKMap is the XSKMAP indexed by rx queue. An in-process AF_XDP user puts
// its socket's fd at its queue's index.
func (p *Path) XSKMap() *ebpf.Map { return p.objs.XsksMap }

// SetRules replaces the fast-path rules and the fallback at run time. The
// program reads them per frame; no detach is needed. The update is one map
// write but not atomic for readers: a frame classified during it may see a
// mix of the old and the new rule set.
func (p *Path) SetRules(rules []Rule, fallback Fallback) error {
	kc, err := compileRules(rules, fallback)
	if err != nil {
		return err
	}
	kc.ExceptionIfindex = uint32(p.peerIndex)
	kc.EgressIfindex = uint32(p.nicIndex)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.objs.SteerConfig == nil {
		return ErrClosed
	}
	if err := p.objs.SteerConfig.Put(uint32(0), kc); err != nil {
		return fmt.Errorf("xdp: update steer_config: %w", err)
	}
	return nil
}

// SetKeepVeth says whether Close leaves the exception veth (Config.KeepVeth).
func (p *Path) SetKeepVeth(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.KeepVeth = on
}

// Close detaches the programs, removes the pins, the exception veth (unless
// Config.KeepVeth), the object file and the promiscuous flag kbridge set.
// It is safe to call more than once and after a partial Attach.
func (p *Path) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true

	// With loader pmd the DPDK app's kbridge_steer may still be on the NIC,
	// using the pinned maps (steer_config holds kb0-x's ifindex). Then the
	// pins and the exception veth stay for it and for the next kbridge,
	// whose Attach adopts both: a restart keeps the exception path and
	// its rule changes reach the app's program. They go with the last
	// Close after the app is gone.
	handOver := p.cfg.Loader == LoaderPMD && p.pmdProgramAttached()
	if handOver {
		p.log.Info("xdp: the DPDK app's program is still on the nic: leaving the pinned maps and the exception veth to it",
			"nic", p.cfg.NIC, "pin_path", p.cfg.PinPath, "interface", p.cfg.Exception)
	}

	var errs []error
	for _, l := range []link.Link{p.nicLink, p.returnLink, p.napiLink} {
		if l != nil {
			if err := l.Close(); err != nil {
				errs = append(errs, fmt.Errorf("detach: %w", err))
			}
		}
	}
	p.nicLink, p.returnLink, p.napiLink = nil, nil, nil
	if err := p.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close BPF objects: %w", err))
	}
	p.objs = steerObjects{}
	if p.pinsOwned && !handOver {
		if err := removePins(p.cfg.PinPath); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(p.createdDirs) - 1; i >= 0; i-- {
		// A parent such as /sys/fs/bpf/kbridge may hold other NICs' pins
		// by now; it goes with the last of them.
		err := os.Remove(p.createdDirs[i])
		if err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove pin directory: %w", err))
		}
	}
	if len(p.createdDirs) > 0 {
		if parent := filepath.Dir(p.cfg.PinPath); parent == filepath.Join(DefaultPinRoot, "kbridge") {
			os.Remove(parent) // the shared parent goes with the last path, whoever created it
		}
	}
	if handOver || p.cfg.KeepVeth {
		if !handOver {
			p.log.Info("xdp: leaving the exception veth for the next kbridge (interface.on_stop: keep)", "interface", p.cfg.Exception)
		}
		p.vethIndex = 0
	}
	if err := p.deleteVeth(); err != nil {
		errs = append(errs, err)
	}
	if p.promiscSet {
		if nic, err := p.nl.LinkByIndex(p.nicIndex); err == nil {
			if err := p.nl.SetPromiscOff(nic); err != nil {
				errs = append(errs, fmt.Errorf("promiscuous mode off on %s: %w", p.cfg.NIC, err))
			}
		}
	}
	if p.objectFile != "" && !handOver { // the app may need it again
		if err := os.Remove(p.objectFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if p.createdObjDir != "" {
		os.Remove(p.createdObjDir) // only if empty; others may share it
	}
	p.nl.Close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xdp: close: %w", err)
	}
	return nil
}

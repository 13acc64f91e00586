package tap

import (
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Who may attach a queue to kbridge's TAP. The TUN driver lets any process
// of the interface's network namespace that can open /dev/net/tun (mode
// 0666 on most distributions) attach one more queue to an existing
// multi-queue TAP with TUNSETIFF, unless the interface has an owner or a
// group that process is not (tun_not_capable) and it lacks CAP_NET_ADMIN.
// An attached queue reads its share of the frames the kernel sends toward
// the app, writes frames as if from the wire, and from its fd can turn the
// carrier off, switch the offloads and make the interface persistent and
// its own. So the first queue gives the interface kbridge's own euid and
// egid as owner and group before anything else happens to it (Create,
// Recreate), and an adopted interface (Adopt) gets them if it had others
// or none, saying so.

// access is an interface's owner and group and the queues attached, as
// the kernel reports them (IFLA_TUN_OWNER, IFLA_TUN_GROUP, present only
// when set; IFLA_TUN_NUM_QUEUES and the disabled ones).
type access struct {
	owner, group int64 // -1: none, and any user may attach
	queues       int
}

// String says who may attach, as a log reads it.
func (a access) String() string {
	id := func(v int64) string {
		if v < 0 {
			return "none"
		}
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("owner %s, group %s", id(a.owner), id(a.group))
}

// ours reports whether only kbridge's user (and group) may attach.
func (a access) ours() bool {
	return a.owner == int64(os.Geteuid()) && a.group == int64(os.Getegid())
}

// readAccess reads the access of the TAP with ifindex index in this
// thread's network namespace. vishvananda/netlink's Tuntap reports a
// missing owner as uid 0, which would hide an interface anyone may join
// from a kbridge that runs as root: the attributes are read here.
func readAccess(index int) (access, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return access{}, fmt.Errorf("read the TAP's owner: %w", err)
	}
	if len(msgs) != 1 || len(msgs[0]) < unix.SizeofIfInfomsg {
		return access{}, fmt.Errorf("read the TAP's owner: %d answers", len(msgs))
	}
	a := access{owner: -1, group: -1}
	data, err := tunData(msgs[0][unix.SizeofIfInfomsg:])
	if err != nil {
		return access{}, fmt.Errorf("read the TAP's owner: %w", err)
	}
	for _, d := range data {
		if len(d.Value) < 4 {
			continue
		}
		v := nl.NativeEndian().Uint32(d.Value)
		switch d.Attr.Type {
		case unix.IFLA_TUN_OWNER:
			a.owner = int64(v)
		case unix.IFLA_TUN_GROUP:
			a.group = int64(v)
		case unix.IFLA_TUN_NUM_QUEUES, unix.IFLA_TUN_NUM_DISABLED_QUEUES:
			a.queues += int(v)
		}
	}
	return a, nil
}

// tunData returns the IFLA_INFO_DATA attributes of a link message's
// attributes b: the TUN driver's.
func tunData(b []byte) ([]syscall.NetlinkRouteAttr, error) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return nil, err
	}
	for _, a := range attrs {
		if a.Attr.Type != unix.IFLA_LINKINFO {
			continue
		}
		info, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return nil, err
		}
		for _, i := range info {
			if i.Attr.Type != unix.IFLA_INFO_DATA {
				continue
			}
			return nl.ParseRouteAttr(i.Value)
		}
	}
	return nil, fmt.Errorf("no TUN attributes: %w", ErrNotTAP)
}

// setAccess gives the interface of queue fd this process's euid and egid
// as owner and group: from then on only they, and processes with
// CAP_NET_ADMIN over its namespace, may attach a queue.
func setAccess(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.TUNSETOWNER, os.Geteuid()); err != nil {
		return fmt.Errorf("TUNSETOWNER %d: %w", os.Geteuid(), err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETGROUP, os.Getegid()); err != nil {
		return fmt.Errorf("TUNSETGROUP %d: %w", os.Getegid(), err)
	}
	return nil
}

// takeAccess makes an adopted interface kbridge's alone (setAccess) when
// its owner or group is another's or none, saying so, and returns the
// queues attached that are not kbridge's: more than held (the fds it
// adopted or opened) plus closed (handed fds it closed, which whoever
// handed them may hold a while longer, as systemd's fd store does) is a
// queue another process attached, which reads a share of the frames the
// kernel sends toward the app. Those are logged, with the holders a scan
// of /proc finds; kbridge cannot detach them, and making the interface
// anew would fail while they hold it.
func takeAccess(fd int, l linkRef, held, closed int, log *slog.Logger) (foreign int, err error) {
	a, err := readAccess(l.index)
	if err != nil {
		return 0, err
	}
	if !a.ours() {
		log.Warn("the adopted interface let other users attach queues: owner and group set to kbridge's",
			"interface", l.name, "was", a.String(), "owner", os.Geteuid(), "group", os.Getegid())
		if err := setAccess(fd); err != nil {
			return 0, err
		}
	}
	if foreign = a.queues - held - closed; foreign > 0 {
		pids, _ := holders(l.name)
		log.Error("queues kbridge does not hold are attached to the adopted interface: whoever holds them reads a share of "+
			"the frames the kernel sends toward the app and can write frames as if from the wire; stop them",
			"interface", l.name, "foreign_queues", foreign, "attached", a.queues, "kbridge_holds", held, "holders", pids)
	}
	return max(foreign, 0), nil
}

// linkRef names an interface by name and ifindex.
type linkRef struct {
	name  string
	index int
}

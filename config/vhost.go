package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kbridge/kbridge/internal/conferr"
)

// Vhost configures mode vhost.
type Vhost struct {
	// Socket is the vhost-user socket. Empty: /run/kbridge/<interface.name>.sock.
	Socket string `mapstructure:"socket" json:"socket"`
	// Client makes kbridge connect to the socket, for an app whose
	// virtio-user port runs with server=1 (it then reconnects to a
	// restarted kbridge by itself).
	Client bool `mapstructure:"client" json:"client"`
	// Queues is the number of queue pairs (the app's queues=N).
	Queues int `mapstructure:"queues" json:"queues"`
	// EALArgs are extra arguments for kbridge's own EAL (a primary, run
	// --in-memory unless these give a --file-prefix).
	EALArgs []string `mapstructure:"eal_args" json:"eal_args,omitempty"`
	// PoolSize is the number of mbufs in kbridge's own pool.
	PoolSize int `mapstructure:"pool_size" json:"pool_size"`
	// SocketMode is the socket file's mode (server: set once librte_vhost
	// made it), in octal. connect() needs write permission on it.
	SocketMode string `mapstructure:"socket_mode" json:"socket_mode"`
	// SocketGroup is the socket file's group, a name or a gid; empty:
	// kbridge's own. A peer whose gid it is passes the peer check too.
	SocketGroup string `mapstructure:"socket_group" json:"socket_group,omitempty"`
	// AllowUIDs are the peers (SO_PEERCRED) kbridge serves, or, as a
	// client, serves through, besides root and kbridge's own uid.
	AllowUIDs []int `mapstructure:"allow_uids" json:"allow_uids,omitempty"`
}

// VhostSocketMode returns vhost.socket_mode as a mode (valid: see
// validateVhost).
func (v Vhost) VhostSocketMode() os.FileMode {
	m, _ := strconv.ParseUint(v.SocketMode, 8, 32)
	return os.FileMode(m)
}

// sunPathMax is the longest socket path sockaddr_un holds, its NUL aside.
const sunPathMax = 107

// DefaultVhost returns the vhost section an empty file gets.
// 0600: only kbridge's uid (root) and root may connect until the
// operator names a group for the app (vhost.socket_group, mode 0660).
func DefaultVhost() Vhost { return Vhost{Queues: 1, PoolSize: 8192, SocketMode: "0600"} }

// VhostSocket returns the socket path in force.
func (c Config) VhostSocket() string {
	if c.Vhost.Socket != "" {
		return c.Vhost.Socket
	}
	return "/run/kbridge/" + c.Interface.Name + ".sock"
}

// validateVhost checks the vhost section.
func (c Config) validateVhost(errs *conferr.Collector) {
	v := c.Vhost
	if s := v.Socket; s != "" && (!filepath.IsAbs(s) || len(s) > sunPathMax || strings.HasSuffix(s, "/")) {
		errs.Addf("vhost.socket", s, "must be an absolute file path of at most %d bytes (a unix socket), or empty for /run/kbridge/<interface.name>.sock", sunPathMax)
	} else if s == "" && len(c.VhostSocket()) > sunPathMax {
		errs.Addf("vhost.socket", s, "the default %s is longer than %d bytes: set a shorter path", c.VhostSocket(), sunPathMax)
	}
	if v.Queues < 1 || v.Queues > 16 {
		errs.Add("vhost.queues", v.Queues, "must be between 1 and 16 (the app's virtio-user queues=N)")
	}
	if v.PoolSize < 1024 || v.PoolSize > 1<<20 {
		errs.Add("vhost.pool_size", v.PoolSize, "must be between 1024 and 1048576 mbufs")
	}
	if m, err := strconv.ParseUint(v.SocketMode, 8, 32); err != nil || m&^0o777 != 0 {
		errs.Add("vhost.socket_mode", v.SocketMode, "must be permission bits in octal, e.g. \"0600\" or \"0660\"")
	} else if v.SocketGroup != "" && m&0o020 == 0 {
		errs.Add("vhost.socket_mode", v.SocketMode, "lets no member of vhost.socket_group connect (connect needs write permission): use \"0660\"")
	}
	for i, u := range v.AllowUIDs {
		if u < 0 || u > 1<<32-2 {
			errs.Add(conferr.Index("vhost.allow_uids", i), u, "must be a uid, 0 to 4294967294")
		}
	}
	for i, a := range v.EALArgs {
		for _, owned := range []string{"--proc-type", "-l", "--lcores", "-c", "--vdev", "-a", "--allow", "-b", "--block"} {
			if a == owned || strings.HasPrefix(a, owned+"=") {
				errs.Addf(conferr.Index("vhost.eal_args", i), a, "kbridge sets %s itself (its EAL is a primary with no devices)", owned)
			}
		}
	}
}

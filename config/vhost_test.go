package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/internal/conferr"
)

func TestVhostDefaultsAndValidation(t *testing.T) {
	c := Default()
	c.Mode = ModeVhost
	if err := c.Validate(); err != nil {
		t.Fatalf("default vhost config: %v", err)
	}
	if got, want := c.VhostSocket(), "/run/kbridge/"+c.Interface.Name+".sock"; got != want {
		t.Fatalf("VhostSocket = %q, want %q", got, want)
	}
	if m := c.Vhost.VhostSocketMode(); m != 0o600 {
		t.Errorf("default socket mode %o, want 0600", m)
	}
	c.Vhost = Vhost{Socket: "rel.sock", Queues: 17, PoolSize: 10, EALArgs: []string{"--lcores=1"},
		SocketMode: "0999", AllowUIDs: []int{-1}}
	err := c.Validate()
	if !errors.Is(err, conferr.ErrInvalid) {
		t.Fatalf("want a conferr error, got %v", err)
	}
	for _, key := range []string{"vhost.socket", "vhost.queues", "vhost.pool_size", "vhost.eal_args[0]",
		"vhost.socket_mode", "vhost.allow_uids[0]"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
}

func TestVhostSocketGroupNeedsGroupWrite(t *testing.T) {
	c := Default()
	c.Mode = ModeVhost
	c.Vhost.SocketGroup = "kbapp"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "vhost.socket_mode") {
		t.Fatalf("a group with mode 0600: %v", err)
	}
	c.Vhost.SocketMode = "0660"
	if err := c.Validate(); err != nil {
		t.Fatalf("a group with mode 0660: %v", err)
	}
	if m := c.Vhost.VhostSocketMode(); m != 0o660 {
		t.Errorf("mode %o, want 0660", m)
	}
}

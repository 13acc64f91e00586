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
	c.Vhost = Vhost{Socket: "rel.sock", Queues: 17, PoolSize: 10, EALArgs: []string{"--lcores=1"}}
	err := c.Validate()
	if !errors.Is(err, conferr.ErrInvalid) {
		t.Fatalf("want a conferr error, got %v", err)
	}
	for _, key := range []string{"vhost.socket", "vhost.queues", "vhost.pool_size", "vhost.eal_args[0]"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
}

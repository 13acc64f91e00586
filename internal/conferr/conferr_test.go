package conferr_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kbridge/kbridge/internal/conferr"
)

type mode string

func TestFieldErrorMessage(t *testing.T) {
	for _, c := range []struct {
		err  *conferr.FieldError
		want string
	}{
		{conferr.New("interface.mtu", 40, "too small"), "interface.mtu: 40: too small"},
		{conferr.New("port", "", "required"), `port: "": required`},
		{conferr.New("policy.mode", mode("turbo"), "no such mode"), `policy.mode: "turbo": no such mode`},
		{conferr.New("policy.spin", 10*time.Microsecond, "x"), "policy.spin: 10µs: x"},
		{conferr.New("colour", nil, "unknown key"), "colour: unknown key"},
		{conferr.Errorf("a", 1, "max %d", 2), "a: 1: max 2"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestKeys(t *testing.T) {
	if got := conferr.Key("interface", "mtu"); got != "interface.mtu" {
		t.Error(got)
	}
	if got := conferr.Key("", "port", ""); got != "port" {
		t.Error(got)
	}
	if got := conferr.Key("interface", conferr.Index("routes", 2), "via"); got != "interface.routes[2].via" {
		t.Error(got)
	}
	if got := conferr.Key("xdp.fast_path", "[1]"); got != "xdp.fast_path[1]" {
		t.Error(got)
	}
}

func TestCollectorReportsAll(t *testing.T) {
	var c conferr.Collector
	if c.Err() != nil {
		t.Fatal("empty collector has an error")
	}
	sub := conferr.Collector{Prefix: "policy"}
	sub.Add("spin", -time.Nanosecond, "must not be negative")
	sub.Add("mode", "x", "unknown")
	c.Add("port", "", "required")
	c.Include(sub.Err())
	c.Include(nil)
	other := fmt.Errorf("dpdk: %w", conferr.New("wait", 1, "x"))
	c.Include(other)

	err := c.Err()
	const want = `port: "": required; policy.spin: -1ns: must not be negative; policy.mode: "x": unknown; dpdk: wait: 1: x`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	var l conferr.List
	if !errors.As(err, &l) || len(l) != 4 {
		t.Fatalf("not a flat List of 4: %#v", err)
	}
	if !errors.Is(err, conferr.ErrInvalid) {
		t.Error("errors.Is(ErrInvalid) false")
	}
	var fe *conferr.FieldError
	if !errors.As(fmt.Errorf("config x.yaml: %w", err), &fe) || fe.Key != "port" {
		t.Errorf("errors.As through a wrap: %v", fe)
	}
	if errors.Is(errors.New("no such file"), conferr.ErrInvalid) {
		t.Error("a plain error is a config error")
	}
}

func TestPrefix(t *testing.T) {
	var c conferr.Collector
	c.Add("ports", "0", "out of range")
	c.Add("", nil, "empty rule")
	err := conferr.Prefix("xdp.fast_path[1]", c.Err())
	const want = `xdp.fast_path[1].ports: "0": out of range; xdp.fast_path[1]: empty rule`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	if c.Err().Error() != `ports: "0": out of range; empty rule` {
		t.Errorf("Prefix changed its argument: %v", c.Err())
	}
	if conferr.Prefix("a", nil) != nil {
		t.Error("Prefix(nil) not nil")
	}
}

func TestKeysOf(t *testing.T) {
	var c conferr.Collector
	c.Add("a", 1, "bad")
	c.Include(conferr.List{conferr.New("b.c", 2, "bad"), conferr.New("d", nil, "bad")})
	keys, err := conferr.KeysOf(c.Err())
	if err != nil || !slices.Equal(keys, []string{"a", "b.c", "d"}) {
		t.Errorf("KeysOf = %v, %v", keys, err)
	}
	if keys, err := conferr.KeysOf(conferr.New("x", 1, "bad")); err != nil || !slices.Equal(keys, []string{"x"}) {
		t.Errorf("KeysOf one FieldError = %v, %v", keys, err)
	}
	other := errors.New("not a field")
	if _, err := conferr.KeysOf(conferr.List{conferr.New("a", 1, "bad"), other}); err != other {
		t.Errorf("KeysOf with a plain error returned %v, want it", err)
	}
}

package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func rteVersion(y, m, minor, rel uint32) Version { return Version(y<<24 | m<<16 | minor<<8 | rel) }

func TestVersionString(t *testing.T) {
	for v, want := range map[Version]string{
		rteVersion(22, 11, 11, 99): "22.11.11",
		rteVersion(24, 11, 8, 99):  "24.11.8",
		rteVersion(23, 7, 0, 99):   "23.07.0",
		rteVersion(25, 3, 0, 2):    "25.03.0-rc2",
		rteVersion(19, 11, 3, 16):  "19.11.3",
	} {
		if got := v.String(); got != want {
			t.Errorf("%#x: %q, want %q", uint32(v), got, want)
		}
	}
	if BuiltWith() == 0 || BuiltWith()>>24 < 22 {
		t.Errorf("BuiltWith() = %#x (%s): not a DPDK release", uint32(BuiltWith()), BuiltWith())
	}
}

func TestCheckVersion(t *testing.T) {
	v22, v22old, v24 := rteVersion(22, 11, 11, 99), rteVersion(22, 11, 1, 99), rteVersion(24, 11, 8, 99)
	for _, c := range []struct {
		magic     uint32
		app, mine Version
		refuse    bool
	}{
		{rteMagic, v22, v22, false},
		{rteMagic, v22, v24, true},
		{rteMagic, v24, v22, true},
		{rteMagic, v22old, v22, true}, // EAL compares the minor release too
		{0, 0, v22, false},            // the primary is still starting: EAL decides
		{0, v24, v22, true},           // version is written before the magic
	} {
		err := checkVersion(c.magic, c.app, c.mine)
		if (err != nil) != c.refuse {
			t.Errorf("magic %d app %s mine %s: %v, want refusal %v", c.magic, c.app, c.mine, err, c.refuse)
		}
		if err != nil && !errors.Is(err, ErrVersionMismatch) {
			t.Errorf("%v is not ErrVersionMismatch", err)
		}
	}
	err := checkVersion(rteMagic, v22, v24)
	want := "the app runs DPDK 22.11.11, this kbridge was built with DPDK 24.11.8: build kbridge against the app's DPDK (PKG_CONFIG_PATH=<the directory of the app's libdpdk.pc> make build), or serve the app in mode vhost, which needs no match"
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
	ve := &VersionError{App: v24, Kbridge: v22, PkgConfigDir: "/opt/dpdk-24.11/lib/x86_64-linux-gnu/pkgconfig"}
	want = "the app runs DPDK 24.11.8, this kbridge was built with DPDK 22.11.11: build kbridge against the app's DPDK (PKG_CONFIG_PATH=/opt/dpdk-24.11/lib/x86_64-linux-gnu/pkgconfig make build), or serve the app in mode vhost, which needs no match"
	if ve.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", ve, want)
	}
}

// TestCheckPrimaryVersion reads a primary's shared configuration as EAL
// leaves it: the magic, then RTE_VERSION.
func TestCheckPrimaryVersion(t *testing.T) {
	dir := t.TempDir()
	write := func(prefix string, magic uint32, v Version) {
		var b bytes.Buffer
		_ = binary.Write(&b, binary.NativeEndian, [4]uint32{magic, uint32(v), 0, 0})
		if err := os.MkdirAll(filepath.Join(dir, prefix), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, prefix, "config"), b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other := BuiltWith() + 1<<24 // a year later
	write("same", rteMagic, BuiltWith())
	write("other", rteMagic, other)
	if err := CheckPrimaryVersion(dir, "same"); err != nil {
		t.Errorf("same version: %v", err)
	}
	err := CheckPrimaryVersion(dir, "other")
	var ve *VersionError
	if !errors.As(err, &ve) || ve.App != other || ve.Kbridge != BuiltWith() {
		t.Errorf("other version: %v, want a VersionError naming %s and %s", err, other, BuiltWith())
	}
	if err := CheckPrimaryVersion(dir, "absent"); err != nil {
		t.Errorf("no config file: %v (EAL reports that)", err)
	}
}

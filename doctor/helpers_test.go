package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseCPUMask(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"00000000,00000000", nil},
		{"00000000,00000003", []int{0, 1}},
		{"00000001,00000000", []int{32}},
		{"0x30", []int{4, 5}},
		{"f0", []int{4, 5, 6, 7}},
	} {
		got, err := parseCPUMask(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseCPUMask(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParsePAT(t *testing.T) {
	got := parsePAT(`PAT: [mem 0x00000000fe800000-0x00000000fe900000] write-combining
uncached-minus @ 0xfebf8000-0xfebfc000
garbage line
PAT: [mem 0x0000000080000000-0x0000000090000000] uncached-minus`)
	if len(got) != 3 {
		t.Fatalf("got %d entries, want 3: %+v", len(got), got)
	}
	if got[0].start != 0xfe800000 || got[0].end != 0xfe900000 || got[0].kind != "write-combining" {
		t.Errorf("entry 0 = %+v", got[0])
	}
	if got[1].start != 0xfebf8000 || got[1].kind != "uncached-minus" {
		t.Errorf("entry 1 = %+v", got[1])
	}
	// The PAT end is exclusive, the BAR end inclusive: a mapping that
	// ends where the BAR starts does not overlap it.
	b := bar{start: 0x90000000, end: 0x900fffff}
	if o := overlapping(got, b); len(o) != 0 {
		t.Errorf("adjacent range counted as overlapping: %+v", o)
	}
	b = bar{start: 0xfe800000, end: 0xfe8fffff}
	if o := overlapping(got, b); len(o) != 1 || o[0].kind != "write-combining" {
		t.Errorf("overlap = %+v", o)
	}
}

func TestParseEAL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		prefix  string
		wantNil bool
		lcores  []int
		devargs map[string]string
	}{
		{name: "default prefix", args: []string{"app", "-l", "1-2", "-a", "00:06.0,large_llq_hdr=1"}, prefix: "rte",
			lcores: []int{1, 2}, devargs: map[string]string{"0000:00:06.0": "large_llq_hdr=1"}},
		{name: "attached values", args: []string{"app", "-l1,3", "--file-prefix=x", "-w0000:00:07.0"}, prefix: "x",
			lcores: []int{1, 3}, devargs: map[string]string{"0000:00:07.0": ""}},
		{name: "coremask", args: []string{"app", "-c", "0x6", "--file-prefix", "x"}, prefix: "x", lcores: []int{1, 2}, devargs: map[string]string{}},
		{name: "lcores map", args: []string{"app", "--lcores", "0@3,(1-2)@(5-6)", "--file-prefix", "x"}, prefix: "x", lcores: []int{3, 5, 6}, devargs: map[string]string{}},
		{name: "app args ignored", args: []string{"app", "--file-prefix", "x", "--", "-l", "9"}, prefix: "x", devargs: map[string]string{}},
		{name: "other prefix", args: []string{"app", "--file-prefix", "y"}, prefix: "x", wantNil: true},
		{name: "secondary", args: []string{"app", "--file-prefix", "x", "--proc-type=secondary"}, prefix: "x", wantNil: true},
		{name: "not dpdk", args: []string{"/usr/sbin/sshd", "-D"}, prefix: "rte", wantNil: true},
		{name: "kbridge itself", args: []string{"/usr/local/bin/kbridge", "run", "-c", "/etc/kbridge/kbridge.yaml"}, prefix: "rte", wantNil: true},
		{name: "the reference app is an app", args: []string{"bin/kbridge-refapp", "-l", "1", "--file-prefix", "kbt", "--", "--port", "kb0"}, prefix: "kbt",
			lcores: []int{1}, devargs: map[string]string{}},
		{name: "bad coremask", args: []string{"app", "-c", "zz", "-n", "4"}, prefix: "rte", devargs: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := parseEAL(7, tc.args, tc.prefix)
			if tc.wantNil {
				if app != nil {
					t.Fatalf("got %+v, want nil", app)
				}
				return
			}
			if app == nil {
				t.Fatal("got nil")
			}
			if !slices.Equal(app.lcores, tc.lcores) {
				t.Errorf("lcores %v, want %v", app.lcores, tc.lcores)
			}
			if len(app.devargs) != len(tc.devargs) {
				t.Errorf("devargs %v, want %v", app.devargs, tc.devargs)
			}
			for k, v := range tc.devargs {
				if app.devargs[k] != v {
					t.Errorf("devargs[%s] = %q, want %q", k, app.devargs[k], v)
				}
			}
		})
	}
}

func TestParseInterrupts(t *testing.T) {
	got := parseInterrupts(`           CPU0       CPU1
  24:          1          0  IO-APIC   5-edge      ACPI:Ged
  38:          0       2353 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
  50:          0          0  PCI-MSIX-0000:00:09.0   3-edge
NMI:          0          0   Non-maskable interrupts
ERR:          0`)
	want := []irqLine{{24, "ACPI:Ged"}, {38, "virtio2-input.0"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestLLQDevargs(t *testing.T) {
	for in, want := range map[string]struct {
		large  bool
		policy string
	}{
		"":                           {false, ""},
		"large_llq_hdr=1":            {true, ""},
		"large_llq_hdr=0":            {false, ""},
		"llq_policy=3":               {true, "3"},
		"llq_policy=1,miss_txc_to=5": {false, "1"},
		"enable_llq=0":               {false, "0"},
	} {
		large, policy := llqDevargs(in)
		if large != want.large || policy != want.policy {
			t.Errorf("llqDevargs(%q) = %v, %q; want %v, %q", in, large, policy, want.large, want.policy)
		}
	}
}

func TestFixIRQPartialFailure(t *testing.T) {
	orig := writeAffinity
	t.Cleanup(func() { writeAffinity = orig })
	var wrote []string
	writeAffinity = func(path, cpus string) error {
		if strings.Contains(path, "/40/") {
			return fmt.Errorf("write error: %w", syscall.EIO) // a managed IRQ refuses
		}
		wrote = append(wrote, path)
		return nil
	}
	root := t.TempDir()
	mustWrite(t, root, "sys/devices/system/cpu/online", "0-3")
	mustWrite(t, root, "proc/interrupts", "  CPU0 CPU1 CPU2 CPU3\n 40: 0 0 0 0 PCI-MSI 1-edge eth1-TxRx-0\n 41: 0 0 0 0 PCI-MSI 2-edge eth1-TxRx-1\n")
	mustWrite(t, root, "proc/irq/40/smp_affinity_list", "0-3")
	mustWrite(t, root, "proc/irq/41/smp_affinity_list", "0-3")
	if err := os.MkdirAll(filepath.Join(root, "sys/class/net/eth1"), 0o755); err != nil {
		t.Fatal(err)
	}
	changes, err := FixIRQ(Options{Root: root, NIC: "eth1", AppLcores: []int{3}})
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "IRQ 40") {
		t.Errorf("err = %v, want IRQ 40's EIO", err)
	}
	if len(changes) != 1 || changes[0].IRQ != 41 || changes[0].New != "1" || len(wrote) != 1 {
		t.Errorf("changes %v (wrote %v), want IRQ 41 -> 1 only", changes, wrote)
	}
}

func mustWrite(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

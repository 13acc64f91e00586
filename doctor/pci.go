package doctor

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Amazon's PCI vendor id and the ENA device ids (PF, PF with LLQ, VF, VF
// RSERV0). Other devices of the vendor (EBS NVMe) are not NICs.
const enaVendor = 0x1d0f

var enaDeviceIDs = []uint64{0x0ec2, 0x1ec2, 0xec20, 0xec21}

// Resource flags from include/linux/ioport.h.
const (
	ioresourceMem      = 0x00000200
	ioresourcePrefetch = 0x00002000
)

type bar struct {
	index      int
	start, end uint64 // end inclusive, as sysfs prints it
	flags      uint64
}

type enaDevice struct {
	addr   string // 0000:00:06.0
	device uint64
	driver string // basename of the driver symlink; "" when unbound
	dir    string // sysfs directory, for evidence
	bars   []bar  // prefetchable memory BARs
}

// enaDevices lists ENA devices under /sys/bus/pci/devices once.
func (e *env) enaDevices() ([]enaDevice, error) {
	if e.enaDone {
		return e.ena, e.enaErr
	}
	e.enaDone = true
	e.ena, e.enaErr = scanENA(e)
	return e.ena, e.enaErr
}

func scanENA(e *env) ([]enaDevice, error) {
	base := "/sys/bus/pci/devices"
	ents, err := os.ReadDir(e.path(base))
	if err != nil {
		return nil, fmt.Errorf("list PCI devices: %w", err)
	}
	var devs []enaDevice
	for _, ent := range ents {
		dir := base + "/" + ent.Name()
		vendor, err := readHex(e, dir+"/vendor")
		if err != nil || vendor != enaVendor {
			continue
		}
		device, err := readHex(e, dir+"/device")
		if err != nil || !slices.Contains(enaDeviceIDs, device) {
			continue
		}
		d := enaDevice{addr: ent.Name(), device: device, dir: e.path(dir)}
		if target, err := os.Readlink(e.path(dir + "/driver")); err == nil {
			d.driver = filepath.Base(target)
		}
		bars, err := readBARs(e.path(dir + "/resource"))
		if err != nil {
			return nil, err
		}
		for _, b := range bars {
			if b.flags&ioresourceMem != 0 && b.flags&ioresourcePrefetch != 0 && b.end > b.start {
				d.bars = append(d.bars, b)
			}
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func readHex(e *env, hostPath string) (uint64, error) {
	s, err := e.read(hostPath)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
}

// readBARs parses a sysfs resource file: one "start end flags" line per
// resource, BARs 0-5 first, then the expansion ROM and bridge windows.
func readBARs(path string) ([]bar, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read BARs: %w", err)
	}
	defer f.Close()
	var bars []bar
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan() && i < 6; i++ {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			return nil, fmt.Errorf("%s line %d: want 3 fields, got %q", path, i+1, sc.Text())
		}
		var v [3]uint64
		for j, s := range fs {
			if v[j], err = strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64); err != nil {
				return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
			}
		}
		bars = append(bars, bar{index: i, start: v[0], end: v[1], flags: v[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return bars, nil
}

// patEntry is one line of /sys/kernel/debug/x86/pat_memtype_list.
type patEntry struct {
	start, end uint64 // end exclusive, as the kernel prints it
	kind       string // write-combining, uncached-minus, ...
	line       string
}

// parsePAT reads both formats the kernel has used:
//
//	PAT: [mem 0x00000000fe800000-0x00000000fe900000] write-combining
//	write-combining @ 0xfe800000-0xfe900000
func parsePAT(data string) []patEntry {
	var out []patEntry
	for line := range strings.SplitSeq(data, "\n") {
		line = strings.TrimSpace(line)
		var rng, kind string
		switch {
		case strings.HasPrefix(line, "PAT: [mem "):
			r, k, ok := strings.Cut(strings.TrimPrefix(line, "PAT: [mem "), "]")
			if !ok {
				continue
			}
			rng, kind = r, strings.TrimSpace(k)
		case strings.Contains(line, " @ "):
			k, r, _ := strings.Cut(line, " @ ")
			rng, kind = strings.TrimSpace(r), strings.TrimSpace(k)
		default:
			continue
		}
		lo, hi, ok := strings.Cut(rng, "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(strings.TrimPrefix(lo, "0x"), 16, 64)
		en, err2 := strconv.ParseUint(strings.TrimPrefix(hi, "0x"), 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, patEntry{start: s, end: en, kind: kind, line: line})
	}
	return out
}

// overlapping returns the PAT entries that cover part of the BAR.
func overlapping(pat []patEntry, b bar) []patEntry {
	var out []patEntry
	for _, p := range pat {
		if p.start <= b.end && p.end > b.start {
			out = append(out, p)
		}
	}
	return out
}

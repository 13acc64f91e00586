package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

const patList = "/sys/kernel/debug/x86/pat_memtype_list"

// LLQ header limits: a 128-byte LLQ entry holds two 16-byte descriptors
// and 96 bytes of header; the large (256-byte) entry holds 224.
const (
	llqHeaderNormal = 96
	llqHeaderLarge  = 224
)

// checkENAWC proves the ENA LLQ BAR is mapped write-combining. Without WC
// every LLQ push is a train of uncached 8-byte stores: the known
// throughput and latency loss, and nothing else reports it.
func checkENAWC(_ context.Context, e *env) []Result {
	devs, err := e.enaDevices()
	if r, done := enaPreamble(CheckENAWC, devs, err); done {
		return []Result{r}
	}
	data, err := e.read(patList)
	if err != nil {
		return []Result{patUnreadable(e, devs, err)}
	}
	pat := parsePAT(data)
	var out []Result
	for _, d := range devs {
		out = append(out, wcResult(e, d, pat))
	}
	return out
}

// enaPreamble handles "no PCI bus" and "no ENA device", which end a
// check with one Skip.
func enaPreamble(check string, devs []enaDevice, err error) (Result, bool) {
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Result{Check: check, Status: Skip, Evidence: "no PCI bus: " + err.Error()}, true
		}
		return Result{Check: check, Status: Warn, Evidence: err.Error(), Fix: "run doctor as root"}, true
	}
	if len(devs) == 0 {
		return Result{Check: check, Status: Skip,
			Evidence: "no ENA device (vendor 0x1d0f, device 0ec2/1ec2/ec20/ec21) under /sys/bus/pci/devices"}, true
	}
	return Result{}, false
}

func (d enaDevice) describe() string {
	drv := d.driver
	if drv == "" {
		drv = "no driver"
	}
	s := fmt.Sprintf("ENA %s (device 0x%04x, %s)", d.addr, d.device, drv)
	for _, b := range d.bars {
		s += fmt.Sprintf(", BAR%d 0x%x-0x%x prefetchable", b.index, b.start, b.end)
	}
	return s
}

// patUnreadable explains why the PAT list could not be read: debugfs not
// mounted, no PAT on this kernel, or not root.
func patUnreadable(e *env, devs []enaDevice, err error) Result {
	var names []string
	for _, d := range devs {
		names = append(names, d.describe())
	}
	ev := strings.Join(names, "; ") + "; "
	switch {
	case errors.Is(err, fs.ErrPermission):
		return Result{Check: CheckENAWC, Status: Warn, Evidence: ev + e.path(patList) + ": permission denied",
			Fix: "run kbridge doctor as root (the PAT list is root-only)"}
	case !debugfsMounted(e):
		return Result{Check: CheckENAWC, Status: Warn,
			Evidence: ev + e.path(patList) + " missing: debugfs is not mounted (no debugfs in " + e.path("/proc/mounts") + ")",
			Fix:      "mount -t debugfs none /sys/kernel/debug, then run kbridge doctor again"}
	default:
		return Result{Check: CheckENAWC, Status: Warn,
			Evidence: ev + e.path(patList) + " missing with debugfs mounted: PAT is off (nopat) or this is not x86",
			Fix:      "on x86 boot without nopat; on arm64 (Graviton) check the mapping with the ENA driver's own logs"}
	}
}

func debugfsMounted(e *env) bool {
	for _, m := range readMounts(e) {
		if m.fstype == "debugfs" {
			return true
		}
	}
	return false
}

func wcResult(e *env, d enaDevice, pat []patEntry) Result {
	r := Result{Check: CheckENAWC, Evidence: d.describe()}
	if d.driver == "" {
		r.Status = Skip
		r.Evidence += ": not bound to a driver, nothing maps it"
		return r
	}
	if len(d.bars) == 0 {
		r.Status = Warn
		r.Evidence += ": no prefetchable memory BAR in " + d.dir + "/resource"
		r.Fix = "check the device with lspci -vv -s " + d.addr
		return r
	}
	var hits []patEntry
	for _, b := range d.bars {
		hits = append(hits, overlapping(pat, b)...)
	}
	if len(hits) == 0 {
		r.Status = Warn
		r.Evidence += "; " + e.path(patList) + ": no mapping of the BAR recorded (app not running, or LLQ off)"
		r.Fix = "start the DPDK app and run kbridge doctor again"
		return r
	}
	wc := 0
	var lines []string
	for _, h := range hits {
		if h.kind == "write-combining" {
			wc++
		}
		lines = append(lines, h.line)
	}
	r.Evidence += "; " + e.path(patList) + ": " + strings.Join(lines, " | ")
	switch {
	case wc == len(hits):
		r.Status = Pass
	case wc > 0:
		r.Status = Warn
		r.Evidence += " (some mappings are not write-combining)"
		r.Fix = wcFix(d.driver)
	default:
		r.Status = Fail
		r.Evidence += " (LLQ without write-combining: every push is uncached stores, the known throughput and latency loss)"
		r.Fix = wcFix(d.driver)
	}
	return r
}

// wcFix is the one-line remedy for the driver that holds the device.
func wcFix(driver string) string {
	switch driver {
	case "igb_uio":
		return "reload igb_uio with wc_activate=1 (rmmod igb_uio; modprobe igb_uio wc_activate=1), rebind, restart the app"
	case "vfio-pci":
		return "use a vfio-pci built with the ENA WC patch for this exact kernel (amzn-drivers get-vfio-with-wc.sh; it can fail silently on newer kernels), or igb_uio wc_activate=1"
	case "uio_pci_generic":
		return "uio_pci_generic cannot map write-combining: bind to igb_uio wc_activate=1 or a WC-patched vfio-pci"
	case "ena":
		return "the kernel ena driver maps LLQ write-combining itself: uncached means PAT is off (nopat) or an old driver"
	}
	return "bind the device to igb_uio (wc_activate=1) or a WC-patched vfio-pci"
}

// checkENALLQHeader compares the largest header the exception path
// carries with what one LLQ entry can push.
func checkENALLQHeader(_ context.Context, e *env) []Result {
	devs, err := e.enaDevices()
	if r, done := enaPreamble(CheckENALLQHeader, devs, err); done {
		return []Result{r}
	}
	hdr, hdrSrc := e.opts.MaxHeaderBytes, "configured max header"
	if hdr <= 0 {
		hdr, hdrSrc = DefaultMaxHeaderBytes, "worst case Eth 14 + VLAN 4 + IPv6 40 + TCP with options 60"
	}
	app := e.findApp()
	var out []Result
	for _, d := range devs {
		if d.driver == "ena" || d.driver == "" {
			// The kernel driver picks its own LLQ header size; an
			// unbound device carries no traffic.
			out = append(out, Result{Check: CheckENALLQHeader, Status: Skip,
				Evidence: d.describe() + ": not a DPDK port"})
			continue
		}
		out = append(out, llqResult(d, hdr, hdrSrc, app))
	}
	return out
}

func llqResult(d enaDevice, hdr int, hdrSrc string, app *appProc) Result {
	r := Result{Check: CheckENALLQHeader}
	ev := fmt.Sprintf("%s; header up to %d bytes (%s); LLQ pushes %d (large LLQ: %d)",
		d.describe(), hdr, hdrSrc, llqHeaderNormal, llqHeaderLarge)
	var devargs string
	var seen bool
	if app != nil {
		devargs, seen = app.devargs[d.addr]
		if seen {
			ev += fmt.Sprintf("; app pid %d devargs %q", app.pid, devargs)
		} else {
			ev += fmt.Sprintf("; app pid %d has no -a %s devargs", app.pid, d.addr)
		}
	} else {
		ev += "; app not found in /proc, its devargs unknown"
	}
	large, policy := llqDevargs(devargs)
	fix := fmt.Sprintf("add devarg -a %s,large_llq_hdr=1 (DPDK 22.11-24.07) or -a %s,llq_policy=3 (DPDK 24.11+)", d.addr, d.addr)
	switch {
	case policy == "0":
		r.Status, r.Fix = Warn, "drop llq_policy=0 / enable_llq=0: without LLQ, 6th-generation and newer instances lose most of their TX performance"
		ev += "; LLQ is disabled"
	case hdr > llqHeaderLarge:
		r.Status, r.Fix = Fail, "reduce the headers the exception path carries (tunnels? IPv6 extension headers?) below 224 bytes"
		ev += ": larger than even a large LLQ entry"
	case hdr <= llqHeaderNormal:
		r.Status = Pass
	case large:
		r.Status = Pass
		ev += ": large LLQ headers are configured"
	case policy == "1":
		r.Status, r.Fix = Warn, fix
		ev += ": llq_policy=1 follows the device's recommendation, which is the 96-byte entry before 5th-generation instances"
	default:
		r.Status, r.Fix = Warn, fix
		ev += ": headers over 96 bytes need large LLQ headers (dropped on instances before 5th generation)"
	}
	r.Evidence = ev
	return r
}

// llqDevargs reads the ENA LLQ devargs: large reports an explicit large
// header request; policy is llq_policy, or "0" when enable_llq=0.
func llqDevargs(devargs string) (large bool, policy string) {
	for kv := range strings.SplitSeq(devargs, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch strings.TrimSpace(k) {
		case "large_llq_hdr":
			large = v == "1"
		case "llq_policy":
			policy = v
			large = large || v == "3"
		case "enable_llq":
			if v == "0" {
				policy = "0"
			}
		}
	}
	return large, policy
}

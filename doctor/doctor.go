// Package doctor checks that a host is set up for kbridge before anyone
// blames the bridge: ENA write-combining and LLQ header size, the kernel
// timer against the polling policy, hugepages, hugetlbfs and the DPDK
// runtime directory, worker CPUs against the app's lcores and CPU isolation,
// what waking a parked worker costs on this host and why (idle states,
// guest halt polling, steal), NIC IRQ affinity, attached XDP programs, and
// which CoPP class a running kbridge is policing now. Run returns one Result per
// check (its status, the evidence it read and a one-line fix), Render prints
// them as text or JSON, and ExitCode turns them into the command's exit
// status. Only PlanIRQ and FixIRQ (kbridge doctor --fix) write anything.
//
// Every check reads files under Options.Root only (XDP goes through an
// XDPInspector, the wakeup measurement through a WakeupProber, the copp
// check through a CoPPReader), so each one is tested against fixture trees and the same
// code runs against the live host with Root "/". See docs/DOCTOR.md.
package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kbridge/kbridge/copp"
)

// Options say where to look and what the configuration expects.
type Options struct {
	// Root is the directory /proc, /sys, /boot and /var/run are read
	// under. Empty means "/".
	Root string
	// FilePrefix is the DPDK --file-prefix the app runs with. Empty
	// means DPDK's default, "rte".
	FilePrefix string
	// RuntimeDir is the app's DPDK runtime directory (dpdk.runtime_dir),
	// which holds <FilePrefix>/config. Empty means /var/run/dpdk.
	RuntimeDir string
	// Only names the checks to run (CheckHugepages, CheckCPUs, ...: a
	// check's first result's name); empty runs every one. kbridge check
	// runs the few a start needs.
	Only []string
	// AppLcores are the CPUs the DPDK app polls on. When empty, doctor
	// tries the running app's -l/-c arguments.
	AppLcores []int
	// WorkerCPUs are the CPUs kbridge's workers are pinned to.
	WorkerCPUs []int
	// Interface is the kernel-side interface kbridge creates (kb0).
	Interface string
	// NIC is the kernel netdev name of the NIC, when it has one (mlx5's
	// bifurcated driver, a kernel-driven NIC used by the XDP path).
	NIC string
	// PolicyMode is the polling mode from the configuration: busy,
	// adaptive, interrupt or fixed. Empty means adaptive (the default).
	PolicyMode string
	// FixedInterval is the sleep of mode fixed.
	FixedInterval time.Duration
	// MaxHeaderBytes is the largest L2-L4 header the exception path
	// carries. Zero means the worst case DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// Learn is policy.learn, which the wakeup advice offers when off.
	Learn bool
	// WakeupProbe is the time the wakeup check may spend measuring.
	// Zero skips the measurement; kbridge doctor uses DefaultWakeupProbe.
	WakeupProbe time.Duration
	// WakeupProber measures wakeups. Nil means LiveWakeupProbe when Root
	// is "/", and the measurement is skipped for any other root.
	WakeupProber WakeupProber
	// XDP reads XDP attachment state. Nil means netlink when Root is
	// "/", and the XDP check is skipped for any other root.
	XDP XDPInspector
	// CoPP reads the running kbridge's policed counters; nil skips the
	// copp check. CoPPRates are the classes' rates from the
	// configuration, named in its evidence; CoPPWindow is the time
	// between its two readings (zero: DefaultCoPPWindow).
	CoPP       CoPPReader
	CoPPRates  [copp.NumClasses]copp.Rate
	CoPPWindow time.Duration
	// Sockets reads the running kbridge's view of the host's sockets;
	// nil skips the sockets check. It reads twice, CoPPWindow apart.
	Sockets SocketsReader
}

// Status is the verdict of one check.
type Status int

// Statuses, ordered from best to worst except Skip (not applicable).
const (
	Pass Status = iota
	Warn
	Fail
	Skip
)

var statusNames = [...]string{Pass: "pass", Warn: "warn", Fail: "fail", Skip: "skip"}

// String returns the lower-case name used in JSON.
func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return fmt.Sprintf("status(%d)", int(s))
	}
	return statusNames[s]
}

// MarshalText makes Status a string in JSON, so consumers need no table.
func (s Status) MarshalText() ([]byte, error) {
	if s < 0 || int(s) >= len(statusNames) {
		return nil, fmt.Errorf("doctor: unknown status %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText parses the names MarshalText writes.
func (s *Status) UnmarshalText(b []byte) error {
	for i, n := range statusNames {
		if n == string(b) {
			*s = Status(i)
			return nil
		}
	}
	return fmt.Errorf("doctor: unknown status %q", b)
}

// Result is one finding: what was checked, the verdict, the evidence it
// was based on (file paths and the values read) and a one-line fix.
type Result struct {
	Check    string `json:"check"`
	Status   Status `json:"status"`
	Evidence string `json:"evidence"`
	Fix      string `json:"fix,omitempty"`
	// Data carries a measurement's figures for machines (the wakeup
	// check's WakeupReport); the evidence says the same for people.
	Data any `json:"data,omitempty"`
}

// Check IDs. They are stable: scripts match on them in --json output.
const (
	CheckENAWC        = "ena-wc"
	CheckENALLQHeader = "ena-llq-header"
	CheckKernelTimer  = "kernel-timer"
	CheckHugepages    = "hugepages"
	CheckHugetlbfs    = "hugetlbfs"
	CheckDPDKRuntime  = "dpdk-runtime"
	CheckCPUs         = "cpus"
	CheckCPUIsolation = "cpu-isolation"
	CheckCPUIdle      = "cpu-idle"
	CheckWakeup       = "wakeup"
	CheckIRQAffinity  = "irq-affinity"
	CheckXDP          = "xdp"
	CheckCoPP         = "copp"
	CheckSockets      = "sockets"
)

// DefaultMaxHeaderBytes is the worst-case header kbridge assumes when the
// configuration does not say: Ethernet 14 + VLAN 4 + IPv6 40 + TCP with
// the maximum 40 bytes of options 60.
const DefaultMaxHeaderBytes = 14 + 4 + 40 + 60

// DefaultFilePrefix is DPDK's --file-prefix when none is given.
const DefaultFilePrefix = "rte"

// DefaultRuntimeDir is where a primary run by root keeps its runtime
// files (DPDK's $RUNTIME_DIRECTORY/dpdk from a shell).
const DefaultRuntimeDir = "/var/run/dpdk"

type check struct {
	name string
	run  func(context.Context, *env) []Result
}

// checks run in this order; Run reports in the same order.
var checks = []check{
	{CheckENAWC, checkENAWC},
	{CheckENALLQHeader, checkENALLQHeader},
	{CheckKernelTimer, checkKernelTimer},
	{CheckHugepages, checkHugepages},
	{CheckCPUs, checkCPUs},
	{CheckCPUIdle, checkCPUIdle},
	{CheckWakeup, checkWakeup},
	{CheckIRQAffinity, checkIRQAffinity},
	{CheckXDP, checkXDP},
	{CheckCoPP, checkCoPP},
	{CheckSockets, checkSockets},
}

// Run runs every check and returns the findings in a fixed order. It
// never fails as a whole: a check that cannot read what it needs says so
// in its own Result.
func Run(ctx context.Context, opts Options) []Result {
	e := newEnv(opts)
	var out []Result
	for _, c := range checks {
		if len(opts.Only) > 0 && !slices.Contains(opts.Only, c.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			out = append(out, Result{Check: c.name, Status: Skip, Evidence: "not run: " + err.Error()})
			continue
		}
		out = append(out, c.run(ctx, e)...)
	}
	return out
}

// ExitCode is 1 when any result failed and 0 otherwise: warnings are
// advice, not errors, so scripts can gate on real misconfiguration.
func ExitCode(results []Result) int {
	for _, r := range results {
		if r.Status == Fail {
			return 1
		}
	}
	return 0
}

// env carries the options with defaults applied, plus facts several
// checks share and should read only once.
type env struct {
	opts Options
	root string

	enaDone bool
	ena     []enaDevice
	enaErr  error

	appDone bool
	app     *appProc

	idleFacts *idleFacts
}

func newEnv(opts Options) *env {
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.FilePrefix == "" {
		opts.FilePrefix = DefaultFilePrefix
	}
	if opts.RuntimeDir == "" {
		opts.RuntimeDir = DefaultRuntimeDir
	}
	return &env{opts: opts, root: opts.Root}
}

// path maps a host path ("/sys/...") under Root. Evidence shows this
// mapped path, so a fixture run names the fixture file it read.
func (e *env) path(hostPath string) string {
	return filepath.Join(e.root, hostPath)
}

// read returns the trimmed content of a host path under Root.
func (e *env) read(hostPath string) (string, error) {
	b, err := os.ReadFile(e.path(hostPath))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// exists reports whether a host path exists under Root.
func (e *env) exists(hostPath string) bool {
	_, err := os.Stat(e.path(hostPath))
	return err == nil
}

// appLcores returns the configured lcores, or those of the running app,
// and where they came from.
func (e *env) appLcores() ([]int, string) {
	if len(e.opts.AppLcores) > 0 {
		return e.opts.AppLcores, "configured app lcores"
	}
	if app := e.findApp(); app != nil && len(app.lcores) > 0 {
		return app.lcores, fmt.Sprintf("lcores of the app (pid %d, %s)", app.pid, app.lcoreArg)
	}
	return nil, ""
}

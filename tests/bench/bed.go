package main

// The test bed and the forwarders: bring the bed up and down with the scripts
// of tests/testbed, switch kbridge's policy live, start testpmd in its place.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kbridge/kbridge/tests/harness"
)

// Addresses and files of the test bed (tests/testbed/README.md).
const (
	peerIP     = "198.18.0.1" // kbt-peer, seen from kbt-dut through kb0
	dutIP      = "198.18.0.2" // kb0 (the bed's ceiling: what testpmd's 5tswap answers as)
	altIP      = "198.18.1.1" // kbt-peer, seen from kbt-direct
	nsDUT      = "kbt-dut"
	nsDirect   = "kbt-direct"
	runDir     = "/run/kbt"
	statsSock  = runDir + "/kbridge.sock"
	nfsEntries = 6001
	// vhostAppName is the vhost bed's app, testpmd, in /run/kbt (NAME.pid, NAME.log).
	vhostAppName = "testpmd-vhost"
)

// Forwarder is one column of the comparison.
type Forwarder struct {
	Name   string
	Kind   string // "direct", "kbridge", "vhost" (kbridge in mode vhost under testpmd), "kni" (the KNI app and its kbridge), "testpmd" or "ceiling" (testpmd alone on kbt-nic)
	Policy string // kbridge: the YAML policy block
	Mode   string // kbridge: the mode `kbridge stats` shows once it applies
	// Plain turns kbridge's kernel-side offloads off (interface.offload:
	// false, switched live): a plain TAP, one frame per syscall, as
	// kbridge was before the offloaded kernel side.
	Plain bool
	// MTU, when set, measures the forwarder on the jumbo bed: up.sh's
	// KBT_JUMBO=1, every link on both paths and kb0 at this MTU. 0: the
	// bed's 1500.
	MTU int
	// NICOffload measures the forwarder on the bed whose app port behaves
	// like a NIC with LRO and TSO (up.sh's KBT_SW_OFFLOAD=1: the reference
	// app merges what it receives with librte_gro and cuts kbridge's
	// super-frames with librte_gso) and whose veths' receivers do GRO,
	// the floor's too (issue 19).
	NICOffload bool
	// NoTSO measures the forwarder on the ring bed whose reference app
	// declares no TSO to kbridge, as an app written for KNI (up.sh's
	// KBT_NO_TSO=1): kbridge-kni-api's like.
	NoTSO bool
}

// allForwarders in the order they are measured and shown.
var allForwarders = []Forwarder{
	{Name: "direct", Kind: "direct"},
	{Name: "kbridge-busy", Kind: "kbridge", Mode: "busy", Policy: "policy:\n  mode: busy\n"},
	{Name: "kbridge-adaptive", Kind: "kbridge", Mode: "adaptive", Policy: "policy:\n  mode: adaptive\n"},
	{Name: "kbridge-plain", Kind: "kbridge", Mode: "adaptive", Policy: "policy:\n  mode: adaptive\n", Plain: true},
	{Name: "kbridge-interrupt", Kind: "kbridge", Mode: "interrupt", Policy: "policy:\n  mode: interrupt\n"},
	// kbridge-learn: adaptive with the learned spin (policy.learn, issue
	// 11): spins through short idle gaps, parks at once after long ones.
	{Name: "kbridge-learn", Kind: "kbridge", Mode: "adaptive", Policy: "policy:\n  mode: adaptive\n  learn: true\n"},
	{Name: "kni-4ms", Kind: "kbridge", Mode: "fixed", Policy: "policy:\n  mode: fixed\n  interval: 4ms\n"},
	{Name: "kni-1ms", Kind: "kbridge", Mode: "fixed", Policy: "policy:\n  mode: fixed\n  interval: 1ms\n"},
	{Name: "kbridge-vhost", Kind: "vhost", Mode: "adaptive", Policy: "policy:\n  mode: adaptive\n"},
	{Name: "testpmd", Kind: "testpmd"},
	{Name: "bed-ceiling", Kind: "ceiling"},
	// Jumbo frames (issue 18): kbridge on the bed at MTU 9000 beside the
	// floor at 9000 (KBT_JUMBO=1).
	{Name: "direct-9000", Kind: "direct", MTU: jumboMTU},
	{Name: "kbridge-9000", Kind: "kbridge", Mode: "adaptive", Policy: "policy:\n  mode: adaptive\n", MTU: jumboMTU},
	// A NIC with LRO and TSO, as real apps have (issue 19): kbridge with the
	// app's port merging and cutting in software, beside the floor with
	// GRO at its receivers (KBT_SW_OFFLOAD=1).
	{Name: "direct-gro", Kind: "direct", NICOffload: true},
	{Name: "kbridge-nic-offload", Kind: "kbridge", Mode: "adaptive", Policy: "policy:\n  mode: adaptive\n", NICOffload: true},
	// The reference app configured as the KNI app below: no TSO declared
	// (KBT_NO_TSO=1), kbridge adaptive and placed as always.
	{Name: "kbridge-no-tso", Kind: "kbridge", Mode: "adaptive", Policy: "policy:\n  mode: adaptive\n", NoTSO: true},
	// An app written for KNI (bin/kbridge-kniapp over rte_kni.h,
	// docs/KNI.md; up.sh's KBT_MODE=kni): the kbridge its rte_kni_alloc
	// started, at kbridge's defaults (adaptive), placed as the ring bed's
	// kbridge (KBRIDGE_CHILD_CPUS), the app's one lcore on the app CPU.
	{Name: "kbridge-kni-api", Kind: "kni"},
}

// bedKind is the bed a forwarder is measured on: "kbridge" (the ring bed,
// direct too), "vhost" (KBT_MODE=vhost), "testpmd" (no bridge, testpmd or
// the ceiling in its place), "jumbo" (the ring bed at MTU 9000, direct
// too), "offload" (the ring bed with the app's port doing LRO/TSO and
// GRO at the veths' receivers, direct too), "notso" (the ring bed, its
// app declaring no TSO) or "kni" (the KNI app's bed).
func (f Forwarder) bedKind() string {
	if f.MTU != 0 {
		return "jumbo"
	}
	if f.NICOffload {
		return "offload"
	}
	if f.NoTSO {
		return "notso"
	}
	switch f.Kind {
	case "testpmd", "ceiling":
		return "testpmd"
	case "vhost":
		return "vhost"
	case "kni":
		return "kni"
	}
	return "kbridge"
}

// hasKbridge reports whether kbridge runs on this forwarder's bed and
// `kbridge stats` has its counters.
func (f Forwarder) hasKbridge() bool { return f.Kind == "kbridge" || f.Kind == "vhost" }

// groupForwarders splits the forwarders into one group per bed, in the order
// the beds are brought up: the ring bed, the vhost bed, testpmd's bed. direct
// is measured on the first bed that is up anyway: the ring bed, else
// testpmd's, else the vhost bed.
func groupForwarders(fws []Forwarder) [][]Forwarder {
	byBed := map[string][]Forwarder{}
	for _, f := range fws {
		byBed[f.bedKind()] = append(byBed[f.bedKind()], f)
	}
	kb, vh, tp := byBed["kbridge"], byBed["vhost"], byBed["testpmd"]
	if !hasKind(kb, "kbridge") && len(kb) > 0 {
		switch {
		case hasKind(tp, "testpmd"):
			tp, kb = append(kb, tp...), nil
		case len(vh) > 0:
			vh, kb = append(kb, vh...), nil
		}
	}
	var groups [][]Forwarder
	for _, g := range [][]Forwarder{kb, vh, tp, byBed["jumbo"], byBed["offload"], byBed["notso"], byBed["kni"]} {
		if len(g) > 0 {
			groups = append(groups, g)
		}
	}
	return groups
}

// NS and IP a client of this forwarder uses.
func (f Forwarder) target() (ns, ip string) {
	if f.Kind == "direct" {
		return nsDirect, altIP
	}
	return nsDUT, peerIP
}

// selectForwarders parses the -forwarders flag ("all" or a comma list).
func selectForwarders(list string) ([]Forwarder, error) {
	if list == "" || list == "all" {
		return allForwarders, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []Forwarder
	for _, f := range allForwarders {
		if want[f.Name] {
			out = append(out, f)
			delete(want, f.Name)
		}
	}
	if len(want) > 0 {
		var bad, names []string
		for n := range want {
			bad = append(bad, n)
		}
		for _, f := range allForwarders {
			names = append(names, f.Name)
		}
		return nil, fmt.Errorf("unknown forwarder(s) %s; known: %s", strings.Join(bad, ","), strings.Join(names, ","))
	}
	if len(out) == 0 {
		return nil, errors.New("-forwarders selects nothing")
	}
	return out, nil
}

// withoutOffload adds interface.offload: false to a config with an
// interface: block.
func withoutOffload(cfg string) string {
	return strings.Replace(cfg, "\ninterface:\n", "\ninterface:\n  offload: false\n", 1)
}

// Bed drives tests/testbed.
type Bed struct {
	root     string // repository root
	cfgPath  string // kbridge's configuration (a private copy)
	baseCfg  string
	vhostCfg string   // tests/testbed/kbridge-vhost.yaml, the vhost bed's base
	cpus     string   // client CPU list ("" = no pinning)
	fwdPID   int      // kbridge or testpmd
	appPID   int      // the DPDK app: the reference app (ring bed) or testpmd (vhost bed)
	httpPID  int      // the bench's HTTP server in kbt-peer
	kind     string   // what is up: "", "kbridge", "vhost", "testpmd", "jumbo", "offload", "notso", "kni"
	lock     *os.File // the bed's lock while this run holds it (claim)
	progress func(format string, a ...any)
}

func (b *Bed) script(name string) string { return filepath.Join(b.root, "tests/testbed", name) }

// sh runs one of the bed's scripts. While this run holds the bed's lock
// (claim), the scripts are told so and do not wait for it themselves.
func (b *Bed) sh(ctx context.Context, timeout time.Duration, env []string, name string, args ...string) ([]byte, error) {
	if b.lock != nil {
		env = append(append([]string(nil), env...), harness.LockedEnv...)
	}
	return harness.Output(ctx, timeout, env, b.script(name), args...)
}

// claim takes the bed's lock (/run/kbt.lock, as kbt_claim_bed and the
// tests' harness.ClaimBed do) once no one else's bed is up, and holds it
// until release: between its own beds' down and up no test or other
// benchmark takes the bed, and none tears a bed of this run down (both
// were seen when only up.sh and down.sh held the lock). It waits at most
// max for both.
func (b *Bed) claim(ctx context.Context, max time.Duration, log func(string, ...any)) error {
	deadline := time.Now().Add(max)
	for {
		if err := waitFree(ctx, time.Until(deadline), log); err != nil {
			return err
		}
		f, err := os.OpenFile(harness.LockFile, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("bed lock: %w", err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil && len(inUse(ctx)) == 0 {
			b.lock = f
			return nil
		}
		f.Close() // another script holds it, or a bed came up meanwhile
		if time.Now().After(deadline) {
			return fmt.Errorf("the test bed's lock %s is held by someone else for more than %v", harness.LockFile, max)
		}
		if err := sleepCtx(ctx, 5*time.Second); err != nil {
			return err
		}
	}
}

// release lets the bed's lock go (claim).
func (b *Bed) release() {
	if b.lock != nil {
		b.lock.Close()
		b.lock = nil
	}
}

// pin prefixes a client command with taskset for the non-app CPUs.
func (b *Bed) pin(ns string, args ...string) []string {
	out := []string{"netns", "exec", ns}
	if b.cpus != "" {
		out = append(out, "taskset", "-c", b.cpus)
	}
	return append(out, args...)
}

// up brings up the bed (up.sh may wait up to 5 min for /run/kbt.lock) for kind "kbridge" (starting with the given policy),
// "vhost" (KBT_MODE=vhost: testpmd as the app, kbridge in mode vhost with the given policy) or "testpmd" (bed
// without bridge, testpmd in its place).
func (b *Bed) up(ctx context.Context, kind, policy string) error {
	b.kind, b.fwdPID, b.appPID = kind, 0, 0
	switch kind {
	case "kbridge", "jumbo", "offload", "notso":
		cfg, env := b.config(policy), []string{"KBRIDGE_CONFIG=" + b.cfgPath}
		switch kind {
		case "jumbo":
			env = append(env, "KBT_JUMBO=1") // every link at 9000; kb0 from cfg
		case "offload":
			env = append(env, "KBT_SW_OFFLOAD=1") // the app's LRO/TSO, GRO at the receivers
		case "notso":
			env = append(env, "KBT_NO_TSO=1") // the app declares no TSO, as a KNI app
		}
		if err := harness.WriteAtomic(b.cfgPath, cfg); err != nil {
			return err
		}
		return b.upWith(ctx, env, "refapp")
	case "vhost":
		if b.vhostCfg == "" {
			return fmt.Errorf("no base configuration for the vhost bed (tests/testbed/kbridge-vhost.yaml)")
		}
		if err := harness.WriteAtomic(b.cfgPath, harness.WithPolicy(b.vhostCfg, policy)); err != nil {
			return err
		}
		return b.upWith(ctx, []string{"KBT_MODE=vhost", "KBRIDGE_CONFIG=" + b.cfgPath}, vhostAppName)
	case "kni":
		return b.upWith(ctx, []string{"KBT_MODE=kni"}, "kniapp")
	case "testpmd":
		if _, err := b.sh(ctx, 6*time.Minute, []string{"KBT_NO_BRIDGE=1"}, "up.sh"); err != nil {
			return err
		}
		if _, err := b.sh(ctx, 2*time.Minute, nil, "testpmd-forwarder.sh", "start"); err != nil {
			return err
		}
		var err error
		b.fwdPID, err = readPID("testpmd")
		return err
	}
	return fmt.Errorf("unknown bed kind %q", kind)
}

// floorOf names the floor a forwarder's figures are set beside: direct at
// the forwarder's MTU, or with GRO for a forwarder on the offload bed.
func floorOf(name string) string {
	for _, f := range allForwarders {
		if f.Name == name && f.MTU != 0 {
			return fmt.Sprintf("direct-%d", f.MTU)
		}
		if f.Name == name && f.NICOffload {
			return "direct-gro"
		}
	}
	return "direct"
}

// jumboMTU is the jumbo bed's MTU.
const jumboMTU = 9000

// config is kbridge's configuration on the bed that is up, with policy:
// on the jumbo bed with interface.mtu 9000, so that a SIGHUP's reload
// changes only the policy.
func (b *Bed) config(policy string) string {
	cfg := harness.WithPolicy(b.baseCfg, policy)
	if b.kind == "jumbo" {
		cfg = mtuLine.ReplaceAllString(cfg, fmt.Sprintf("  mtu: %d", jumboMTU))
	}
	return cfg
}

// mtuLine is interface.mtu's line in the bed's configuration.
var mtuLine = regexp.MustCompile(`(?m)^  mtu: [0-9]+$`)

// down stops testpmd (if any) and tears the bed down. It uses its own
// context: it must run after Ctrl-C too.
func (b *Bed) down() error {
	ctx := context.Background()
	var errs []error
	if b.kind == "testpmd" {
		if _, err := b.sh(ctx, time.Minute, nil, "testpmd-forwarder.sh", "stop"); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := b.sh(ctx, 2*time.Minute, nil, "down.sh"); err != nil {
		errs = append(errs, err)
	}
	b.kind, b.fwdPID, b.appPID = "", 0, 0
	return errors.Join(errs...)
}

// alive reports an error if the forwarder this bed started is gone (crashed,
// or the bed was torn down by someone else).
func (b *Bed) alive() error {
	if b.fwdPID == 0 {
		return nil
	}
	if err := syscall.Kill(b.fwdPID, 0); err != nil {
		return fmt.Errorf("forwarder pid %d is gone (see %s/*.log)", b.fwdPID, runDir)
	}
	if pid, err := readPID(map[string]string{"kbridge": "kbridge", "vhost": "kbridge", "testpmd": "testpmd", "jumbo": "kbridge", "offload": "kbridge", "notso": "kbridge", "kni": "kbridge"}[b.kind]); err != nil || pid != b.fwdPID {
		return fmt.Errorf("the bed was replaced under us (pid file no longer names %d)", b.fwdPID)
	}
	return nil
}

// setPolicy rewrites kbridge's configuration, sends SIGHUP and waits until
// kbridge logged the reload and `kbridge stats` shows the mode.
func (b *Bed) setPolicy(ctx context.Context, f Forwarder) error {
	logPath := filepath.Join(runDir, "kbridge.log")
	fi, err := os.Stat(logPath)
	if err != nil {
		return err
	}
	off := fi.Size()
	cfg := b.config(f.Policy)
	if f.Plain {
		cfg = withoutOffload(cfg)
	}
	if err := harness.WriteAtomic(b.cfgPath, cfg); err != nil {
		return err
	}
	if err := syscall.Kill(b.fwdPID, syscall.SIGHUP); err != nil {
		return fmt.Errorf("SIGHUP to kbridge pid %d: %v", b.fwdPID, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		logged := ""
		if data, err := os.ReadFile(logPath); err == nil && int64(len(data)) > off {
			logged = string(data[off:])
		}
		if strings.Contains(logged, "reload refused") {
			return fmt.Errorf("kbridge refused the new policy: %s", harness.LastLine(logged))
		}
		applied := strings.Contains(logged, "msg=reloaded") || strings.Contains(logged, "policy unchanged")
		if f.Plain && !strings.Contains(logged, "interface offloads switched") {
			applied = false
		}
		if applied {
			if mode, _, err := b.stats(ctx); err == nil && mode == f.Mode {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kbridge did not switch to %s within 10s", f.Mode)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *Bed) stats(ctx context.Context) (string, Counters, error) {
	out, err := harness.Output(ctx, 5*time.Second, nil, filepath.Join(b.root, "bin/kbridge"), "stats", "--socket", statsSock)
	if err != nil {
		return "", Counters{}, err
	}
	return parseStats(out)
}

func readPID(name string) (int, error) {
	data, err := os.ReadFile(filepath.Join(runDir, name+".pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid in %s.pid", name)
	}
	return pid, nil
}

// clientCPUs mirrors kbt_cpus in tests/testbed/lib.sh: the highest CPU is the
// app's, clients get the rest (KBT_OTHER_CPUS overrides).
func clientCPUs(ncpu int) string {
	if v, ok := os.LookupEnv("KBT_OTHER_CPUS"); ok {
		return v
	}
	switch {
	case ncpu <= 1:
		return ""
	case ncpu == 2:
		return "0"
	default:
		return fmt.Sprintf("0-%d", ncpu-2)
	}
}

// inUse reports the bed's namespaces that exist with processes in them: a bed
// someone else (a test, another benchmark) is using. up.sh would tear it down.
func inUse(ctx context.Context) []string {
	var busy []string
	for _, ns := range []string{"kbt-peer", nsDUT, nsDirect} {
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			continue
		}
		if out, err := harness.Output(ctx, 5*time.Second, nil, "ip", "netns", "pids", ns); err == nil && len(bytes.TrimSpace(out)) > 0 {
			busy = append(busy, ns)
		}
	}
	return busy
}

// waitFree waits until no one else uses the bed, at most max.
func waitFree(ctx context.Context, max time.Duration, log func(string, ...any)) error {
	deadline := time.Now().Add(max)
	for first := true; ; first = false {
		busy := inUse(ctx)
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the test bed is in use by someone else (processes in %s) for more than %v; "+
				"wait, or pass -wait-bed 0 -force to take it over", strings.Join(busy, ", "), max)
		}
		if first {
			log("the test bed is in use by someone else (processes in %s): waiting up to %v", strings.Join(busy, ", "), max)
		}
		if err := sleepCtx(ctx, 5*time.Second); err != nil {
			return err
		}
	}
}

// upWith brings a bed with a kbridge up (up.sh with env) and records the
// pids of its kbridge and of its app, whose pid file up.sh names app.
func (b *Bed) upWith(ctx context.Context, env []string, app string) error {
	if _, err := b.sh(ctx, 6*time.Minute, env, "up.sh"); err != nil {
		return err
	}
	var err error
	if b.fwdPID, err = readPID("kbridge"); err != nil {
		return err
	}
	b.appPID, err = readPID(app)
	return err
}

package doctor_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbridge/kbridge/doctor"
	"github.com/kbridge/kbridge/doctor/doctortest"
)

type checkCase struct {
	name    string
	fixture string // testdata/<check>/<case>
	opts    doctor.Options
	check   string          // which check's results to look at
	want    []doctor.Status // one per result of that check, in order
	ev      []string        // substrings the evidence must contain
	fix     []string        // substrings the fix must contain
}

var checkCases = []checkCase{
	// ENA write-combining.
	{name: "wc pass", fixture: "ena-wc/pass", check: doctor.CheckENAWC, want: []doctor.Status{doctor.Pass},
		ev: []string{"0000:00:06.0", "vfio-pci", "BAR2 0xfe800000-0xfe8fffff", "pat_memtype_list", "write-combining"}},
	{name: "wc fail vfio", fixture: "ena-wc/fail", check: doctor.CheckENAWC, want: []doctor.Status{doctor.Fail},
		ev: []string{"uncached-minus", "throughput and latency"}, fix: []string{"WC patch", "wc_activate=1"}},
	{name: "wc fail igb_uio old format", fixture: "ena-wc/igb_uio-fail", check: doctor.CheckENAWC, want: []doctor.Status{doctor.Fail},
		ev: []string{"igb_uio", "uncached-minus @ 0xfe800000-0xfe900000"}, fix: []string{"modprobe igb_uio wc_activate=1"}},
	{name: "wc no debugfs", fixture: "ena-wc/nodebugfs", check: doctor.CheckENAWC, want: []doctor.Status{doctor.Warn},
		ev: []string{"debugfs is not mounted"}, fix: []string{"mount -t debugfs none /sys/kernel/debug"}},
	{name: "wc bar not mapped", fixture: "ena-wc/notmapped", check: doctor.CheckENAWC, want: []doctor.Status{doctor.Warn},
		ev: []string{"no mapping of the BAR"}, fix: []string{"start the DPDK app"}},
	{name: "wc no ena", fixture: "ena-wc/noena", check: doctor.CheckENAWC, want: []doctor.Status{doctor.Skip}, ev: []string{"no ENA device"}},
	{name: "wc no pci bus", fixture: "kernel-timer/pass", check: doctor.CheckENAWC, want: []doctor.Status{doctor.Skip}, ev: []string{"no PCI bus"}},

	// ENA LLQ header size.
	{name: "llq large_llq_hdr", fixture: "ena-llq-header/pass", opts: doctor.Options{FilePrefix: "app"}, check: doctor.CheckENALLQHeader,
		want: []doctor.Status{doctor.Pass}, ev: []string{"header up to 118 bytes", "app pid 4242", `"large_llq_hdr=1"`, "large LLQ headers are configured"}},
	{name: "llq policy 3", fixture: "ena-llq-header/policy3", opts: doctor.Options{FilePrefix: "app"}, check: doctor.CheckENALLQHeader,
		want: []doctor.Status{doctor.Pass}, ev: []string{`"llq_policy=3"`}},
	{name: "llq small header", fixture: "ena-llq-header/fail", opts: doctor.Options{FilePrefix: "app", MaxHeaderBytes: 78}, check: doctor.CheckENALLQHeader,
		want: []doctor.Status{doctor.Pass}, ev: []string{"header up to 78 bytes (configured max header)"}},
	{name: "llq default devargs", fixture: "ena-llq-header/fail", opts: doctor.Options{FilePrefix: "app"}, check: doctor.CheckENALLQHeader,
		want: []doctor.Status{doctor.Warn}, ev: []string{"app pid 4242", `devargs ""`, "need large LLQ headers"},
		fix: []string{"-a 0000:00:06.0,large_llq_hdr=1", "llq_policy=3"}},
	{name: "llq app not found", fixture: "ena-llq-header/fail", opts: doctor.Options{FilePrefix: "nosuch"}, check: doctor.CheckENALLQHeader,
		want: []doctor.Status{doctor.Warn}, ev: []string{"app not found"}},
	{name: "llq too large for any entry", fixture: "ena-llq-header/pass", opts: doctor.Options{FilePrefix: "app", MaxHeaderBytes: 300}, check: doctor.CheckENALLQHeader,
		want: []doctor.Status{doctor.Fail}, ev: []string{"larger than even a large LLQ entry"}},
	{name: "llq kernel ena", fixture: "ena-llq-header/kernel", check: doctor.CheckENALLQHeader, want: []doctor.Status{doctor.Skip}, ev: []string{"not a DPDK port"}},

	// Kernel timer.
	{name: "hz adaptive", fixture: "kernel-timer/pass", check: doctor.CheckKernelTimer, want: []doctor.Status{doctor.Pass},
		ev: []string{"config.gz: CONFIG_HZ=250", "at least 4ms", "policy mode adaptive"}},
	{name: "hz fixed below a jiffy", fixture: "kernel-timer/fixed", opts: doctor.Options{PolicyMode: "fixed", FixedInterval: 5 * time.Microsecond},
		check: doctor.CheckKernelTimer, want: []doctor.Status{doctor.Warn}, ev: []string{"5µs, below one jiffy", "KNI-like"}, fix: []string{"adaptive"}},
	{name: "hz fixed a jiffy", fixture: "kernel-timer/fixed", opts: doctor.Options{PolicyMode: "fixed", FixedInterval: 4 * time.Millisecond},
		check: doctor.CheckKernelTimer, want: []doctor.Status{doctor.Warn}, ev: []string{"interval 4ms (1.0 jiffies)"}},
	{name: "hz from boot config", fixture: "kernel-timer/boot", opts: doctor.Options{PolicyMode: "busy"}, check: doctor.CheckKernelTimer,
		want: []doctor.Status{doctor.Pass}, ev: []string{"boot/config-6.1.0-test: CONFIG_HZ=1000", "at least 1ms"}},
	{name: "hz unknown", fixture: "kernel-timer/missing", check: doctor.CheckKernelTimer, want: []doctor.Status{doctor.Warn},
		ev: []string{"no ", "config-6.1.0-test"}, fix: []string{"modprobe configs"}},
	{name: "hz unknown mode", fixture: "kernel-timer/pass", opts: doctor.Options{PolicyMode: "sleepy"}, check: doctor.CheckKernelTimer,
		want: []doctor.Status{doctor.Warn}, ev: []string{"unknown mode"}},

	// Hugepages, hugetlbfs, runtime dir.
	{name: "hugepages pass", fixture: "hugepages/pass", check: doctor.CheckHugepages, want: []doctor.Status{doctor.Pass},
		ev: []string{"2048kB nr_hugepages=512 free_hugepages=254", "3 hugepage files named rtemap_*"}},
	{name: "hugetlbfs pass", fixture: "hugepages/pass", check: doctor.CheckHugetlbfs, want: []doctor.Status{doctor.Pass}, ev: []string{"hugetlbfs on /dev/hugepages (rw,relatime,pagesize=2M)"}},
	{name: "runtime pass", fixture: "hugepages/pass", check: doctor.CheckDPDKRuntime, want: []doctor.Status{doctor.Pass}, ev: []string{"var/run/dpdk/rte: config present, mp_socket present"}},
	{name: "hugepages fail", fixture: "hugepages/fail", check: doctor.CheckHugepages, want: []doctor.Status{doctor.Fail},
		ev: []string{"no hugepages reserved"}, fix: []string{"nr_hugepages"}},
	{name: "hugetlbfs fail", fixture: "hugepages/fail", check: doctor.CheckHugetlbfs, want: []doctor.Status{doctor.Fail}, fix: []string{"mount -t hugetlbfs"}},
	{name: "runtime missing", fixture: "hugepages/fail", opts: doctor.Options{FilePrefix: "app"}, check: doctor.CheckDPDKRuntime, want: []doctor.Status{doctor.Warn},
		ev: []string{"var/run/dpdk/app/config missing", "--file-prefix app"}},
	{name: "hugepages stale files", fixture: "hugepages/stale", check: doctor.CheckHugepages, want: []doctor.Status{doctor.Warn},
		ev: []string{"2 hugepage files", "stale"}, fix: []string{"rm /dev/hugepages/rtemap_*"}},
	{name: "runtime no mp_socket", fixture: "hugepages/noshconf", check: doctor.CheckDPDKRuntime, want: []doctor.Status{doctor.Warn}, ev: []string{"mp_socket missing"}},

	// CPUs.
	{name: "cpus pass", fixture: "cpus/pass", opts: doctor.Options{WorkerCPUs: []int{2, 3}, AppLcores: []int{4, 5}}, check: doctor.CheckCPUs,
		want: []doctor.Status{doctor.Pass}, ev: []string{"worker CPUs 2-3", "online=0-7", "configured app lcores 4-5"}},
	{name: "isolation pass", fixture: "cpus/pass", opts: doctor.Options{WorkerCPUs: []int{2, 3}, AppLcores: []int{4, 5}}, check: doctor.CheckCPUIsolation,
		want: []doctor.Status{doctor.Pass}, ev: []string{`isolated="2-3"`, `nohz_full="2-3"`}},
	{name: "cpus fail", fixture: "cpus/fail", opts: doctor.Options{WorkerCPUs: []int{1, 3, 5, 5}, AppLcores: []int{1}}, check: doctor.CheckCPUs,
		want: []doctor.Status{doctor.Fail}, ev: []string{"CPUs 3,5 are not present", "CPU 5 carries more than one worker", "CPU 1 is both app lcore and kbridge worker"},
		fix: []string{"move the workers to 0,2"}},
	{name: "isolation warn", fixture: "cpus/fail", opts: doctor.Options{WorkerCPUs: []int{1}, AppLcores: []int{2}}, check: doctor.CheckCPUIsolation,
		want: []doctor.Status{doctor.Warn}, ev: []string{"not isolated", "nohz_full absent"}, fix: []string{"isolcpus=1 nohz_full=1"}},
	{name: "busy floating", fixture: "cpus/pass", opts: doctor.Options{PolicyMode: "busy"}, check: doctor.CheckCPUIsolation,
		want: []doctor.Status{doctor.Warn}, ev: []string{"busy with workers floating"}, fix: []string{"a core of their own", "policy mode adaptive"}},
	{name: "isolation warn busy", fixture: "cpus/fail", opts: doctor.Options{WorkerCPUs: []int{1}, AppLcores: []int{2}, PolicyMode: "busy"}, check: doctor.CheckCPUIsolation,
		want: []doctor.Status{doctor.Warn}, ev: []string{"not isolated", "policy mode busy spins there"}, fix: []string{"a core of their own", "isolcpus=1", "policy mode adaptive"}},
	{name: "cpus lcores from app", fixture: "cpus/applcores", opts: doctor.Options{WorkerCPUs: []int{4}}, check: doctor.CheckCPUs,
		want: []doctor.Status{doctor.Fail}, ev: []string{"lcores of the app (pid 900, --lcores (0-1)@(4-5)) 4-5"}},
	{name: "cpus none configured", fixture: "cpus/pass", check: doctor.CheckCPUs, want: []doctor.Status{doctor.Skip}},

	// CPU idle: why a wakeup costs what it does.
	{name: "idle vm with halt polling off", fixture: "cpu-idle/vm-haltpoll-off", opts: doctor.Options{WorkerCPUs: []int{0}}, check: doctor.CheckCPUIdle,
		want: []doctor.Status{doctor.Warn}, ev: []string{"virtual machine (", "flags: hypervisor", "cpuidle driver haltpoll, governor haltpoll", "guest_halt_poll_ns=0",
			"cmdline: cpuidle_haltpoll.force=1 haltpoll.guest_halt_poll_ns=0", "steal 15.5% of CPU time since boot", "halts at once (guest halt polling off)"},
		fix: []string{"policy.mode busy on a core of its own", "echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns", "policy.learn: true", "dedicated CPUs"}},
	{name: "idle vm with halt polling off and mode busy", fixture: "cpu-idle/vm-haltpoll-off", opts: doctor.Options{WorkerCPUs: []int{0}, PolicyMode: "busy"},
		check: doctor.CheckCPUIdle, want: []doctor.Status{doctor.Pass}, ev: []string{"guest_halt_poll_ns=0", "never park"}},
	{name: "idle vm with halt polling on", fixture: "cpu-idle/vm-haltpoll-on", opts: doctor.Options{WorkerCPUs: []int{0, 1, 2}}, check: doctor.CheckCPUIdle,
		want: []doctor.Status{doctor.Pass}, ev: []string{`DMI "QEMU Standard PC (Q35 + ICH9, 2009)"`, "guest_halt_poll_ns=200000", "force=N", "polls up to 200 us", "steal 0.0%"}},
	{name: "idle xen vm without cpuidle", fixture: "cpu-idle/vm-xen", check: doctor.CheckCPUIdle, want: []doctor.Status{doctor.Warn},
		ev: []string{"sys/hypervisor/type=xen", "current_driver absent", "halts at once (no guest halt polling)"}, fix: []string{"modprobe cpuidle_haltpoll"}},
	{name: "idle bare metal with C6", fixture: "cpu-idle/metal-intel", opts: doctor.Options{WorkerCPUs: []int{2, 3}}, check: doctor.CheckCPUIdle,
		want: []doctor.Status{doctor.Warn}, ev: []string{`bare metal (no hypervisor flag`, `DMI "Dell Inc. PowerEdge R650"`, "cpuidle driver intel_idle, governor menu",
			"deepest enabled idle state of CPUs 2-3: C6, exit latency 170 us", "CPUs 2-3 isolated", "CPUs 2-3 nohz_full", "sleep in C6"},
		fix: []string{"cpupower -c 2-3 idle-set -D 50", "/dev/cpu_dma_latency", "policy.mode busy"}},
	{name: "idle bare metal with C6 disabled", fixture: "cpu-idle/metal-c1e", opts: doctor.Options{WorkerCPUs: []int{2, 3}}, check: doctor.CheckCPUIdle,
		want: []doctor.Status{doctor.Pass}, ev: []string{"C1E, exit latency 10 us", "shallow idle states only"}},
	{name: "idle busy-poll host", fixture: "cpu-idle/idle-poll", opts: doctor.Options{WorkerCPUs: []int{1}}, check: doctor.CheckCPUIdle,
		want: []doctor.Status{doctor.Pass}, ev: []string{"current_driver=none", "cmdline: idle=poll", "CPU 1 isolated", "idle CPUs spin"}},

	// Wakeup: what waking a parked worker costs, measured through a fake.
	{name: "wakeup slow on a halting vm", fixture: "cpu-idle/vm-haltpoll-off",
		opts:  doctor.Options{WorkerCPUs: []int{0}, AppLcores: []int{1}, WakeupProbe: time.Second, WakeupProber: doctortest.FakeWakeup{Report: slowWakeup}},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Warn},
		ev: []string{"after 5ms idle, 1s budget", "CPU 1 (configured app lcores) -> parked on CPU 0 p50 103 us p99 221 us max 3990 us, 3 of 300 over 1 ms",
			"within CPU 0 (no IPI) p50 6 us p99 20 us max 30 us, 0 of 150 over 1 ms", "add 97 us at the median", "steal 15.0% over the probe, CPU 0 98% idle", "halted vCPU through the host"},
		fix: []string{"see cpu-idle", "policy.mode busy"}},
	{name: "wakeup fast on bare metal", fixture: "cpu-idle/metal-c1e",
		opts:  doctor.Options{WorkerCPUs: []int{2, 3}, AppLcores: []int{5}, WakeupProbe: time.Second, WakeupProber: doctortest.FakeWakeup{Report: fastWakeup}},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Pass}, ev: []string{"CPU 5 (configured app lcores) -> parked on CPUs 2-3 p50 4 us"}},
	{name: "wakeup slow with mode busy", fixture: "cpu-idle/vm-haltpoll-off",
		opts:  doctor.Options{WorkerCPUs: []int{0}, PolicyMode: "busy", WakeupProbe: time.Second, WakeupProber: doctortest.FakeWakeup{Report: slowWakeup}},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Pass}, ev: []string{"not on their path"}},
	{name: "wakeup slow on a shared cpu", fixture: "cpu-idle/metal-c1e",
		opts:  doctor.Options{WorkerCPUs: []int{2}, WakeupProbe: time.Second, WakeupProber: doctortest.FakeWakeup{Report: busyWakeup}},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Warn}, ev: []string{"CPU 7 (the highest online CPU", "CPU 2 20% idle", "mostly preemption by other tasks"},
		fix: []string{"when the host is quiet", "keep other work off the worker CPUs"}},
	{name: "wakeup slow on shallow bare metal", fixture: "cpu-idle/metal-c1e",
		opts:  doctor.Options{WorkerCPUs: []int{2}, WakeupProbe: time.Second, WakeupProber: doctortest.FakeWakeup{Report: slowWakeup}},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Warn}, ev: []string{"not the idle state"}, fix: []string{"keep other work off the worker CPUs"}},
	{name: "wakeup lost", fixture: "cpu-idle/vm-haltpoll-off",
		opts:  doctor.Options{WorkerCPUs: []int{0}, WakeupProbe: time.Second, WakeupProber: doctortest.FakeWakeup{Err: fmt.Errorf("no wakeup within 250ms: %w", doctor.ErrProbeLost)}},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Warn}, ev: []string{"wakeup lost: the host let"}, fix: []string{"quieter host", "see cpu-idle"}},
	{name: "wakeup outside the cpuset", fixture: "cpu-idle/vm-haltpoll-off",
		opts:  doctor.Options{WorkerCPUs: []int{0}, WakeupProbe: time.Second, WakeupProber: doctortest.FakeWakeup{Err: fmt.Errorf("pin thread 7 to CPU 0: %w: invalid argument", doctor.ErrPin)}},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Warn}, ev: []string{"cannot run on that CPU"}, fix: []string{"outside taskset"}},
	{name: "wakeup not asked for", fixture: "cpu-idle/vm-haltpoll-off", opts: doctor.Options{WorkerCPUs: []int{0}},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Skip}, ev: []string{"--probe-wakeup 0"}},
	{name: "wakeup off the live host", fixture: "cpu-idle/vm-haltpoll-off", opts: doctor.Options{WorkerCPUs: []int{0}, WakeupProbe: time.Second},
		check: doctor.CheckWakeup, want: []doctor.Status{doctor.Skip}, ev: []string{"not the live host"}},

	// IRQ affinity.
	{name: "irq intel pass", fixture: "irq-affinity/intel-pass", opts: doctor.Options{NIC: "eth1", Interface: "kb0", AppLcores: []int{4, 5}, WorkerCPUs: []int{6}},
		check: doctor.CheckIRQAffinity, want: []doctor.Status{doctor.Pass},
		ev: []string{"IRQ 40 i40e-eth1-TxRx-0 -> 0", "IRQ 41 i40e-eth1-TxRx-1 -> 1", "kb0 (TAP) has no IRQs", "worker CPUs 6"}},
	{name: "irq intel fail", fixture: "irq-affinity/intel-fail", opts: doctor.Options{NIC: "eth1", Interface: "kb0", AppLcores: []int{4, 5}, WorkerCPUs: []int{6}},
		check: doctor.CheckIRQAffinity, want: []doctor.Status{doctor.Warn},
		ev:  []string{"IRQ 40 (i40e-eth1-TxRx-0) may fire on app lcores 4", "IRQ 41 (i40e-eth1-TxRx-1) may fire on app lcores 4-5"},
		fix: []string{"kbridge doctor --fix sets IRQ 40 -> 0, IRQ 41 -> 1"}},
	{name: "irq mlx5 fail", fixture: "irq-affinity/mlx5-fail", opts: doctor.Options{NIC: "enp8s0f0", AppLcores: []int{1, 2}, WorkerCPUs: []int{3}},
		check: doctor.CheckIRQAffinity, want: []doctor.Status{doctor.Warn},
		ev:  []string{"IRQ 61 mlx5_comp0@pci:0000:08:00.0 -> 0 (hint 0)", "IRQ 62 (mlx5_comp1@pci:0000:08:00.0) may fire on app lcores 1", "irqbalance runs (pid 812)"},
		fix: []string{"IRQ 62 -> 4, IRQ 63 -> 5", "IRQBALANCE_BANNED_CPULIST"}},
	{name: "irq workers share lcores", fixture: "irq-affinity/intel-pass", opts: doctor.Options{NIC: "eth1", Interface: "kb0", AppLcores: []int{4, 5}, WorkerCPUs: []int{5}},
		check: doctor.CheckIRQAffinity, want: []doctor.Status{doctor.Warn}, ev: []string{"kb0 processing shares CPU 5 with app lcores"}, fix: []string{"pin the workers"}},
	{name: "irq nic without netdev", fixture: "irq-affinity/intel-pass", opts: doctor.Options{NIC: "eth9", AppLcores: []int{4}},
		check: doctor.CheckIRQAffinity, want: []doctor.Status{doctor.Pass}, ev: []string{"NIC eth9 has no netdev"}},
	{name: "irq lcores unknown", fixture: "irq-affinity/intel-fail", opts: doctor.Options{NIC: "eth1"}, check: doctor.CheckIRQAffinity, want: []doctor.Status{doctor.Skip}},

	// XDP through the fake inspector.
	{name: "xdp none", fixture: "xdp/any", opts: doctor.Options{NIC: "eth1", Interface: "kb0", XDP: doctortest.FakeXDP{"eth1": {}, "kb0": {}}},
		check: doctor.CheckXDP, want: []doctor.Status{doctor.Pass, doctor.Pass}, ev: []string{"no XDP program"}},
	{name: "xdp native", fixture: "xdp/any", opts: doctor.Options{NIC: "eth1", XDP: doctortest.FakeXDP{"eth1": {Attached: true, Mode: "native", ProgID: 42}}},
		check: doctor.CheckXDP, want: []doctor.Status{doctor.Warn}, ev: []string{"program id 42 in native mode", "33 -> 26 Gbit/s"}, fix: []string{"ip link set dev eth1 xdp off"}},
	{name: "xdp generic", fixture: "xdp/any", opts: doctor.Options{NIC: "eth1", XDP: doctortest.FakeXDP{"eth1": {Attached: true, Mode: "generic", ProgID: 7}}},
		check: doctor.CheckXDP, want: []doctor.Status{doctor.Warn}, ev: []string{"generic XDP"}, fix: []string{"native mode"}},
	{name: "xdp offload", fixture: "xdp/any", opts: doctor.Options{NIC: "eth1", XDP: doctortest.FakeXDP{"eth1": {Attached: true, Mode: "offload", ProgID: 9}}},
		check: doctor.CheckXDP, want: []doctor.Status{doctor.Pass}, ev: []string{"no host CPU cost"}},
	{name: "xdp no links", fixture: "xdp/any", opts: doctor.Options{NIC: "eth1", Interface: "kb0", XDP: doctortest.FakeXDP{}},
		check: doctor.CheckXDP, want: []doctor.Status{doctor.Skip, doctor.Skip}, ev: []string{"does not exist"}},
	{name: "xdp no inspector off-host", fixture: "xdp/any", opts: doctor.Options{NIC: "eth1"}, check: doctor.CheckXDP, want: []doctor.Status{doctor.Skip}, ev: []string{"not the live host"}},
}

// Wakeup reports for the fake prober: this bed's shape (a VM whose idle
// vCPU halts), a bare-metal host with shallow idle states, and a worker
// CPU busy with other tasks.
var (
	slowWakeup = doctor.WakeupReport{
		Cross:    doctor.WakeupStats{Samples: 300, P50: 103 * time.Microsecond, P99: 221 * time.Microsecond, Max: 3990 * time.Microsecond, Over1ms: 3},
		Same:     doctor.WakeupStats{Samples: 150, P50: 6 * time.Microsecond, P99: 20 * time.Microsecond, Max: 30 * time.Microsecond},
		StealPct: 15, IdlePct: 98,
	}
	fastWakeup = doctor.WakeupReport{
		Cross:    doctor.WakeupStats{Samples: 300, P50: 4 * time.Microsecond, P99: 9 * time.Microsecond, Max: 40 * time.Microsecond},
		Same:     doctor.WakeupStats{Samples: 150, P50: 3 * time.Microsecond, P99: 5 * time.Microsecond, Max: 12 * time.Microsecond},
		StealPct: -1, IdlePct: 99,
	}
	busyWakeup = doctor.WakeupReport{
		Cross:    doctor.WakeupStats{Samples: 300, P50: 60 * time.Microsecond, P99: 2 * time.Millisecond, Max: 4 * time.Millisecond, Over1ms: 9},
		Same:     doctor.WakeupStats{Samples: 150, P50: 8 * time.Microsecond, P99: 900 * time.Microsecond, Max: 1500 * time.Microsecond, Over1ms: 1},
		StealPct: -1, IdlePct: 20,
	}
)

func TestChecks(t *testing.T) {
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Root = fixture(t, tc.fixture)
			var got []doctor.Result
			for _, r := range doctor.Run(context.Background(), opts) {
				if r.Check == tc.check {
					got = append(got, r)
				}
			}
			var statuses []doctor.Status
			for _, r := range got {
				statuses = append(statuses, r.Status)
			}
			if !slices.Equal(statuses, tc.want) {
				t.Fatalf("statuses %v, want %v; results:\n%s", statuses, tc.want, dump(got))
			}
			all := dump(got)
			for _, s := range tc.ev {
				if !slices.ContainsFunc(got, func(r doctor.Result) bool { return strings.Contains(r.Evidence, s) }) {
					t.Errorf("no evidence contains %q:\n%s", s, all)
				}
			}
			for _, s := range tc.fix {
				if !slices.ContainsFunc(got, func(r doctor.Result) bool { return strings.Contains(r.Fix, s) }) {
					t.Errorf("no fix contains %q:\n%s", s, all)
				}
			}
			for _, r := range got {
				if (r.Status == doctor.Warn || r.Status == doctor.Fail) && r.Fix == "" {
					t.Errorf("%s %s has no fix: %s", r.Status, r.Check, r.Evidence)
				}
			}
		})
	}
}

func dump(rs []doctor.Result) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Status.String() + " " + r.Check + ": " + r.Evidence + " | fix: " + r.Fix + "\n")
	}
	return b.String()
}

func TestWakeupCheckProbesFromTheAppCPUToTheWorkersAndReportsTheFigures(t *testing.T) {
	var asked doctor.WakeupPlan
	opts := doctor.Options{Root: fixture(t, "cpu-idle/vm-haltpoll-on"), WorkerCPUs: []int{0, 1}, AppLcores: []int{3, 2},
		WakeupProbe: 1500 * time.Millisecond, WakeupProber: doctortest.FakeWakeup{Report: fastWakeup, Asked: &asked}}
	for _, r := range doctor.Run(context.Background(), opts) {
		if r.Check != doctor.CheckWakeup {
			continue
		}
		if rep, ok := r.Data.(*doctor.WakeupReport); !ok || rep.Cross != fastWakeup.Cross || rep.Plan.From != 3 {
			t.Errorf("wakeup data %#v, want the probe's report for --json", r.Data)
		}
	}
	if asked.From != 3 || !slices.Equal(asked.To, []int{0, 1}) || asked.Budget != opts.WakeupProbe || asked.Gap <= 0 {
		t.Errorf("asked for %+v, want CPU 3 -> 0,1 within %v", asked, opts.WakeupProbe)
	}
}

func TestWakeupAdviceLeavesOutLearnWhenItIsOn(t *testing.T) {
	for _, learn := range []bool{false, true} {
		opts := doctor.Options{Root: fixture(t, "cpu-idle/vm-haltpoll-off"), WorkerCPUs: []int{0}, Learn: learn}
		for _, r := range doctor.Run(context.Background(), opts) {
			if r.Check == doctor.CheckCPUIdle && strings.Contains(r.Fix, "policy.learn") == learn {
				t.Errorf("learn %v: fix %q", learn, r.Fix)
			}
		}
	}
}

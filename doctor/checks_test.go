package doctor_test

import (
	"context"
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

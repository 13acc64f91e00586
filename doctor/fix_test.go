package doctor_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/doctor"
)

func TestFixIRQ(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fixture string
		opts    doctor.Options
		want    map[int]string // IRQ -> smp_affinity_list after the fix
		same    []int          // IRQs that must keep their value
	}{
		{name: "intel", fixture: "irq-affinity/intel-fail",
			opts: doctor.Options{NIC: "eth1", AppLcores: []int{4, 5}, WorkerCPUs: []int{6}},
			// targets 0-3,7; queues 0 and 1 take the first two.
			want: map[int]string{40: "0", 41: "1"}, same: []int{42, 43}},
		{name: "mlx5 hint ignored on lcores", fixture: "irq-affinity/mlx5-fail",
			opts: doctor.Options{NIC: "enp8s0f0", AppLcores: []int{1, 2}, WorkerCPUs: []int{3}},
			want: map[int]string{62: "4", 63: "5"}, same: []int{60, 61, 64}},
		{name: "workers used when nothing else is left", fixture: "irq-affinity/intel-fail",
			opts: doctor.Options{NIC: "eth1", AppLcores: []int{0, 1, 2, 3, 4, 5}, WorkerCPUs: []int{6, 7}},
			want: map[int]string{40: "6", 41: "7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fixture(t, tc.fixture)
			before := map[int]string{}
			for _, irq := range tc.same {
				before[irq] = readAffinity(t, root, irq)
			}
			opts := tc.opts
			opts.Root = root
			plan, err := doctor.PlanIRQ(opts)
			if err != nil {
				t.Fatal(err)
			}
			changes, err := doctor.FixIRQ(opts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(plan, changes) {
				t.Errorf("FixIRQ applied %v, PlanIRQ said %v", changes, plan)
			}
			if len(changes) != len(tc.want) {
				t.Errorf("changes %v, want %d", changes, len(tc.want))
			}
			for irq, want := range tc.want {
				if got := readAffinity(t, root, irq); got != want {
					t.Errorf("IRQ %d affinity %q, want %q", irq, got, want)
				}
			}
			for irq, was := range before {
				if got := readAffinity(t, root, irq); got != was {
					t.Errorf("IRQ %d changed from %q to %q", irq, was, got)
				}
			}
			// The fixed tree passes the check it failed.
			again, err := doctor.PlanIRQ(opts)
			if err != nil || len(again) != 0 {
				t.Errorf("after the fix PlanIRQ = %v, %v; want nothing to do", again, err)
			}
		})
	}
}

func TestFixIRQErrors(t *testing.T) {
	root := fixture(t, "irq-affinity/intel-fail")
	if _, err := doctor.FixIRQ(doctor.Options{Root: root, NIC: "eth1"}); err == nil || !strings.Contains(err.Error(), "lcores unknown") {
		t.Errorf("no lcores: err %v", err)
	}
	if _, err := doctor.FixIRQ(doctor.Options{Root: root, AppLcores: []int{1}}); err == nil {
		t.Error("no NIC: want an error")
	}
	if _, err := doctor.FixIRQ(doctor.Options{Root: root, NIC: "eth1", AppLcores: []int{0, 1, 2, 3, 4, 5, 6, 7}}); err == nil ||
		!strings.Contains(err.Error(), "no CPU left") {
		t.Errorf("all CPUs lcores: err %v", err)
	}
}

func readAffinity(t *testing.T, root string, irq int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "proc/irq", strconv.Itoa(irq), "smp_affinity_list"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

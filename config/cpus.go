package config

// The worker CPUs: configured or by default, checked against the machine's
// online CPUs (sysfs, in the kernel's list format: internal/cpulist).

import (
	"os"
	"runtime"
	"slices"

	"github.com/kbridge/kbridge/internal/cpulist"
)

// WorkerCPU returns the CPU of queue q's worker.
func (c Config) WorkerCPU(q int) int {
	cpus := c.WorkerCPUs()
	return cpus[min(q, len(cpus)-1)]
}

// WorkerCPUs returns the configured worker CPUs or the default ones.
func (c Config) WorkerCPUs() []int {
	if len(c.Workers.CPUs) == 0 {
		return DefaultWorkerCPUs(onlineCPUs())
	}
	return c.Workers.CPUs
}

// DefaultWorkerCPUs leaves the highest online CPU to the DPDK app
// (the test bed's placement, tests/testbed/README.md) and returns the others, given the online CPUs
// in ascending order; a one-CPU machine shares its CPU.
func DefaultWorkerCPUs(online []int) []int {
	switch len(online) {
	case 0:
		return []int{0}
	case 1:
		return slices.Clone(online)
	}
	return slices.Clone(online[:len(online)-1])
}

// cpuOnlinePath lists the CPUs that exist and are online. A variable so that
// tests can point it at a fixture.
var cpuOnlinePath = "/sys/devices/system/cpu/online"

// onlineCPUs returns the online CPUs, ascending. It reads sysfs rather than
// using runtime.NumCPU, which counts the CPUs of kbridge's own affinity
// mask: under systemd's CPUAffinity=, taskset, or with the CPUs isolated
// (isolcpus=) that kbridge doctor recommends for workers, NumCPU would
// refuse the very CPUs the workers should run on. Without sysfs it falls
// back to CPUs 0 to NumCPU-1.
func onlineCPUs() []int {
	if b, err := os.ReadFile(cpuOnlinePath); err == nil {
		if cpus, err := cpulist.Parse(string(b)); err == nil && len(cpus) > 0 {
			return cpus
		}
	}
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

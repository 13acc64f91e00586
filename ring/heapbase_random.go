//go:build goexperiment.randomizedheapbase64

package ring

// randomHeapBase: this binary's Go heap starts at a random address in the
// lower 64 TiB (the default since Go 1.26), where a DPDK primary's memory may need
// to be mapped too. The Makefile builds without it (docs/DPDK.md).
const randomHeapBase = true

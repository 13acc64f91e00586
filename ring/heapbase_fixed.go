//go:build !goexperiment.randomizedheapbase64

package ring

// randomHeapBase: this binary's Go heap starts at 0xc000000000 (768 GiB),
// above the addresses DPDK maps its memory at by default.
const randomHeapBase = false

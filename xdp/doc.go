// Package xdp is kbridge's XDP redirect path for NICs with native XDP
// (mlx5-style): a program on the NIC sends fast-path flows to the DPDK app's
// AF_XDP sockets (the XSKMAP named xsks_map, which DPDK's net_af_xdp uses)
// and redirects every other frame into a veth pair whose inner end, kb0, is
// the kernel's view of the port. What the kernel sends on kb0 is redirected
// back out of the NIC by a second program on the outer veth end. Nothing is
// copied through user space and nothing polls.
//
// Attach sets it all up from a Config and returns a Path; Path.Close takes
// it all down again. See docs/XDP.md for the design, the veth facts this
// code works around, and the measured cost.
//
// Attach and Close act on the network namespace of the calling OS thread at
// the time Attach is called; Close may be called from any goroutine.
package xdp

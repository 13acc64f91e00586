// Package tap is the kernel's side of the exception path: the interface the
// host sees (kb0), a TAP device opened with virtio-net headers, and every
// rule a frame must meet to cross between it and the app.
//
// The concept: one TAP queue (IFF_MULTI_QUEUE) per worker, each a
// bridge.Kernel (Queue). Toward the kernel, Queue.Write takes a burst of
// the app's packets as iovecs into the app's memory and writes each with
// one writev, or, where consecutive TCP segments of one flow can be merged,
// writes them as one GSO super-frame the kernel's GRO would have made
// (package vnet's Coalescer), falling back frame by frame where the kernel
// refuses. Toward the app, Queue.Read takes what the kernel sends, up to
// 64 KiB super-frames when offloads are on, and either hands a TCP
// super-frame whole to an app side that takes it, or cuts it into frames of
// the MTU with the checksums the kernel left partial finished.
//
// The contract:
//   - The frame rules live here and nowhere else in Go: a frame longer than
//     the MTU plus its Ethernet header (and one VLAN tag) is dropped and
//     counted, never truncated; a runt is dropped; the app's verdicts (its
//     NIC's checksum flags, LRO sizes) are honoured or checked.
//   - Queue owns every syscall on its fd and reports what it did in a
//     bridge.Result; it never calls the app's side.
//   - The interface itself (Device: Create or Adopt, MTU, carrier, speed,
//     flags, persistence) is configured through netlink and the TUN ioctls.
//     What others do to it is reported (Watch's Events, from one netlink
//     subscription the process shares) and can be acted on (Set, Recreate
//     under the running queues by dup3 onto their fd numbers,
//     RestoreRoutes), but package tap decides nothing: kbridge's keeper, in
//     package daemon, does.
//   - The interface is kbridge's (its owner uid, IFF_TUN_EXCL on the first
//     queue): another user cannot attach a queue of it.
//
// See docs/ARCHITECTURE.md, "The kernel side".
package tap

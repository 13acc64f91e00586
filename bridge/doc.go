// Package bridge is kbridge's engine: it moves packets between the DPDK
// app and the kernel, one queue pair at a time, and decides when to wait.
//
// A Worker owns one queue pair and runs on its own locked, pinned thread.
// On one side is the app (App: AppOut, the packets the app sends toward
// the kernel; AppIn, slots for frames toward the app; Waker, the
// need-wakeup handshake), on the other the kernel (Kernel: one TAP queue). Both move
// bursts, never single packets: a side crosses into C or the kernel once
// per burst, and the worker's loop allocates nothing.
//
// The contract between the two sides runs through the worker alone:
//   - Neither side calls the other, nor knows its kind. The app's side sees
//     frames as byte slices and iovecs; the kernel side sees Packets and
//     slots, never an mbuf. Everything a frame's rules need (MTU, VLAN,
//     runts, virtio-net headers, offloads) is the kernel side's; how the
//     app's memory is reached is the app side's.
//   - Ownership: a burst from AppOut.Next is the app side's until the next
//     Next or Close; the kernel side may read it during Write and keeps
//     nothing. A frame read into a slot is the app side's once Put queued
//     it. Every packet is given back or handed over exactly once, including
//     when the worker stops.
//   - Counting is the worker's: a side reports what it did (Result,
//     PutResult, a drop reason) and the worker adds it to Counters, so a
//     counter has one writer.
//   - Waiting is the worker's: after a burst that moved nothing it asks
//     the policy.Ladder what to do and carries it out through a
//     policy.Waiter parked on the kernel side's fd and the app's kicks. A
//     park is announced to the app first (Waker.PrepareToPark: flag, fence,
//     re-check in one step), so no packet waits behind a parked worker.
//
// Some app sides can do more, and say so once, in the App they hand
// NewWorker: take TCP super-frames whole (TSO) or cut them themselves
// (Split), police the app's frames per class before the kernel sees them
// (Policer: control-plane protection, package copp), keep room for control
// frames toward the app (Reserver), time how long frames waited
// (Residence), or be kicked through descriptors of their own (WatchKicks).
// The worker takes the plain path where a capability is nil, and asks no
// side what it is. A Kernel's fd may get a new file under the running
// worker (FdGeneration), which the worker's waiter follows.
//
// Policies and CoPP's configuration change live, between bursts. Package
// ring implements the app's side over DPDK (rings and vrings), package tap
// the kernel's over a TAP device, and bridgetest fakes both in Go memory
// for tests. See docs/ARCHITECTURE.md, "The engine".
package bridge

// Package ring is kbridge's app side over DPDK, for both modes that move
// packets through the app's rings: the rte_rings of an exception port (ring
// mode) and the vrings of a virtio-user port (mode vhost). It is the one
// package compiled against DPDK: every C file of kbridge's DPDK side sits
// in this directory, one concern each, with the headers they include and
// the app's public headers; cgo.go alone holds the #cgo directives.
//
// Ring mode (port*.go, owner.go, requests.go, reconcile.go, secondary.go):
// a DPDK secondary process (DPDK 22.11 or 24.11: docs/DPDK.md) joined to an
// app that created an exception port with kbridge.h. It refuses an app that
// runs another DPDK than kbridge was built with before EAL starts
// (CheckPrimaryVersion, version.go), joins the app's EAL (InitSecondary,
// PrimaryAlive), keeping EAL's threads off the app's lcores; finds and
// claims the port (OpenPort checks the control block's magic, version and
// length; a version-2 port has an owner and a record of the mbufs kbridge
// holds, which the next kbridge frees after a crash); and gives each Queue
// its app side: Out (bridge.AppOut) and In (bridge.AppIn, bridge.AppTSO,
// and bridge.AppSplit: split.c cuts TCP super-frames straight into mbufs)
// over the app's rings, and the worker's half of the need-wakeup handshake
// (bridge.Waker: flag, full fence and ring re-check in one C call; the
// eventfd handed over by DPDK's multi-process IPC).
//
// Mode vhost (vhost*.go, guestmem.c): a vhost-user backend (DPDK's
// librte_vhost) for an unmodified DPDK app that adds one virtio-user port:
//
//	--vdev net_virtio_user0,path=/run/kbridge/kb0.sock,queues=1
//
// kbridge runs its own EAL as a primary (InitVhostEAL; no shared hugepages
// with the app: vhost-user shares the app's memory through the memory
// table's fds) and its own mbuf pool (CreateVhostPool). A VhostBackend
// serves the socket, one frontend at a time, and refuses what a hostile
// frontend could crash it with (a memory region past the end of its file, a
// descriptor chain librte_vhost would be stuck on), saying why. Each queue
// pair's app side is a VhostQueue (bridge.AppOut over the app's TX vring,
// and bridge.FdWaker: the vring's kick eventfd armed while the worker
// parks) and a VhostIn (bridge.AppIn and bridge.AppTSO over its RX vring).
// Package vhost holds the mode's pure Go: the virtio feature names and the
// socket's directory.
//
// Both modes start the EAL through eal.go and move packets through one
// burst core (burst.c, burst.go): each mode's Out and In embed its buffers
// and hand it their struct kb_burst_ops. The core's out buffer also does
// control-plane protection (copp.go): kbridge_classify.h classes each frame,
// and policer.c's token buckets decide which it frees before Go sees them;
// the in buffer keeps the app's last room for control frames. Every function that touches
// packets crosses cgo once per burst and allocates nothing in Go, and every
// mbuf is freed or handed over exactly once. Mbuf ownership and the
// handshake's fences are in docs/ARCHITECTURE.md, "The data path and its
// contracts".
package ring

// Package ring is kbridge's app side over DPDK: it joins the app's packets
// where they live, in DPDK's memory, and gives the engine (package bridge)
// bursts of them, for both modes that reach an app through DPDK.
//
// Ring mode: the app includes kbridge.h and makes an exception port, a
// control block and per queue two rings (to the kernel, from the kernel)
// in its hugepage memory. kbridge joins its EAL as a secondary process
// (refusing before EAL starts an app that runs another DPDK than kbridge was
// built with), finds the port by name, claims it (an owner word: its pid and
// start time) before it touches a ring, recovers what a killed kbridge held,
// and gives each queue an app side: Out and In over the rings, and the
// worker's half of the need-wakeup handshake (flag, full fence and ring
// re-check in one C call; the eventfd reaches the app over DPDK's IPC). The
// app's requests (MTU, MAC, link state, flags) and link reports travel
// through the control block, one writer per field.
//
// Mode vhost: the app is unmodified and adds a virtio-user port; kbridge is
// its vhost-user backend (librte_vhost), with an EAL and an mbuf pool of
// its own, sharing the app's memory only through the memory table's fds.
// It trusts no frontend: every message passes an allow-list, memory regions
// are checked against their files, a bad descriptor chain or a SIGBUS in
// guest memory is survived. Each queue pair's app side is a VhostQueue and
// a VhostIn over the vrings. Package vhost holds the mode's pure Go.
//
// Both modes move packets through one burst core: an out buffer describes a
// dequeued burst of mbuf chains as iovecs into mbuf memory, an in buffer
// copies frames into fresh mbufs and hands them over (and cuts a TCP
// super-frame into MTU frames straight into mbufs, where the app does not
// take it whole). Each burst crosses cgo once and allocates nothing in Go,
// and every mbuf is freed or handed over exactly once, crashes included.
// The out buffer also does control-plane protection (package copp): it
// classes each frame (the classifier of kbridge_classify.h, the socket view
// of what the host listens on) and frees what a class's token bucket
// refuses before Go sees it. A mode plugs into the core with a table of its
// C functions (struct kb_burst_ops: how to dequeue, enqueue, take and give
// mbufs).
//
// Why one package: it has three parts, ring mode, mode vhost and the burst
// core both modes move packets through, and they share C types: the burst
// buffers, the ops table a mode fills, the held-mbuf record. A C type of
// one cgo package is not another's (each package has its own
// C.struct_kb_out), so a mode in a package of its own could not hand the
// core a buffer without unsafe.Pointer at every crossing; and the modes' C
// calls the core's C directly and inlines its headers' functions, which
// within one package is plain C built with one set of flags. So the parts
// are one package, and each file's name says which part it serves: port_*
// (and port.*) ring mode, vhost_* (and vhost.*) mode vhost, burst_* (and
// burst.*) the core; a test is named for the part it tests. A file with
// none of these names serves the package as a whole: starting the EAL for
// either mode, the #cgo directives, the test hooks.
//
// cgo.go holds the package's #cgo directives, and its C includes only
// headers of this directory and the app's installed headers (kbridge.h and
// those it includes, KNI's API over it), which live in include/kbridge: the
// ABI, in a directory of its own, whose package embeds them so that Go's
// build cache sees every edit (headers.go).
//
// Mbuf ownership, the handshake's fences and the version rules are in
// docs/ARCHITECTURE.md, "The data path and its contracts".
package ring

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge_ring.h: a port's shared control block, its rings and the burst
 * calls of the app's lcores. Part of kbridge.h, which applications include.
 *
 * Contract:
 *  - One port = one memzone "kbridge_<name>" holding struct kbridge_ctl, plus
 *    per queue two rings: "kb_<name>_tk<q>" (app -> kernel) and
 *    "kb_<name>_fk<q>" (kernel -> app).
 *  - Each queue has one producer and one consumer on each ring: one app lcore
 *    calls kbridge_to_kernel()/kbridge_from_kernel() for a given queue, one
 *    kbridge worker serves it. The rings are created single-producer /
 *    single-consumer for that reason.
 *  - Every mbuf handed to kbridge_to_kernel() is owned by kbridge from then on:
 *    what does not fit in the ring is freed and counted here. Every mbuf
 *    returned by kbridge_from_kernel() is owned by the caller.
 *  - The app's mbufs are allocated and freed by the app only (version 7), as
 *    KNI's kernel never touched the pool: per queue two more rings,
 *    "kb_<name>_al<q>" (fresh: mbufs the app allocated for kbridge to fill
 *    with the kernel's frames; any app call may put, kbridge's worker alone
 *    takes) and "kb_<name>_sp<q>" (spent: every mbuf kbridge is done with,
 *    for the app to free; kbridge's worker alone puts, any app call may
 *    take). kbridge_from_kernel() tops the fresh ring up and both burst
 *    calls free what waits on the spent ring, with the app's own mempool
 *    handlers and lcore cache. kbridge, a DPDK secondary whose table of
 *    mempool handlers may be ordered otherwise (a statically linked app's
 *    is), never calls the pool's handlers. What the two processes must
 *    agree on instead, the mbuf's and the ring's layout, the app records
 *    (struct kbridge_layout) and kbridge checks when it attaches.
 *  - Wakeups: a parked kbridge worker sets need_wakeup, issues a full fence and
 *    re-checks its ring before it sleeps. kbridge_to_kernel() enqueues, fences
 *    and writes the worker's eventfd only when need_wakeup was set, so a busy
 *    worker costs the app no syscall. How the eventfd reaches the app:
 *    kbridge_wakeup.h.
 *  - Priority (version 6): the last KBRIDGE_RESERVE(capacity) slots of a
 *    to_kernel ring are kept for control and neighbour frames
 *    (kbridge_class_reserved()). kbridge_to_kernel() classifies frames only
 *    when a burst would reach into that reserve, so it costs nothing while
 *    the ring has room; then a default frame that does not fit above the
 *    reserve is freed and counted, and a control frame still goes in.
 *    kbridge keeps the same reserve in its from_kernel enqueue.
 */
#ifndef KBRIDGE_RING_H
#define KBRIDGE_RING_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <rte_atomic.h>
#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_mempool.h>
#include <rte_memzone.h>
#include <rte_ring.h>

#include "kbridge_classify.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KBRIDGE_MAGIC 0x4b425247u /* "KBRG" */
/* Versions 2 to 5 append fields to the control block (see struct
 * kbridge_ctl), version 6 to the per-queue block's padding, version 7 the
 * fresh and spent rings and what describes them; kbridge still serves apps
 * of older versions, which lack them. */
#define KBRIDGE_VERSION 7u
#define KBRIDGE_VERSION_MIN 1u
#define KBRIDGE_MAX_QUEUES 16
/* Port names fit an interface name (IFNAMSIZ - 1) and keep ring names short. */
#define KBRIDGE_NAME_MAX 15
#define KBRIDGE_MZ_PREFIX "kbridge_"
/* Dynamic mbuf field with the TSC at enqueue: residence-time statistics. */
#define KBRIDGE_DYNFIELD_TSC "kbridge_enqueue_tsc"
/* Version 7: the mbufs kbridge_from_kernel() keeps on a fresh ring unless
 * the port says otherwise (kbridge_port_set_fresh_target()), at most the
 * ring's capacity. KNI's alloc FIFO held up to 1024 per KNI. */
#define KBRIDGE_FRESH_TARGET 512u
/* How many mbufs one refill allocates at a time, and one reap frees. */
#define KBRIDGE_MBUF_BURST 32u

/* What the app wants of the interface (kbridge_ctl.if_flags). */
#define KBRIDGE_IF_UP_SET 0x1u /* the admin state is the app's: KBRIDGE_IF_UP or down */
#define KBRIDGE_IF_UP 0x2u

/* Whether kbridge serves the port (kbridge_ctl.served). */
#define KBRIDGE_SERVED_NOT 0u     /* not (yet, or any more) */
#define KBRIDGE_SERVED_YES 1u     /* served: the interface exists, the workers run */
#define KBRIDGE_SERVED_REFUSED 2u /* kbridge will not serve it as it is: served_why says why */

/* What the app's port can take from kbridge (kbridge_ctl.app_offloads). */
/* TCP super-frames as one mbuf chain with RTE_MBUF_F_TX_TCP_SEG, l2/l3/l4
 * lengths, tso_segsz and the pseudo-header checksum: the port segments them.
 * Without it kbridge hands over MTU-sized frames with finished checksums. */
#define KBRIDGE_APP_TSO 0x1u

/* One request, as kbridge_port_poll_request() hands it to the app. */
struct kbridge_request {
	uint32_t seq;   /* kbridge's number of it: kbridge_port_reply() answers this one */
	uint32_t type;  /* KBRIDGE_REQ_* */
	uint32_t value; /* MTU, or 1/0 for LINK, PROMISC, ALLMULTI */
	uint8_t mac[6]; /* KBRIDGE_REQ_MAC */
	uint16_t pad;
};

/* Per-queue shared state. Each field has one writer, named in its comment. */
struct kbridge_queue_ctl {
	/* Written by the worker: non-zero while it is parked or about to park. */
	volatile uint32_t need_wakeup;
	/* Written by the app: 1 once an eventfd for this queue was received. */
	volatile uint32_t have_eventfd;
	/* Counters written by the app lcore serving this queue. */
	volatile uint64_t to_kernel_pkts;    /* enqueued to the to_kernel ring */
	volatile uint64_t to_kernel_dropped; /* ring full: freed by the app */
	volatile uint64_t from_kernel_pkts;  /* dequeued by the app */
	volatile uint64_t kicks;             /* eventfd writes */
	/* ---- version 6, in what was the cache line's padding ---- */
	/* Of to_kernel_pkts: control and neighbour frames queued into the
	 * reserve. Of to_kernel_dropped: control frames, and neighbour
	 * frames, freed because even the reserve was full. */
	volatile uint64_t to_kernel_reserved;
	volatile uint64_t to_kernel_dropped_control;
	volatile uint64_t to_kernel_dropped_neighbor;
} __rte_cache_aligned;

/* Per-queue counters of the fresh and spent rings (version 7). Each field
 * has one writer, named in its comment. */
struct kbridge_queue_mbufs {
	/* Written by the lcore that calls kbridge_from_kernel() for the queue. */
	volatile uint64_t fresh_put;      /* mbufs it put on the fresh ring */
	volatile uint64_t fresh_short;    /* refills the pool could not complete */
	volatile uint64_t spent_freed_rx; /* mbufs it freed off the spent ring */
	/* Written by the lcore that calls kbridge_to_kernel() for the queue. */
	volatile uint64_t spent_freed_tx; /* mbufs it freed off the spent ring */
	/* Written by kbridge's worker: how often the spent ring had no room for
	 * what it was done with, which it then kept and put later. */
	volatile uint64_t spent_waits;
	uint64_t reserved[3];
} __rte_cache_aligned;

/* What the app and kbridge must agree on to share mbufs and rings without
 * sharing code (version 7), in this order: each item is the expression it
 * names, as the app's build evaluates it. A DPDK built with other options
 * (enable_iova_as_pa=false moves `next`) differs here, not in its version. */
#define KBRIDGE_LAYOUT_ITEMS_(X)                              \
	X(mbuf_size, sizeof(struct rte_mbuf))                 \
	X(headroom, RTE_PKTMBUF_HEADROOM)                     \
	X(cache_line, RTE_CACHE_LINE_SIZE)                    \
	X(ring_size, sizeof(struct rte_ring))                 \
	X(ring_prod, offsetof(struct rte_ring, prod))         \
	X(ring_cons, offsetof(struct rte_ring, cons))         \
	X(buf_addr, offsetof(struct rte_mbuf, buf_addr))      \
	X(data_off, offsetof(struct rte_mbuf, data_off))      \
	X(refcnt, offsetof(struct rte_mbuf, refcnt))          \
	X(nb_segs, offsetof(struct rte_mbuf, nb_segs))        \
	X(port, offsetof(struct rte_mbuf, port))              \
	X(ol_flags, offsetof(struct rte_mbuf, ol_flags))      \
	X(packet_type, offsetof(struct rte_mbuf, packet_type)) \
	X(pkt_len, offsetof(struct rte_mbuf, pkt_len))        \
	X(data_len, offsetof(struct rte_mbuf, data_len))      \
	X(vlan_tci, offsetof(struct rte_mbuf, vlan_tci))      \
	X(buf_len, offsetof(struct rte_mbuf, buf_len))        \
	X(pool, offsetof(struct rte_mbuf, pool))              \
	X(next, offsetof(struct rte_mbuf, next))              \
	X(tx_offload, offsetof(struct rte_mbuf, tx_offload))  \
	X(dynfield1, offsetof(struct rte_mbuf, dynfield1))
#define KBRIDGE_LAYOUT_ENUM_(name, expr) KBRIDGE_LAYOUT_##name,
enum kbridge_layout_item { KBRIDGE_LAYOUT_ITEMS_(KBRIDGE_LAYOUT_ENUM_) KBRIDGE_LAYOUT_N };
#define KBRIDGE_LAYOUT_MAX 32 /* room for items a later version appends */

struct kbridge_layout {
	uint32_t n;                      /* items recorded: KBRIDGE_LAYOUT_N */
	uint32_t v[KBRIDGE_LAYOUT_MAX];  /* their values, in KBRIDGE_LAYOUT_ITEMS_ order */
	/* The name of the pool's mempool handler in the app's own table:
	 * informational, kbridge logs it (it never calls it). */
	char mempool_ops[32];
	uint32_t reserved;
};

/* The control block at the start of memzone "kbridge_<name>". */
struct kbridge_ctl {
	uint32_t magic;
	uint32_t version;
	char name[KBRIDGE_NAME_MAX + 1];
	char mempool[RTE_MEMPOOL_NAMESIZE];
	uint16_t nb_queues;
	uint16_t reserved;
	uint32_t ring_size;
	int32_t app_pid;
	/* Offset of KBRIDGE_DYNFIELD_TSC in struct rte_mbuf, or -1. */
	int32_t tsc_offset;
	uint64_t tsc_hz;
	struct kbridge_queue_ctl q[KBRIDGE_MAX_QUEUES];
	/* ---- version 2 ---- */
	/* Written by the app before it publishes the block, or through
	 * kbridge_port_set_offloads() before kbridge starts: KBRIDGE_APP_*. */
	uint32_t app_offloads;
	/* The most segments one mbuf chain may have on the app's port
	 * (rte_eth_desc_lim.nb_seg_max); kbridge splits what would need more. */
	uint16_t app_max_segs;
	uint16_t reserved2;
	/* ---- version 2: lifecycle (in what was reserved3[0..1]) ---- */
	/* The kbridge serving the port, claimed and released by kbridge with
	 * compare-and-swap: its pid in the low 32 bits, the low 32 bits of its
	 * start time (field 22 of /proc/<pid>/stat, clock ticks since boot) in
	 * the high 32 bits, so a reused pid is told apart. 0: none. */
	volatile uint64_t owner;
	/* Written by the app: non-zero once kbridge_port_free() began. kbridge
	 * then stops touching the rings and clears owner: its acknowledgement. */
	volatile uint32_t closing;
	uint32_t reserved4;
	/* Room for more lifecycle state; zero until used. */
	uint64_t reserved3[6];
	/* ---- version 3 ---- */
	/* The DPDK the app runs, rte_version() ("DPDK 24.11.8"), and the
	 * RTE_VERSION of the headers it was built with. kbridge (a DPDK
	 * secondary) must run exactly the app's DPDK; it reports both. */
	char dpdk_version[32];
	uint32_t dpdk_version_num;
	uint32_t reserved5;
	/* ---- version 4 ---- */
	/* The app port's link (KBRIDGE_LINK_*), written by the app through
	 * kbridge_port_set_link(), read by kbridge, which sets the kernel
	 * interface's carrier from it. One 64-bit store: never torn. */
	volatile uint64_t link;
	uint64_t reserved6;
	/* ---- version 5: the port's MAC and the kernel interface's requests ---- */
	/* The app port's MAC, written by kbridge_port_set_mac() before kbridge
	 * starts; mac_set is non-zero once it was. kbridge gives it to the
	 * kernel interface unless its configuration names one. */
	uint8_t app_mac[6];
	uint16_t app_mac_set;
	/* KBRIDGE_REQ_BIT()s of the requests the app serves, and the largest
	 * MTU its port takes (0: kbridge's own limit, its mbufs' room, alone),
	 * written by kbridge_port_serve_requests(). 0: none; kbridge then sets
	 * every change back, as before version 5. */
	volatile uint32_t app_requests;
	uint32_t app_max_mtu;
	/* The mailbox. kbridge makes req_seq odd while it writes req, then
	 * even: a new request whenever it is even and differs from the seq in
	 * req_answer. The app copies req, checks req_seq did not move
	 * meanwhile (a seqlock: kbridge may post the next one after a
	 * timeout), then stores req_answer: the request's seq in the low 32
	 * bits, its result (0: applied; -errno: refused) in the high 32, one
	 * 64-bit store, so that a result is never read with another's seq.
	 * An odd req_seq with nothing being written is a withdrawn request. */
	volatile uint32_t req_seq;
	uint32_t reserved7;
	volatile uint64_t req_answer;
	struct kbridge_request req;
	/* kbridge's own (it was reserved8[0]; the app never reads or writes
	 * it): what the app's port accepted of kbridge's requests, so that the
	 * next kbridge makes the kernel interface as the port now is (MAC,
	 * admin state, promiscuous, all-multicast). KBRIDGE_ACCEPTED_* flags
	 * with the MAC in the low 48 bits; one 64-bit store. 0: nothing
	 * accepted since the app created the port. */
	volatile uint64_t accepted;
	/* kbridge's own (it was reserved8[1]): the seq of the last request
	 * kbridge posted in place of an unanswered one (the value it set the
	 * kernel interface back to). A kbridge that takes the port over leaves
	 * that request for the app while it is unanswered, and withdraws any
	 * other. */
	volatile uint64_t undo;
	uint64_t reserved8[2];
	/* ---- version 7: the app's mbufs are allocated and freed by the app ---- */
	/* Written by the app before it publishes the block. */
	struct kbridge_layout layout;
	/* The mbufs kbridge_from_kernel() keeps on each fresh ring: it refills
	 * a ring that fell under half of it (kbridge_port_set_fresh_target()). */
	volatile uint32_t fresh_target;
	uint32_t reserved9;
	struct kbridge_queue_mbufs qm[KBRIDGE_MAX_QUEUES];
	/* ---- version 7: one kbridge for every port of an app ---- */
	/* Written by the app before it publishes the block
	 * (kbridge_port_set_interface()): the MTU and admin state it wants of
	 * the interface a kbridge that discovers the port makes (0: the
	 * kbridge's interface section's). KBRIDGE_IF_* flags. */
	uint32_t if_mtu;
	uint32_t if_flags;
	/* Written by kbridge: whether it serves the port (KBRIDGE_SERVED_*),
	 * and why not when it refused it (one line). It stores served_why,
	 * then served with a release: kbridge_port_wait_served() reads them
	 * the other way round. Back to KBRIDGE_SERVED_NOT when it lets go. */
	volatile uint32_t served;
	uint32_t reserved10;
	char served_why[112];
} __rte_cache_aligned;

/* The layout both sides agree on: each version appends fields and moves
 * none (kbridge reads an older app's block up to its version's end). */
#ifdef __cplusplus
#define KBRIDGE_LAYOUT_ASSERT_(e) static_assert(e, #e)
#else
#define KBRIDGE_LAYOUT_ASSERT_(e) _Static_assert(e, #e)
#endif
KBRIDGE_LAYOUT_ASSERT_(sizeof(struct kbridge_request) == 20);
KBRIDGE_LAYOUT_ASSERT_(sizeof(struct kbridge_queue_ctl) == RTE_CACHE_LINE_SIZE);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, mempool) == 24);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, tsc_offset) == 64);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, q) == 128);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, app_offloads) ==
		       128 + KBRIDGE_MAX_QUEUES * RTE_CACHE_LINE_SIZE);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, owner) ==
		       offsetof(struct kbridge_ctl, app_offloads) + 8);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, dpdk_version) ==
		       offsetof(struct kbridge_ctl, app_offloads) + 72);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, link) ==
		       offsetof(struct kbridge_ctl, app_offloads) + 112);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, app_mac) ==
		       offsetof(struct kbridge_ctl, app_offloads) + 128);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, req) ==
		       offsetof(struct kbridge_ctl, app_offloads) + 160);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, accepted) ==
		       offsetof(struct kbridge_ctl, app_offloads) + 184);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, reserved8) ==
		       offsetof(struct kbridge_ctl, app_offloads) + 200);
KBRIDGE_LAYOUT_ASSERT_(KBRIDGE_LAYOUT_N <= KBRIDGE_LAYOUT_MAX);
KBRIDGE_LAYOUT_ASSERT_(sizeof(struct kbridge_queue_mbufs) == RTE_CACHE_LINE_SIZE);
KBRIDGE_LAYOUT_ASSERT_(sizeof(struct kbridge_layout) == 168);
/* Version 7 starts where version 6's fields end. */
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, layout) ==
		       offsetof(struct kbridge_ctl, app_offloads) + 216);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, fresh_target) ==
		       offsetof(struct kbridge_ctl, layout) + 168);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, qm) ==
		       RTE_ALIGN_CEIL(offsetof(struct kbridge_ctl, fresh_target) + 8,
				      RTE_CACHE_LINE_SIZE));
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, if_mtu) ==
		       offsetof(struct kbridge_ctl, qm) +
		       KBRIDGE_MAX_QUEUES * RTE_CACHE_LINE_SIZE);
KBRIDGE_LAYOUT_ASSERT_(offsetof(struct kbridge_ctl, served) ==
		       offsetof(struct kbridge_ctl, if_mtu) + 8);
KBRIDGE_LAYOUT_ASSERT_(sizeof(struct kbridge_ctl) ==
		       offsetof(struct kbridge_ctl, served_why) + 112);

/* What the app's build says of the mbuf and the ring (version 7). */
#define KBRIDGE_LAYOUT_VALUE_(name, expr) l->v[KBRIDGE_LAYOUT_##name] = (uint32_t)(expr);
static inline void
kbridge_layout_fill_(struct kbridge_layout *l)
{
	memset(l, 0, sizeof(*l));
	l->n = KBRIDGE_LAYOUT_N;
	KBRIDGE_LAYOUT_ITEMS_(KBRIDGE_LAYOUT_VALUE_)
}

/* The app's process-local handle of a port. */
struct kbridge_port {
	const struct rte_memzone *mz;
	struct kbridge_ctl *ctl;
	struct rte_ring *to_kernel[KBRIDGE_MAX_QUEUES];
	struct rte_ring *from_kernel[KBRIDGE_MAX_QUEUES];
	/* The worker's eventfd per queue in this process, -1 when none. */
	volatile int eventfd[KBRIDGE_MAX_QUEUES];
	/* Per queue, the to_kernel ring's free room after the app's last
	 * enqueue: a floor of its room now, since only the app fills it. */
	unsigned int to_kernel_room[KBRIDGE_MAX_QUEUES];
	/* Version 7: the pool kbridge_from_kernel() refills the fresh rings
	 * from, and per queue the fresh and spent rings. */
	struct rte_mempool *mp;
	struct rte_ring *fresh[KBRIDGE_MAX_QUEUES];
	struct rte_ring *spent[KBRIDGE_MAX_QUEUES];
};

static inline int
kbridge_ring_name(char *buf, size_t len, const char *port, const char *dir,
		  uint16_t q)
{
	int n = snprintf(buf, len, "kb_%s_%s%u", port, dir, (unsigned int)q);
	return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

static inline void
kbridge_kick_(struct kbridge_port *p, uint16_t q)
{
	struct kbridge_queue_ctl *qc = &p->ctl->q[q];
	int fd;
	uint64_t one = 1;

	/* Only the first producer to see the flag kicks; the worker clears
	 * it itself when it wakes, whatever woke it. */
	if (__atomic_exchange_n(&qc->need_wakeup, 0, __ATOMIC_ACQ_REL) == 0)
		return;
	fd = __atomic_load_n(&p->eventfd[q], __ATOMIC_ACQUIRE);
	if (fd < 0)
		return;
	if (write(fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		qc->kicks++;
}

/* Frees what kbridge put on queue q's spent ring (version 7), a burst at a
 * time until one comes back short: the ring is found empty, so that it
 * never fills while the app calls either burst call (kbridge_port_create()
 * sizes it so). Costs two loads and no atomic when the ring is empty. */
static inline void
kbridge_reap_(struct kbridge_port *p, uint16_t q, volatile uint64_t *freed)
{
	void *m[KBRIDGE_MBUF_BURST];
	unsigned int n, total = 0;

	do {
		n = rte_ring_dequeue_burst(p->spent[q], m, KBRIDGE_MBUF_BURST, NULL);
		if (n == 0)
			break;
		rte_pktmbuf_free_bulk((struct rte_mbuf **)m, n);
		total += n;
	} while (n == KBRIDGE_MBUF_BURST);
	if (total > 0)
		*freed += total;
}

/* Tops queue q's fresh ring up to the port's target once it fell under half
 * of it (version 7): mbufs allocated here, by the app, in bulk, through its
 * own handlers and lcore cache, for kbridge to fill. A pool that cannot
 * give a whole chunk ends the refill (fresh_short counts it); the next
 * call tries again. What the ring has no room for (another producer filled
 * it meanwhile) is freed. */
static inline void
kbridge_refill_(struct kbridge_port *p, uint16_t q)
{
	struct kbridge_queue_mbufs *qm = &p->ctl->qm[q];
	struct rte_mbuf *m[KBRIDGE_MBUF_BURST];
	struct rte_ring *r = p->fresh[q];
	unsigned int target = p->ctl->fresh_target, have = rte_ring_count(r), n, put;

	if (2 * have >= target)
		return;
	while (have < target) {
		n = RTE_MIN(target - have, KBRIDGE_MBUF_BURST);
		if (rte_pktmbuf_alloc_bulk(p->mp, m, n) != 0) {
			qm->fresh_short++;
			return;
		}
		put = rte_ring_enqueue_burst(r, (void **)m, n, NULL);
		qm->fresh_put += put;
		if (put < n) {
			rte_pktmbuf_free_bulk(m + put, n - put);
			return;
		}
		have += n;
	}
}

/* The burst pkts[0..n) cut to what a ring with `room` free slots, `reserve`
 * of them kept for the control plane, takes: frames in order while there is
 * room above the reserve, then control and neighbour frames only. What is
 * cut is freed and counted; the kept are moved to the front, in order.
 * Returns how many are kept. */
static inline uint16_t
kbridge_admit_(struct kbridge_queue_ctl *qc, struct rte_mbuf **pkts, uint16_t n,
	       unsigned int room, unsigned int reserve)
{
	static const struct kbridge_class_match none = { {0}, {0}, {0}, {{{0}, 0, 0}}, 0, 0, 0, 0 };
	unsigned int above = room > reserve ? room - reserve : 0;
	uint16_t i, k = 0;

	for (i = 0; i < n; i++) {
		struct rte_mbuf *m = pkts[i];
		unsigned int c;
		uint8_t why;

		if (above > 0) {
			above--;
			room--;
			pkts[k++] = m;
			continue;
		}
		c = kbridge_classify(rte_pktmbuf_mtod(m, const uint8_t *),
				     rte_pktmbuf_data_len(m), &none, &why);
		if (room > 0 && kbridge_class_reserved(c)) {
			room--;
			qc->to_kernel_reserved++;
			pkts[k++] = m;
			continue;
		}
		qc->to_kernel_dropped++;
		if (kbridge_class_control(c))
			qc->to_kernel_dropped_control++;
		else if (c == KBRIDGE_CLASS_NEIGHBOR)
			qc->to_kernel_dropped_neighbor++;
		rte_pktmbuf_free(m);
	}
	return k;
}

/*
 * Hand `n` packets to the kernel through queue `q`. Returns how many were
 * queued; the rest were freed and counted as to_kernel_dropped. Either way
 * the caller no longer owns any of the n mbufs (pkts[] may be reordered:
 * the queued come first, in their order).
 */
static inline uint16_t
kbridge_to_kernel(struct kbridge_port *p, uint16_t q, struct rte_mbuf **pkts,
		  uint16_t n)
{
	struct kbridge_queue_ctl *qc = &p->ctl->q[q];
	struct rte_ring *r = p->to_kernel[q];
	int32_t off = p->ctl->tsc_offset;
	unsigned int sent, room = p->to_kernel_room[q];
	unsigned int reserve = KBRIDGE_RESERVE(rte_ring_get_capacity(r));
	uint16_t i;

	kbridge_reap_(p, q, &p->ctl->qm[q].spent_freed_tx);
	if (n == 0)
		return 0;
	if (off >= 0) {
		uint64_t now = rte_rdtsc();

		for (i = 0; i < n; i++)
			*RTE_MBUF_DYNFIELD(pkts[i], off, uint64_t *) = now;
	}
	/* The room seen last is a floor: while it holds the burst above the
	 * reserve, nothing is classified or read again. */
	if (room < reserve + n) {
		room = rte_ring_free_count(r);
		if (room < reserve + n)
			n = kbridge_admit_(qc, pkts, n, room, reserve);
	}
	sent = rte_ring_enqueue_burst(r, (void **)pkts, n, &room);
	p->to_kernel_room[q] = room;
	qc->to_kernel_pkts += sent;
	if (sent < n) {
		qc->to_kernel_dropped += n - sent;
		rte_pktmbuf_free_bulk(pkts + sent, n - sent);
	}
	if (sent > 0) {
		/* Pairs with the worker's fence between setting need_wakeup
		 * and re-checking the ring: one of the two sees the other. */
		rte_atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (qc->need_wakeup)
			kbridge_kick_(p, q);
	}
	return (uint16_t)sent;
}

/*
 * Declare what the app's port can take from kbridge (KBRIDGE_APP_TSO) and
 * the most segments per mbuf chain it takes. Call it before kbridge starts:
 * kbridge reads it once, when it opens the port.
 */
static inline void
kbridge_port_set_offloads(struct kbridge_port *p, uint32_t offloads,
			  uint16_t max_segs)
{
	p->ctl->app_max_segs = max_segs;
	__atomic_store_n(&p->ctl->app_offloads, offloads, __ATOMIC_RELEASE);
}

/*
 * Set how many mbufs kbridge_from_kernel() keeps on each of the port's
 * fresh rings for kbridge to fill (version 7; KBRIDGE_FRESH_TARGET by
 * default, at most the ring size less one). They are taken from the port's
 * pool: it must spare that many per queue, beside what the app's own
 * queues and the port's rings hold. Any time; it applies at the next
 * refill.
 */
static inline void
kbridge_port_set_fresh_target(struct kbridge_port *p, unsigned int target)
{
	unsigned int cap = rte_ring_get_capacity(p->fresh[0]);

	__atomic_store_n(&p->ctl->fresh_target, target < cap ? target : cap, __ATOMIC_RELAXED);
}

/* Take up to `n` packets the kernel sent, from queue `q`. The caller owns
 * them. It also frees what kbridge is done with and tops the fresh ring up
 * (version 7), so an app that calls it keeps kbridge supplied. */
static inline uint16_t
kbridge_from_kernel(struct kbridge_port *p, uint16_t q, struct rte_mbuf **pkts,
		    uint16_t n)
{
	unsigned int got;

	kbridge_reap_(p, q, &p->ctl->qm[q].spent_freed_rx);
	kbridge_refill_(p, q);
	got = rte_ring_dequeue_burst(p->from_kernel[q], (void **)pkts, n, NULL);
	p->ctl->q[q].from_kernel_pkts += got;
	return (uint16_t)got;
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_RING_H */

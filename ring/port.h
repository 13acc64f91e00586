/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef KB_PORT_H
#define KB_PORT_H

#include <rte_mempool.h>
#include <rte_ring.h>

#include "kbridge.h"
#include "burst.h"

/* The least an mbuf of the app's pool must hold after its headroom: kbridge
 * copies kernel-to-app frames into the pool, and a TSO chain's headers
 * (Ethernet, VLAN, IPv6, TCP with options: 118 bytes) sit in its first mbuf. */
#define KB_MIN_DATA_ROOM 128

/* What a secondary process finds of a port the app created. */
struct kb_port_info {
	struct kbridge_ctl *ctl;
	struct rte_mempool *pool;
	struct rte_ring *to_kernel[KBRIDGE_MAX_QUEUES];
	struct rte_ring *from_kernel[KBRIDGE_MAX_QUEUES];
	/* Version 7: the fresh and spent rings (NULL before): kbridge takes
	 * the app's mbufs off the one and puts them on the other, and never
	 * calls the pool's handlers. */
	struct rte_ring *fresh[KBRIDGE_MAX_QUEUES];
	struct rte_ring *spent[KBRIDGE_MAX_QUEUES];
	uint32_t version;      /* of the app's kbridge.h */
	uint32_t app_offloads; /* KBRIDGE_APP_*; 0 for a version-1 app */
	uint16_t app_max_segs;
	/* Version 3: the app's rte_version() and RTE_VERSION; "" and 0 before. */
	char dpdk_version[32];
	uint32_t dpdk_version_num;
	/* Set by kb_port_open's validation. */
	uint64_t tsc_hz;       /* ctl->tsc_hz when sane, else 0: residence off */
	int32_t tsc_offset;    /* ctl->tsc_offset when sane, else -1 */
	uint16_t nb_queues;    /* ctl->nb_queues, checked */
	uint16_t pad;
	char why[320];         /* what is wrong, when kb_port_open fails */
	char warn[192];        /* what was turned off, when it succeeds */
	/* The pool's mempool handler: the app's name for it (version 7) and
	 * kbridge's, by its index in kbridge's table (before version 7). */
	char app_ops[32];
	char my_ops[32];
};

/* Ownership (kbridge_ctl.owner, version-2 apps). */
/* This process's owner value: pid | low 32 bits of its start time << 32. */
uint64_t kb_self_owner(void);
/* Start time (clock ticks since boot) of pid, or 0 when it does not run. */
uint64_t kb_pid_start(int pid);
/* Whether the owner named by v runs: its pid exists, started at the
 * recorded time and is no zombie (kbridge.h's kbridge_owner_alive_). */
int kb_owner_alive(uint64_t v);
/* What became of it: enum kbridge_owner_state. */
int kb_owner_state(uint64_t v);
/* Claims the port for me. 0: claimed (*prev is the dead owner taken over,
 * or 0); -EBUSY: *prev runs and owns it; -ESHUTDOWN: the app is freeing the
 * port; -ENOTSUP: a version-1 block, which has no owner field. */
int kb_port_claim(struct kbridge_ctl *c, uint32_t version, uint64_t me, uint64_t *prev);
/* Clears owner if it is still me. */
void kb_port_release(struct kbridge_ctl *c, uint64_t me);
uint32_t kb_port_closing(const struct kbridge_ctl *c);
/* The app's link report (KBRIDGE_LINK_*); 0 before version 4 or before
 * the app reported. */
uint64_t kb_port_link(const struct kbridge_ctl *c, uint32_t version);
/* Version 5. The app port's MAC into mac: 1, or 0 when it recorded none. */
int kb_port_app_mac(const struct kbridge_ctl *c, uint32_t version, uint8_t mac[6]);
/* The KBRIDGE_REQ_BIT()s the app serves (0: none) and its largest MTU. */
uint32_t kb_port_requests(const struct kbridge_ctl *c, uint32_t version, uint32_t *max_mtu);
/* Posts a request (kbridge.h's mailbox; one writer: kbridge) and returns
 * its seq, which the app's answer carries. */
uint32_t kb_port_post(struct kbridge_ctl *c, uint32_t type, uint32_t value, const uint8_t mac[6]);
/* 1 and *result once the app answered request seq, else 0. */
int kb_port_answer(const struct kbridge_ctl *c, uint32_t seq, int32_t *result);
/* At takeover (version 5): returns the seq of an unanswered request an
 * earlier kbridge posted as an undo (kbridge_ctl.undo), left for the app,
 * or withdraws any other unanswered request and returns 0. */
uint32_t kb_port_takeover_request(struct kbridge_ctl *c, uint32_t version);
/* Posts an undo: kb_port_post, and its seq recorded in kbridge_ctl.undo. */
uint32_t kb_port_post_undo(struct kbridge_ctl *c, uint32_t type, uint32_t value, const uint8_t mac[6]);
/* kbridge_ctl.accepted (version 5; 0 before): what the port accepted. */
uint64_t kb_port_accepted(const struct kbridge_ctl *c, uint32_t version);
void kb_port_set_accepted(struct kbridge_ctl *c, uint32_t version, uint64_t v);
/* Finds or creates the held-mbuf record of port name (kbridge.h's struct
 * kbridge_held). *created is set when it did not exist. NULL: no memory. */
struct kbridge_held *kb_held_open(const char *name, int *created);
/* Frees what rec names and clears it; returns the number of mbufs. */
unsigned int kb_held_free(struct kbridge_held_q *rec);
/* Version 7: puts what rec names on the spent ring, all of it once the
 * ring has the room, and clears rec; returns how many, 0 when it stays. */
unsigned int kb_held_give(struct kbridge_held_q *rec, struct rte_ring *spent);
/* Version 7: the first item of the app's layout (kbridge.h's struct
 * kbridge_layout) that differs from kbridge's, said in why; -1 if none. */
int kb_layout_check(const struct kbridge_layout *l, char *why, size_t len);
/* kbridge's own layout, as kbridge_port_create() records the app's. */
void kb_layout_mine(struct kbridge_layout *l);
/* The name of item i of struct kbridge_layout (the expression it holds). */
const char *kb_layout_name(unsigned int i);

/* This kbridge's DPDK: RTE_VERSION of the headers it was built with. */
uint32_t kb_rte_version(void);
int kb_port_open(const char *name, struct kb_port_info *info);
/* Names the ports the app created and publishes (their magic set), not
 * those it is freeing (closing), into names[0..max): how many there are,
 * which may be more than max. */
int kb_port_names(char (*names)[KBRIDGE_NAME_MAX + 1], int max);
/* Says whether kbridge serves the port (version 7): KBRIDGE_SERVED_*, and
 * why not for KBRIDGE_SERVED_REFUSED. */
void kb_port_set_served(struct kbridge_ctl *c, uint32_t version, uint32_t state, const char *why);
/* Refuses port name, not opened, with why: when its block is version 7,
 * it is not being freed and no live kbridge owns it. 0, or -errno. */
int kb_port_refuse(const char *name, const char *why);
/* Sends the app the doorbell eventfd fd (KBRIDGE_MP_DOORBELL). 0, or -errno. */
int kb_send_doorbell(int fd);
int kb_send_eventfd(const char *name, uint16_t queue, int fd);
unsigned int kb_pool_in_use(const struct rte_mempool *mp);
unsigned int kb_pool_size(const struct rte_mempool *mp);
/* Sets the queue's need-wakeup flag, issues a full fence and returns how
 * many packets wait in r: the worker's half of the handshake, in one call. */
unsigned int kb_prepare_to_park(struct kbridge_queue_ctl *qc, const struct rte_ring *r);
void kb_unpark(struct kbridge_queue_ctl *qc);
unsigned int kb_ring_count(const struct rte_ring *r);

/* The burst core's ops over the app's rings: a buffer's ctx is its
 * struct rte_ring (to_kernel for an out buffer, from_kernel for an in).
 * What a ring has no room for stays the burst core's. */
extern const struct kb_burst_ops kb_ring_burst_ops;

/* port_reconcile.c: the ops' dequeue and enqueue with a held record, which keep
 * its pend word around the ring operation, and the takeover. */
uint16_t kb_ring_dequeue_held(void *ctx, struct kb_held *rec, struct rte_mbuf **m, uint16_t n);
uint16_t kb_ring_enqueue_held(void *ctx, struct kb_held *rec, struct rte_mbuf **m, uint16_t n);

/* What kb_ring_reconcile found of one queue's rings, added to. */
struct kb_reconcile {
	uint32_t to_kernel_reclaimed;   /* claimed by a dead consumer, not released: dequeued again */
	uint32_t to_kernel_freed;       /* released by it, never on record: freed */
	uint32_t from_kernel_discarded; /* slots a dead producer had reserved, not published */
	uint32_t from_kernel_freed;     /* mbufs of its enqueue it had not published: freed */
	uint32_t from_kernel_published; /* mbufs of its enqueue it had published: the app's */
	uint32_t inconsistent;          /* pend words that named more than possible: left */
	/* Version 7 (what is "freed" goes to the spent ring, for the app). */
	uint32_t fresh_reclaimed; /* fresh entries claimed, not released: taken again */
	uint32_t fresh_freed;     /* taken off fresh, never on record */
	uint32_t spent_discarded; /* spent slots reserved, not published */
	uint32_t spent_freed;     /* mbufs of a spent put not published: put again */
	uint32_t spent_published; /* mbufs of it published: the app's */
};
/* Puts kbridge's side of every ring of a queue back on its tail and frees
 * what a killed kbridge's ring operation had taken off the record (out, in:
 * the queue's held records); for version 7 (fresh and spent set) gives it
 * to the app on the spent ring instead, or leaves it on the record. Only
 * before any worker runs. -ENOTSUP: a ring that is not single on kbridge's
 * side. */
int kb_ring_reconcile(struct rte_ring *tk, struct rte_ring *fk, struct rte_ring *fresh,
		      struct rte_ring *spent, struct kbridge_held_q *out, struct kbridge_held_q *in,
		      struct kb_reconcile *res);

/* The test hook (ring/testhook.go, built with the kbridge_testhook tag):
 * park the worker once inside a ring operation. */
#define KB_RING_PARK_TO_KERNEL 0x1
#define KB_RING_PARK_FROM_KERNEL 0x2
#define KB_RING_PARK_FRESH 0x4
#define KB_RING_PARK_SPENT 0x8
#ifdef KB_RING_TESTHOOK
extern volatile int kb_ring_test_park;
#endif

#endif

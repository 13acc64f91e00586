/* SPDX-License-Identifier: BSD-3-Clause
 * A DPDK primary for tests: it plays the app's side of kbridge.h. */
#ifndef KBT_PRIMARY_H
#define KBT_PRIMARY_H

#include <stdint.h>

#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

/* Go's internal linker does not merge the header's weak registry across
 * translation units, so the Go side calls kbridge.h only through this file. */
struct kbridge_port;

int kbt_init(int argc, char **argv);
struct rte_mempool *kbt_pool(const char *name, unsigned int n);
struct rte_mempool *kbt_pool_room(const char *name, unsigned int n, uint16_t data_room);
struct rte_mempool *kbt_plain_pool(const char *name, unsigned int n);
struct kbridge_port *kbt_port(const char *name, uint16_t queues, unsigned int ring_size,
			      struct rte_mempool *mp);
/* raw: enqueued on to_kernel without kbridge_to_kernel() (which frees what
 * the spent ring holds), as an app that never frees it. */
int kbt_inject(struct kbridge_port *p, uint16_t q, struct rte_mempool *mp, const uint8_t *buf,
	       const uint32_t *lens, uint16_t n, uint16_t seg_size, int32_t len_delta, int raw);
int kbt_collect(struct kbridge_port *p, uint16_t q, uint8_t *out, uint32_t cap, uint32_t *lens,
		uint16_t max);
unsigned int kbt_in_use(const struct rte_mempool *mp);
unsigned int kbt_hold(struct rte_mempool *mp, struct rte_mbuf **held, unsigned int max);
void kbt_preload(const uint8_t *f, uint32_t len);
int kbt_inject_preloaded(struct kbridge_port *p, uint16_t q, struct rte_mempool *mp, uint16_t n);
int kbt_drain(struct kbridge_port *p, uint16_t q);
int kbt_port_free(struct kbridge_port *p);
void kbt_set_owner(struct kbridge_port *p, uint64_t v);
void kbt_set_link(struct kbridge_port *p, int up, uint32_t speed, int full);
int kbt_port_owner_pid(struct kbridge_port *p);
int kbt_memzone_exists(const char *name);
int kbt_counters(struct kbridge_port *p, uint16_t q, uint64_t out[8]);
/* Times rounds bursts of n mbufs holding frame through kbridge_to_kernel()
 * and through a bare rte_ring_enqueue_burst(), each burst dequeued again
 * (not freed), with the ring first filled to all but room slots; ns of each
 * in out[0] and out[1]. No worker may run. */
int kbt_to_kernel_cost(struct kbridge_port *p, uint16_t q, struct rte_mempool *mp,
		       const uint8_t *frame, uint32_t len, uint16_t n, uint32_t rounds,
		       uint32_t room, uint64_t out[2]);
void kbt_release(struct rte_mbuf **held, unsigned int n);
/* What an app sees of one mbuf from kbridge_from_kernel(). */
struct kbt_meta {
	uint64_t ol_flags;
	uint32_t pkt_len;
	uint16_t nb_segs, l2, l3, l4, tso_segsz;
};
int kbt_collect_one(struct kbridge_port *p, uint16_t q, uint8_t *out, uint32_t cap,
		    struct kbt_meta *meta);
void kbt_declare_tso(struct kbridge_port *p, uint16_t max_segs);
void kbt_audit(struct rte_mempool *mp);
uint64_t kbt_owner(struct kbridge_port *p);
/* kbridge_port_wait_served() with timeout_ms: 0, -ECONNREFUSED, -ETIMEDOUT, why in why. */
int kbt_wait_served(struct kbridge_port *p, unsigned int timeout_ms, char *why, size_t len);
/* The rings of a queue, for kbt_ring_count and kbt_ring_state. */
#define KBT_FROM_KERNEL 0
#define KBT_TO_KERNEL 1
#define KBT_FRESH 2
#define KBT_SPENT 3
unsigned int kbt_ring_count(struct kbridge_port *p, uint16_t q, int which);
void kbt_ring_state(struct kbridge_port *p, uint16_t q, int which, uint32_t out[4]);
void kbt_set_ctl(struct kbridge_port *p, int64_t version, int64_t tsc_hz, int64_t nb_queues);
static inline int rte_errno_get(void) { return rte_errno; }
int kbt_app_eventfd(struct kbridge_port *p, uint16_t q);
void kbt_clear_have_eventfd(struct kbridge_port *p, uint16_t q);

/* kbridge.h version 7: the fresh and spent rings (primary.c says which
 * may run beside a kbridge). */
unsigned int kbt_port_parked(struct kbridge_port *p);
unsigned int kbt_fresh_take(struct kbridge_port *p, uint16_t q, struct rte_mbuf **held, unsigned int max);
unsigned int kbt_spent_fill(struct kbridge_port *p, uint16_t q, struct rte_mempool *mp, unsigned int leave);
unsigned int kbt_reap(struct kbridge_port *p, uint16_t q);
void kbt_mbuf_counters(struct kbridge_port *p, uint16_t q, uint64_t out[5]);
void kbt_set_fresh_target(struct kbridge_port *p, unsigned int target);
void kbt_set_layout(struct kbridge_port *p, unsigned int i, uint32_t v);
uint32_t kbt_layout(struct kbridge_port *p, unsigned int i);
int kbt_layout_next(void); /* the item of offsetof(struct rte_mbuf, next) */
int kbt_ops_index(const char *name);
int kbt_set_ops_index(struct rte_mempool *mp, int idx);
struct rte_mempool *kbt_foreign_pool(const char *name, unsigned int n);

/* The request mailbox (kbridge.h version 5) on a control block of its own,
 * in plain memory: both sides of the protocol, no EAL needed. */
struct kbridge_port *kbt_mailbox_new(void);
void kbt_mailbox_free(struct kbridge_port *p);
void kbt_mailbox_serve(struct kbridge_port *p, uint32_t types, uint32_t max_mtu);
uint32_t kbt_mailbox_post(struct kbridge_port *p, uint32_t type, uint32_t value, const uint8_t *mac);
int kbt_mailbox_answer(struct kbridge_port *p, uint32_t seq, int32_t *result);
/* kbridge_port_poll_request: 1 and the request's fields, or 0. */
int kbt_mailbox_poll(struct kbridge_port *p, uint32_t *seq, uint32_t *type, uint32_t *value, uint8_t *mac);
void kbt_mailbox_reply(struct kbridge_port *p, uint32_t seq, int result);
/* Leaves req_seq odd, as a kbridge killed while posting would. */
void kbt_mailbox_tear(struct kbridge_port *p);
/* kbridge_req_withdraw_: what a kbridge taking the port over does. */
void kbt_mailbox_withdraw(struct kbridge_port *p);

#endif

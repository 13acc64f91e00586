/* SPDX-License-Identifier: BSD-3-Clause
 *
 * reconcile.c: the ring operations of ring mode's workers as a takeover can
 * read them back, and the takeover's reconciliation of each ring's kbridge
 * side with what a killed kbridge left (docs/ARCHITECTURE.md, "A kbridge
 * killed inside a ring operation").
 *
 * rte_ring's single-producer enqueue stores prod.head, copies the pointers
 * into the slots, then stores prod.tail; the single-consumer dequeue stores
 * cons.head, copies the pointers out, then stores cons.tail. A process
 * killed between the two stores leaves head != tail on its own side of the
 * ring, and what it had taken in no record. The app's side never reads the
 * other side's head (its producer reads cons.tail, its consumer prod.tail),
 * so kbridge may put its own head back while the app runs.
 *
 * Each operation is bracketed by the held record's pend word (kbridge.h's
 * struct kbridge_held_q): set before, cleared after. It holds the low 20
 * bits of the ring position the operation starts from (the tail of
 * kbridge's side, which only kbridge moves) and the most mbufs it may move;
 * the distance the tail has gone since says what the operation finished.
 * The steps are ordered for a process that stops between any two
 * instructions (a compiler fence between them: a kill is asynchronous to
 * this thread as a signal is, and every store before it is seen once the
 * process is gone):
 *
 *  from_kernel (kbridge produces): the record names the mbufs allocated
 *  (n > 0); pend is set; n is cleared; the enqueue (head, copy, tail); pend
 *  is cleared; what did not fit is freed.
 *  to_kernel (kbridge consumes): n is 0 (the previous burst was freed);
 *  pend is set; the dequeue copies straight into the record's m[] (head,
 *  copy, tail); n is set to what it took; pend is cleared.
 *
 * A takeover, before any worker runs, reads n first: n > 0 means the
 * record itself speaks (FreeHeld frees m[0..n)) and pend is dropped. With
 * n == 0 and pend set, the tail's distance from pend's position is what the
 * operation finished: from_kernel, m[0..published) are the app's and
 * m[published..max) were never published and are freed; to_kernel,
 * m[0..claimed) were released from the ring but never on record and are
 * freed. Last, each head is put back on its tail: from_kernel's unpublished
 * slots are discarded (the next enqueue overwrites them before it publishes
 * anything), to_kernel's claimed-but-not-released entries are dequeued
 * again (the producer cannot have reused those slots: it counts free room
 * from cons.tail). pend is cleared before anything it names is freed: a
 * takeover killed in turn leaks rather than frees twice.
 */
#include <string.h>

#include <rte_mbuf.h>
#include <rte_ring.h>

#include "port.h"

#define KB_PEND_SET 0x80000000u
#define KB_PEND_MAX_SHIFT 20
#define KB_PEND_POS_MASK 0xfffffu /* positions modulo 2^20 */

_Static_assert(KBRIDGE_HELD_MAX < (1u << (31 - KB_PEND_MAX_SHIFT)),
	       "pend's count field holds a burst");

/* The order of the steps is what a kill sees; the CPU's own reordering is
 * not: a dead process's stores are all visible once it is gone. */
#define kb_kill_fence() __atomic_signal_fence(__ATOMIC_SEQ_CST)

static inline uint32_t
kb_pend(uint32_t pos, uint16_t max)
{
	return KB_PEND_SET | (uint32_t)max << KB_PEND_MAX_SHIFT | (pos & KB_PEND_POS_MASK);
}

static inline void
kb_pend_store(struct kb_held *rec, uint32_t v)
{
	if (rec->pend != NULL)
		__atomic_store_n(rec->pend, v, __ATOMIC_RELAXED);
}

/* ---- The test hook (built with the kbridge_testhook tag only) ---- */

#ifdef KB_RING_TESTHOOK
#include <stdio.h>
#include <time.h>

volatile int kb_ring_test_park;

/* Parks the worker once for up to 60 s, after a line on stderr says so. */
static void
kb_ring_park(int dir, const char *where, unsigned int n)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 10 * 1000 * 1000 };
	int i;

	__atomic_fetch_and(&kb_ring_test_park, ~dir, __ATOMIC_SEQ_CST);
	fprintf(stderr, "kbridge: test park: the worker parks %s (%u mbufs)\n", where, n);
	fflush(stderr);
	for (i = 0; i < 6000; i++)
		nanosleep(&ts, NULL);
}

/* rte_ring's single-producer enqueue in its three steps, parked between
 * the head move and the copy. */
static unsigned int
kb_ring_enqueue_op(struct rte_ring *r, struct rte_mbuf **m, unsigned int n)
{
	uint32_t head, next, room;

	if (likely(!(kb_ring_test_park & KB_RING_PARK_FROM_KERNEL)))
		return rte_ring_enqueue_burst(r, (void **)m, n, NULL);
	n = __rte_ring_move_prod_head(r, 1, n, RTE_RING_QUEUE_VARIABLE, &head, &next, &room);
	if (n == 0)
		return 0;
	kb_ring_park(KB_RING_PARK_FROM_KERNEL, "between from_kernel's head move and its copy", n);
	__rte_ring_enqueue_elems(r, head, m, sizeof(void *), n);
	__rte_ring_update_tail(&r->prod, head, next, 1, 1);
	return n;
}

/* The single-consumer dequeue, parked after the copy, before the tail. */
static unsigned int
kb_ring_dequeue_op(struct rte_ring *r, struct rte_mbuf **m, unsigned int n)
{
	uint32_t head, next, avail;

	if (likely(!(kb_ring_test_park & KB_RING_PARK_TO_KERNEL)))
		return rte_ring_dequeue_burst(r, (void **)m, n, NULL);
	n = __rte_ring_move_cons_head(r, 1, n, RTE_RING_QUEUE_VARIABLE, &head, &next, &avail);
	if (n == 0)
		return 0;
	__rte_ring_dequeue_elems(r, head, m, sizeof(void *), n);
	kb_ring_park(KB_RING_PARK_TO_KERNEL, "between to_kernel's head move and its tail", n);
	__rte_ring_update_tail(&r->cons, head, next, 1, 0);
	return n;
}
#else
#define kb_ring_enqueue_op(r, m, n) rte_ring_enqueue_burst((r), (void **)(m), (n), NULL)
#define kb_ring_dequeue_op(r, m, n) rte_ring_dequeue_burst((r), (void **)(m), (n), NULL)
#endif

/* ---- The workers' side ---- */

uint16_t
kb_ring_dequeue_held(void *ctx, struct kb_held *rec, struct rte_mbuf **m, uint16_t n)
{
	struct rte_ring *r = ctx;
	unsigned int got;

	kb_pend_store(rec, kb_pend(__atomic_load_n(&r->cons.tail, __ATOMIC_RELAXED), n));
	kb_kill_fence();
	got = kb_ring_dequeue_op(r, rec->m, n);
	kb_kill_fence();
	if (got > 0) {
		memcpy(m, rec->m, got * sizeof(*m));
		kb_held_set(rec, (uint16_t)got);
	}
	kb_kill_fence();
	kb_pend_store(rec, 0);
	return (uint16_t)got;
}

uint16_t
kb_ring_enqueue_held(void *ctx, struct kb_held *rec, struct rte_mbuf **m, uint16_t n)
{
	struct rte_ring *r = ctx;
	unsigned int sent;

	kb_pend_store(rec, kb_pend(__atomic_load_n(&r->prod.tail, __ATOMIC_RELAXED), n));
	kb_kill_fence();
	kb_held_clear(rec);
	kb_kill_fence();
	sent = kb_ring_enqueue_op(r, m, n);
	kb_kill_fence();
	kb_pend_store(rec, 0);
	kb_kill_fence();
	/* What the ring has no room for is freed here: the app never saw it. */
	if (sent < n)
		rte_pktmbuf_free_bulk(m + sent, n - sent);
	return (uint16_t)sent;
}

/* ---- The takeover ---- */

/* What pend says the operation finished: the tail's distance from its
 * position, or -1 when pend is not set or names more than it could move. */
static int
kb_pend_done(uint32_t pend, uint32_t tail, uint32_t *max)
{
	uint32_t done = (tail - pend) & KB_PEND_POS_MASK;

	*max = (pend & ~KB_PEND_SET) >> KB_PEND_MAX_SHIFT;
	if (!(pend & KB_PEND_SET) || *max > KBRIDGE_HELD_MAX || done > *max)
		return -1;
	return (int)done;
}

/* Frees rec->m[from..to) after clearing pend (a takeover killed meanwhile
 * leaks them rather than freeing them twice). */
static void
kb_pend_free(struct kbridge_held_q *rec, uint32_t from, uint32_t to)
{
	struct rte_mbuf *m[KBRIDGE_HELD_MAX];

	memcpy(m, &rec->m[from], (to - from) * sizeof(m[0]));
	__atomic_store_n(&rec->pend, 0, __ATOMIC_SEQ_CST);
	if (to > from)
		rte_pktmbuf_free_bulk(m, to - from);
}

int
kb_ring_reconcile(struct rte_ring *tk, struct rte_ring *fk, struct kbridge_held_q *out,
		  struct kbridge_held_q *in, struct kb_reconcile *res)
{
	uint32_t head, tail, pend, max;
	int done;

	if (rte_ring_get_cons_sync_type(tk) != RTE_RING_SYNC_ST ||
	    rte_ring_get_prod_sync_type(fk) != RTE_RING_SYNC_ST)
		return -ENOTSUP;

	/* to_kernel, kbridge's consumer side. */
	pend = __atomic_load_n(&out->pend, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&out->n, __ATOMIC_SEQ_CST) > 0) {
		__atomic_store_n(&out->pend, 0, __ATOMIC_SEQ_CST); /* FreeHeld's */
	} else if (pend != 0) {
		tail = __atomic_load_n(&tk->cons.tail, __ATOMIC_ACQUIRE);
		done = kb_pend_done(pend, tail, &max);
		if (done < 0) {
			res->inconsistent++;
			__atomic_store_n(&out->pend, 0, __ATOMIC_SEQ_CST);
		} else {
			res->to_kernel_freed += (uint32_t)done;
			kb_pend_free(out, 0, (uint32_t)done);
		}
	}
	head = __atomic_load_n(&tk->cons.head, __ATOMIC_RELAXED);
	tail = __atomic_load_n(&tk->cons.tail, __ATOMIC_ACQUIRE);
	if (head != tail) {
		res->to_kernel_reclaimed += head - tail;
		__atomic_store_n(&tk->cons.head, tail, __ATOMIC_RELAXED);
	}

	/* from_kernel, kbridge's producer side. */
	pend = __atomic_load_n(&in->pend, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&in->n, __ATOMIC_SEQ_CST) > 0) {
		__atomic_store_n(&in->pend, 0, __ATOMIC_SEQ_CST); /* FreeHeld's */
	} else if (pend != 0) {
		tail = __atomic_load_n(&fk->prod.tail, __ATOMIC_RELAXED);
		done = kb_pend_done(pend, tail, &max);
		if (done < 0) {
			res->inconsistent++;
			__atomic_store_n(&in->pend, 0, __ATOMIC_SEQ_CST);
		} else {
			res->from_kernel_published += (uint32_t)done;
			res->from_kernel_freed += max - (uint32_t)done;
			kb_pend_free(in, (uint32_t)done, max);
		}
	}
	head = __atomic_load_n(&fk->prod.head, __ATOMIC_RELAXED);
	tail = __atomic_load_n(&fk->prod.tail, __ATOMIC_RELAXED);
	if (head != tail) {
		res->from_kernel_discarded += head - tail;
		__atomic_store_n(&fk->prod.head, tail, __ATOMIC_RELAXED);
	}
	/* The workers start after this, on other threads. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * port_reconcile.c: the ring operations of ring mode's workers as a takeover can
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
 *  is cleared; what did not fit is given back.
 *  to_kernel (kbridge consumes): n is 0 (the previous burst was freed);
 *  pend is set; the dequeue copies straight into the record's m[] (head,
 *  copy, tail); n is set to what it took; pend is cleared.
 *
 * Version 7 adds a ring to each record: the in record's mbufs are taken off
 * the fresh ring (kbridge consumes: as to_kernel) and the out record's are
 * put on the spent ring (kbridge produces: as from_kernel, all of them
 * once it has the room, so nothing is left over). pend says which of the
 * record's two rings its operation is on (KB_PEND_OTHER). A version-6 app
 * has no other ring, and pend words an earlier kbridge wrote there are read
 * without that bit, as the positions they were: a distance modulo 2^19 is
 * the one modulo 2^20 for anything a burst moves.
 *
 * A takeover, before any worker runs, reads n first: n > 0 means the
 * record itself speaks (FreeHeld frees m[0..n)) and pend is dropped. With
 * n == 0 and pend set, the tail's distance from pend's position is what the
 * operation finished: from_kernel (spent), m[0..published) are the app's
 * and m[published..max) were never published and are freed; to_kernel
 * (fresh), m[0..claimed) were released from the ring but never on record
 * and are freed. Version 7 never frees an app's mbuf: they go back on the
 * record and from there onto the spent ring, or stay on the record for the
 * workers to put there, or for the app's kbridge_port_free(). Last, each
 * head is put back on its tail: from_kernel's unpublished
 * slots are discarded (the next enqueue overwrites them before it publishes
 * anything), to_kernel's claimed-but-not-released entries are dequeued
 * again (the producer cannot have reused those slots: it counts free room
 * from cons.tail); the spent and fresh rings' likewise. pend is cleared
 * before anything it names is freed or recorded again: a takeover killed
 * in turn leaks rather than frees twice.
 */
#include <string.h>

#include <rte_mbuf.h>
#include <rte_ring.h>

#include "port.h"

#define KB_PEND_SET 0x80000000u
#define KB_PEND_MAX_SHIFT 20
#define KB_PEND_OTHER 0x80000u    /* bit 19: the record's other ring (version 7) */
#define KB_PEND_POS_MASK 0x7ffffu /* positions modulo 2^19 */

_Static_assert(KBRIDGE_HELD_MAX < (1u << (31 - KB_PEND_MAX_SHIFT)),
	       "pend's count field holds a burst");
_Static_assert(KBRIDGE_HELD_MAX < KB_PEND_POS_MASK, "a burst's distance fits pend's position");

/* The order of the steps is what a kill sees; the CPU's own reordering is
 * not: a dead process's stores are all visible once it is gone. */
#define kb_kill_fence() __atomic_signal_fence(__ATOMIC_SEQ_CST)

static inline uint32_t
kb_pend(uint32_t pos, uint16_t max, int other)
{
	return KB_PEND_SET | (uint32_t)max << KB_PEND_MAX_SHIFT | (other ? KB_PEND_OTHER : 0) |
	       (pos & KB_PEND_POS_MASK);
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
 * the head move and the copy when park (a KB_RING_PARK_* bit) is armed. */
static unsigned int
kb_ring_enqueue_op(struct rte_ring *r, struct rte_mbuf **m, unsigned int n, int park,
		   const char *where)
{
	uint32_t head, next, room;

	if (likely(!(kb_ring_test_park & park)))
		return rte_ring_enqueue_burst(r, (void **)m, n, NULL);
	n = __rte_ring_move_prod_head(r, 1, n, RTE_RING_QUEUE_VARIABLE, &head, &next, &room);
	if (n == 0)
		return 0;
	kb_ring_park(park, where, n);
	__rte_ring_enqueue_elems(r, head, m, sizeof(void *), n);
	__rte_ring_update_tail(&r->prod, head, next, 1, 1);
	return n;
}

/* The single-consumer dequeue, parked after the copy, before the tail. */
static unsigned int
kb_ring_dequeue_op(struct rte_ring *r, struct rte_mbuf **m, unsigned int n, int park,
		   const char *where)
{
	uint32_t head, next, avail;

	if (likely(!(kb_ring_test_park & park)))
		return rte_ring_dequeue_burst(r, (void **)m, n, NULL);
	n = __rte_ring_move_cons_head(r, 1, n, RTE_RING_QUEUE_VARIABLE, &head, &next, &avail);
	if (n == 0)
		return 0;
	__rte_ring_dequeue_elems(r, head, m, sizeof(void *), n);
	kb_ring_park(park, where, n);
	__rte_ring_update_tail(&r->cons, head, next, 1, 0);
	return n;
}
#else
#define kb_ring_enqueue_op(r, m, n, park, where) \
	((void)(park), (void)(where), rte_ring_enqueue_burst((r), (void **)(m), (n), NULL))
#define kb_ring_dequeue_op(r, m, n, park, where) \
	((void)(park), (void)(where), rte_ring_dequeue_burst((r), (void **)(m), (n), NULL))
#endif

/* ---- The workers' side ---- */

/* A dequeue from kbridge's consumer side of r (to_kernel, or other: fresh)
 * straight into the record, bracketed by pend. */
static inline uint16_t
kb_take_held(struct rte_ring *r, int other, int park, const char *where, struct kb_held *rec,
	     struct rte_mbuf **m, uint16_t n)
{
	unsigned int got;

	kb_pend_store(rec, kb_pend(__atomic_load_n(&r->cons.tail, __ATOMIC_RELAXED), n, other));
	kb_kill_fence();
	got = kb_ring_dequeue_op(r, rec->m, n, park, where);
	kb_kill_fence();
	if (got > 0) {
		memcpy(m, rec->m, got * sizeof(*m));
		kb_held_set(rec, (uint16_t)got);
	}
	kb_kill_fence();
	kb_pend_store(rec, 0);
	return (uint16_t)got;
}

/* An enqueue on kbridge's producer side of r (from_kernel, or other:
 * spent) of what the record names, m[0..n) in that order, bracketed by
 * pend; the record is cleared before the enqueue publishes anything. */
static inline uint16_t
kb_put_held(struct rte_ring *r, int other, int park, const char *where, struct kb_held *rec,
	    struct rte_mbuf **m, uint16_t n)
{
	unsigned int sent;

	kb_pend_store(rec, kb_pend(__atomic_load_n(&r->prod.tail, __ATOMIC_RELAXED), n, other));
	kb_kill_fence();
	kb_held_clear(rec);
	kb_kill_fence();
	sent = kb_ring_enqueue_op(r, m, n, park, where);
	kb_kill_fence();
	kb_pend_store(rec, 0);
	return (uint16_t)sent;
}

uint16_t
kb_ring_dequeue_held(void *ctx, struct kb_held *rec, struct rte_mbuf **m, uint16_t n)
{
	return kb_take_held(ctx, 0, KB_RING_PARK_TO_KERNEL,
			    "between to_kernel's head move and its tail", rec, m, n);
}

/* What the ring has no room for, m[sent..n), stays the caller's. */
uint16_t
kb_ring_enqueue_held(void *ctx, struct kb_held *rec, struct rte_mbuf **m, uint16_t n)
{
	return kb_put_held(ctx, 0, KB_RING_PARK_FROM_KERNEL,
			   "between from_kernel's head move and its copy", rec, m, n);
}

uint16_t
kb_fresh_take_held(struct rte_ring *fresh, struct kb_held *rec, struct rte_mbuf **m, uint16_t n)
{
	return kb_take_held(fresh, 1, KB_RING_PARK_FRESH, "between fresh's head move and its tail",
			    rec, m, n);
}

/* All or none: with the room checked first, the one producer's enqueue
 * takes every one. */
int
kb_spent_put_held(struct rte_ring *spent, struct kb_held *rec)
{
	uint32_t n = __atomic_load_n(rec->n, __ATOMIC_RELAXED);

	if (n == 0)
		return 1;
	if (rte_ring_free_count(spent) < n)
		return 0;
	kb_put_held(spent, 1, KB_RING_PARK_SPENT, "between spent's head move and its copy", rec,
		    rec->m, (uint16_t)n);
	return 1;
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

/* Takes rec->m[from..to) off the record's pend, which is cleared first (a
 * takeover killed meanwhile leaks them rather than freeing them twice):
 * freed, or, for version 7 (keep), recorded again as m[0..to-from) for the
 * spent ring. Returns how many. */
static uint32_t
kb_pend_recover(struct kbridge_held_q *rec, uint32_t from, uint32_t to, int keep)
{
	struct rte_mbuf *m[KBRIDGE_HELD_MAX];
	uint32_t k = to - from;

	memcpy(m, &rec->m[from], k * sizeof(m[0]));
	__atomic_store_n(&rec->pend, 0, __ATOMIC_SEQ_CST);
	if (k == 0)
		return 0;
	if (!keep) {
		rte_pktmbuf_free_bulk(m, k);
		return k;
	}
	memcpy(rec->m, m, k * sizeof(m[0]));
	__atomic_store_n(&rec->n, k, __ATOMIC_SEQ_CST);
	return k;
}

/* One record's operation a killed kbridge left under way: on kbridge's
 * consumer side of cons (to_kernel, fresh) or its producer side of prod
 * (from_kernel, spent), whichever pend names (prod: NULL for a record whose
 * other ring is the consumer's). *released counts mbufs a dequeue released
 * and never recorded, *published and *unpublished those of an enqueue.
 * Returns whether it recorded any again (version 7: keep). */
static int
kb_reconcile_pend(struct kbridge_held_q *rec, struct rte_ring *cons, struct rte_ring *prod,
		  int keep, uint32_t *released, uint32_t *published, uint32_t *unpublished,
		  uint32_t *inconsistent)
{
	uint32_t pend = __atomic_load_n(&rec->pend, __ATOMIC_SEQ_CST), max;
	int done;

	if (__atomic_load_n(&rec->n, __ATOMIC_SEQ_CST) > 0) {
		__atomic_store_n(&rec->pend, 0, __ATOMIC_SEQ_CST); /* FreeHeld's */
		return 0;
	}
	if (pend == 0)
		return 0;
	if (cons != NULL) {
		done = kb_pend_done(pend, __atomic_load_n(&cons->cons.tail, __ATOMIC_ACQUIRE), &max);
		if (done >= 0) {
			*released += kb_pend_recover(rec, 0, (uint32_t)done, keep);
			return keep && done > 0;
		}
	} else {
		done = kb_pend_done(pend, __atomic_load_n(&prod->prod.tail, __ATOMIC_RELAXED), &max);
		if (done >= 0) {
			*published += (uint32_t)done;
			*unpublished += kb_pend_recover(rec, (uint32_t)done, max, keep);
			return keep && (uint32_t)done < max;
		}
	}
	(*inconsistent)++;
	__atomic_store_n(&rec->pend, 0, __ATOMIC_SEQ_CST);
	return 0;
}

/* Puts kbridge's head of one side of a ring (its consumer's, cons; or its
 * producer's, prod) back on that side's tail; returns by how far: entries
 * the next dequeue takes again, or unpublished slots discarded. */
static uint32_t
kb_head_back(struct rte_ring_headtail *ht)
{
	uint32_t head = __atomic_load_n(&ht->head, __ATOMIC_RELAXED);
	uint32_t tail = __atomic_load_n(&ht->tail, __ATOMIC_ACQUIRE);

	if (head == tail)
		return 0;
	__atomic_store_n(&ht->head, tail, __ATOMIC_RELAXED);
	return head - tail;
}

int
kb_ring_reconcile(struct rte_ring *tk, struct rte_ring *fk, struct rte_ring *fresh,
		  struct rte_ring *spent, struct kbridge_held_q *out, struct kbridge_held_q *in,
		  struct kb_reconcile *res)
{
	int v7 = fresh != NULL && spent != NULL, out_again = 0, in_again = 0;
	uint32_t pend;

	if (rte_ring_get_cons_sync_type(tk) != RTE_RING_SYNC_ST ||
	    rte_ring_get_prod_sync_type(fk) != RTE_RING_SYNC_ST ||
	    (v7 && (rte_ring_get_cons_sync_type(fresh) != RTE_RING_SYNC_ST ||
		    rte_ring_get_prod_sync_type(spent) != RTE_RING_SYNC_ST)))
		return -ENOTSUP;

	/* The out record: to_kernel's consumer side, or spent's producer. */
	pend = __atomic_load_n(&out->pend, __ATOMIC_SEQ_CST);
	if (v7 && (pend & KB_PEND_OTHER))
		out_again = kb_reconcile_pend(out, NULL, spent, 1, &res->to_kernel_freed,
					      &res->spent_published, &res->spent_freed,
					      &res->inconsistent);
	else
		out_again = kb_reconcile_pend(out, tk, NULL, v7, &res->to_kernel_freed, NULL, NULL,
					      &res->inconsistent);
	/* The in record: from_kernel's producer side, or fresh's consumer. */
	pend = __atomic_load_n(&in->pend, __ATOMIC_SEQ_CST);
	if (v7 && (pend & KB_PEND_OTHER))
		in_again = kb_reconcile_pend(in, fresh, NULL, 1, &res->fresh_freed, NULL, NULL,
					     &res->inconsistent);
	else
		in_again = kb_reconcile_pend(in, NULL, fk, v7, NULL, &res->from_kernel_published,
					     &res->from_kernel_freed, &res->inconsistent);

	res->to_kernel_reclaimed += kb_head_back(&tk->cons);
	res->from_kernel_discarded += kb_head_back(&fk->prod);
	if (v7) {
		res->fresh_reclaimed += kb_head_back(&fresh->cons);
		res->spent_discarded += kb_head_back(&spent->prod);
		/* What was recorded again goes to the app now, its slots
		 * reserved above; what the spent ring has no room for stays on
		 * the record (Port.FreeHeld, the workers). */
		if (out_again)
			kb_spent_put_held(spent, &(struct kb_held){ &out->n, out->m, &out->pend, 0 });
		if (in_again)
			kb_spent_put_held(spent, &(struct kb_held){ &in->n, in->m, &in->pend, 0 });
	}
	/* The workers start after this, on other threads. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst_mbufsrc.c: the burst core's mbuf source (burst.h's struct kb_src), the
 * one place where it takes mbufs and gives back those it is done with.
 *
 * A pool (mode vhost's own; ring mode with an app of kbridge.h version 6 or
 * older) is allocated from and freed to through this process's mempool
 * handlers, which must be the app's: attach checks that the handler at the
 * pool's index in kbridge's table is the ring handler the pool's ring was
 * made for (port.c).
 *
 * The rings (ring mode, version 7) are the app's: it allocates into the
 * fresh ring and frees off the spent ring, with its own handlers, and
 * kbridge only takes and puts ring entries, single on its side of each
 * ring (port_reconcile.c's held operations keep a takeover able to read a
 * killed kbridge's back). A secondary's handler table may be ordered
 * otherwise than the app's (a statically linked app's is), lack the app's
 * hardware pool's driver, or come from another build: none of it matters
 * when kbridge never calls the pool.
 */
#include <limits.h>

#include <rte_mbuf.h>
#include <rte_ring.h>

#include "burst.h"

unsigned int
kb_pool_data_room(struct rte_mempool *mp)
{
	unsigned int room = rte_pktmbuf_data_room_size(mp);

	return room > RTE_PKTMBUF_HEADROOM ? room - RTE_PKTMBUF_HEADROOM : 0;
}

unsigned int
kb_src_avail(const struct kb_src *s)
{
	if (s->pool != NULL)
		return UINT_MAX;
	return rte_ring_count(s->fresh);
}

uint16_t
kb_src_take(const struct kb_src *s, struct kb_held *rec, struct rte_mbuf **m, uint16_t n)
{
	uint16_t got;

	if (n == 0)
		return 0;
	if (s->pool == NULL) {
		n = (uint16_t)RTE_MIN((unsigned int)n, rte_ring_count(s->fresh));
		if (n == 0)
			return 0;
		if (rec->n != NULL)
			return kb_fresh_take_held(s->fresh, rec, m, n);
		return (uint16_t)rte_ring_dequeue_bulk(s->fresh, (void **)m, n, NULL);
	}
	if (rte_pktmbuf_alloc_bulk(s->pool, m, n) == 0) {
		got = n;
	} else {
		for (got = 0; got < n; got++) {
			m[got] = rte_pktmbuf_alloc(s->pool);
			if (m[got] == NULL)
				break;
		}
	}
	kb_held_note(rec, m, got);
	return got;
}

int
kb_src_give_held(const struct kb_src *s, struct kb_held *rec, struct rte_mbuf **m, uint16_t n)
{
	if (s->pool != NULL) {
		kb_held_clear(rec);
		if (n > 0)
			rte_pktmbuf_free_bulk(m, n);
		return 1;
	}
	/* A buffer over the rings always has a record (kb_out_new, kb_in_new):
	 * what the spent ring has no room for stays on it. */
	if (kb_spent_put_held(s->spent, rec))
		return 1;
	if (s->spent_waits != NULL)
		(*s->spent_waits)++;
	return 0;
}

unsigned int
kb_src_give(const struct kb_src *s, struct rte_mbuf **m, uint16_t n)
{
	if (n == 0)
		return 0;
	if (s->pool != NULL) {
		rte_pktmbuf_free_bulk(m, n);
		return 0;
	}
	return n - rte_ring_enqueue_burst(s->spent, (void **)m, n, NULL);
}

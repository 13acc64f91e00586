/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_ip.h>
#include <rte_tcp.h>

#include "burst.h"

volatile int kb_test_hold;

static void kb_test_hold_now(int dir, uint32_t n);

/* Records that the burst holds m[0..n): pointers first, then n. */
static inline void
kb_held_note(struct kbridge_held_q *rec, struct rte_mbuf *const *m, uint16_t n)
{
	if (rec == NULL || n == 0)
		return;
	memcpy(rec->m, m, (size_t)n * sizeof(*m));
	__atomic_store_n(&rec->n, n, __ATOMIC_RELEASE);
	if (unlikely(kb_test_hold & KB_TEST_HOLD_OUT))
		kb_test_hold_now(KB_TEST_HOLD_OUT, n);
}

/* Records one more mbuf, m, as the k-th held (k counts from 1). */
static inline void
kb_held_add(struct kbridge_held_q *rec, uint16_t k, struct rte_mbuf *m)
{
	if (rec == NULL)
		return;
	rec->m[k - 1] = m;
	__atomic_store_n(&rec->n, k, __ATOMIC_RELEASE);
}

/* Forgets the record before its mbufs are freed or handed over. */
static inline void
kb_held_clear(struct kbridge_held_q *rec)
{
	if (rec == NULL)
		return;
	if (unlikely(kb_test_hold & KB_TEST_HOLD_IN) && rec->n > 0)
		kb_test_hold_now(KB_TEST_HOLD_IN, rec->n);
	__atomic_store_n(&rec->n, 0, __ATOMIC_RELEASE);
}

struct kb_out_burst *
kb_out_new(struct rte_ring *ring, int32_t tsc_offset, uint64_t tsc_hz,
	   uint16_t cap, uint16_t max_segs)
{
	struct kb_out_burst *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return NULL;
	b->ring = ring;
	b->tsc_offset = tsc_offset;
	b->tsc_hz = tsc_hz;
	b->cap = cap;
	b->max_segs = max_segs;
	b->mbufs = calloc(cap, sizeof(*b->mbufs));
	b->pkts = calloc(cap, sizeof(*b->pkts));
	b->iov = calloc((size_t)cap * max_segs, sizeof(*b->iov));
	if (b->mbufs == NULL || b->pkts == NULL || b->iov == NULL) {
		kb_out_free(b);
		return NULL;
	}
	return b;
}

static inline unsigned int
kb_hist_bucket(uint64_t ns)
{
	unsigned int i = 0;

	ns >>= KB_HIST_SHIFT;
	while (ns != 0 && i < KB_HIST_BUCKETS - 1) {
		ns >>= 1;
		i++;
	}
	return i;
}

static void
kb_out_release(struct kb_out_burst *b)
{
	uint16_t i;

	if (b->n == 0)
		return;
	if (b->tsc_offset >= 0 && b->tsc_hz != 0) {
		uint64_t now = rte_rdtsc();

		for (i = 0; i < b->n; i++) {
			uint64_t d;

			if (!b->pkts[i].written)
				continue;
			d = now - b->pkts[i].enq_tsc;
			/* Cycles to ns without overflow for any sane delay. */
			b->hist[kb_hist_bucket(d * 1000 / (b->tsc_hz / 1000000))]++;
		}
	}
	kb_held_clear(b->held);
	rte_pktmbuf_free_bulk(b->mbufs, b->n);
	b->n = 0;
}

uint16_t
kb_out_next(struct kb_out_burst *b)
{
	uint16_t i, seg = 0;

	kb_out_release(b);
	b->n = (uint16_t)rte_ring_dequeue_burst(b->ring, (void **)b->mbufs,
						 b->cap, NULL);
	kb_held_note(b->held, b->mbufs, b->n);
	for (i = 0; i < b->n; i++) {
		struct rte_mbuf *m = b->mbufs[i];
		struct kb_pkt *p = &b->pkts[i];

		p->pkt_len = rte_pktmbuf_pkt_len(m);
		p->first_seg = seg;
		p->written = 0;
		p->enq_tsc = b->tsc_offset >= 0 ?
			*RTE_MBUF_DYNFIELD(m, b->tsc_offset, uint64_t *) : 0;
		p->offload = 0;
		p->tso_segsz = 0;
		if ((m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) ==
		    RTE_MBUF_F_RX_L4_CKSUM_GOOD)
			p->offload |= KB_PKT_L4_CSUM_GOOD;
		if ((m->ol_flags & RTE_MBUF_F_RX_LRO) && m->tso_segsz != 0) {
			p->offload |= KB_PKT_LRO;
			p->tso_segsz = m->tso_segsz;
		}
		p->verdict = kb_mbuf_iov(m, &b->iov[seg], b->max_segs, 0, &p->nb_iov);
		seg += b->max_segs;
	}
	return b->n;
}

void
kb_out_free(struct kb_out_burst *b)
{
	if (b == NULL)
		return;
	if (b->mbufs != NULL)
		kb_out_release(b);
	free(b->mbufs);
	free(b->pkts);
	free(b->iov);
	free(b);
}

struct kb_in_burst *
kb_in_new(struct rte_ring *ring, struct rte_mempool *pool, uint16_t cap,
	  uint32_t stride)
{
	struct kb_in_burst *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return NULL;
	b->ring = ring;
	b->pool = pool;
	b->cap = cap;
	b->stride = stride;
	b->room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
	b->buf = aligned_alloc(64, (size_t)cap * stride);
	b->lens = calloc(cap, sizeof(*b->lens));
	b->mbufs = calloc(cap, sizeof(*b->mbufs));
	if (b->buf == NULL || b->lens == NULL || b->mbufs == NULL) {
		kb_in_free(b);
		return NULL;
	}
	return b;
}


/* Whether every frame of the burst fits one mbuf. */
static inline int
kb_in_one_mbuf_each(const struct kb_in_burst *b)
{
	uint16_t i;

	for (i = 0; i < b->n; i++)
		if (b->lens[i] > b->room)
			return 0;
	return 1;
}

void
kb_in_put(struct kb_in_burst *b)
{
	uint16_t i, k = 0;
	unsigned int sent;

	b->queued = b->no_mbuf = b->ring_full = 0;
	if (b->n > 0 && kb_in_one_mbuf_each(b) &&
	    rte_pktmbuf_alloc_bulk(b->pool, b->mbufs, b->n) == 0) {
		/* The common case, MTU frames: one mbuf each, taken from the
		 * pool in one go rather than one rte_pktmbuf_alloc apiece. */
		for (i = 0; i < b->n; i++) {
			struct rte_mbuf *m = b->mbufs[i];

			kb_held_add(b->held, i + 1, m);
			memcpy(rte_pktmbuf_mtod(m, void *), b->buf + (size_t)i * b->stride,
			       b->lens[i]);
			m->data_len = (uint16_t)b->lens[i];
			m->pkt_len = b->lens[i];
		}
		k = b->n;
	} else {
		for (i = 0; i < b->n; i++) {
			struct rte_mbuf *m = kb_mbuf_copy(b->pool,
							b->buf + (size_t)i * b->stride,
							b->lens[i]);
			if (m == NULL) {
				b->no_mbuf++;
				continue;
			}
			b->mbufs[k++] = m;
			kb_held_add(b->held, k, m);
		}
	}
	b->n = 0;
	if (k == 0)
		return;
	kb_held_clear(b->held);
	sent = rte_ring_enqueue_burst(b->ring, (void **)b->mbufs, k, NULL);
	b->queued = (uint16_t)sent;
	if (sent < k) {
		b->ring_full = (uint16_t)(k - sent);
		rte_pktmbuf_free_bulk(b->mbufs + sent, k - sent);
	}
}

int
kb_in_put_tso(struct kb_in_burst *b, uint8_t *data, uint32_t len,
	      const struct kb_tso *t)
{
	uint32_t room = rte_pktmbuf_data_room_size(b->pool) - RTE_PKTMBUF_HEADROOM;
	uint32_t segs = (len + room - 1) / room;
	uint8_t *l3 = data + t->l2;
	struct rte_tcp_hdr *tcp = (struct rte_tcp_hdr *)(l3 + t->l3);
	struct rte_mbuf *m;
	uint64_t ol;

	b->queued = b->no_mbuf = b->ring_full = 0;
	if ((t->max_segs != 0 && segs > t->max_segs) ||
	    (uint32_t)t->l2 + t->l3 + t->l4 > room)
		return -E2BIG;
	/* The headers as DPDK's TSO wants them: IPv4 checksum left to the
	 * port, TCP checksum field holding the pseudo-header sum without the
	 * length (rte_ipv4_phdr_cksum leaves it out for TX_TCP_SEG). */
	ol = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_TCP_CKSUM;
	if (t->ipv6) {
		ol |= RTE_MBUF_F_TX_IPV6;
		tcp->cksum = rte_ipv6_phdr_cksum((struct rte_ipv6_hdr *)l3, ol);
	} else {
		struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)l3;

		ol |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
		ip->hdr_checksum = 0;
		tcp->cksum = rte_ipv4_phdr_cksum(ip, ol);
	}
	m = kb_mbuf_copy(b->pool, data, len);
	if (m == NULL) {
		b->no_mbuf = 1;
		return 0;
	}
	m->ol_flags |= ol;
	m->l2_len = t->l2;
	m->l3_len = t->l3;
	m->l4_len = t->l4;
	m->tso_segsz = t->mss;
	/* Held until the enqueue: a kbridge killed here leaves it on record. */
	kb_held_add(b->held, 1, m);
	kb_held_clear(b->held);
	if (rte_ring_enqueue(b->ring, m) != 0) {
		rte_pktmbuf_free(m);
		b->ring_full = 1;
		return 0;
	}
	b->queued = 1;
	return 1;
}

void
kb_in_free(struct kb_in_burst *b)
{
	if (b == NULL)
		return;
	free(b->buf);
	free(b->lens);
	free(b->mbufs);
	free(b);
}

unsigned int
kb_ring_count(const struct rte_ring *r)
{
	return rte_ring_count(r);
}

int
kb_out_set_held(struct kb_out_burst *b, struct kbridge_held_q *rec)
{
	if (b->cap > KBRIDGE_HELD_MAX)
		return -EINVAL;
	b->held = rec;
	return 0;
}

int
kb_in_set_held(struct kb_in_burst *b, struct kbridge_held_q *rec)
{
	if (b->cap > KBRIDGE_HELD_MAX)
		return -EINVAL;
	b->held = rec;
	return 0;
}

static void
kb_test_hold_now(int dir, uint32_t n)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 10 * 1000 * 1000 };
	int i;

	__atomic_fetch_and(&kb_test_hold, ~dir, __ATOMIC_SEQ_CST);
	fprintf(stderr, "kbridge: test hold: the worker holds %u mbufs (%s)\n", n,
		dir == KB_TEST_HOLD_OUT ? "out" : "in");
	fflush(stderr);
	for (i = 0; i < 6000; i++)
		nanosleep(&ts, NULL);
}

/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_cycles.h>
#include <rte_mbuf_dyn.h>
#include <rte_ip.h>
#include <rte_net.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include "burst.h"
#include "csum.h"
#include "prefetch.h"

volatile int kb_test_hold;

/* Records that the buffer holds m[0..n): pointers first, then n. */
static inline void
kb_held_note(struct kb_held *rec, struct rte_mbuf *const *m, uint16_t n)
{
	if (rec->n == NULL || n == 0)
		return;
	memcpy(rec->m, m, (size_t)n * sizeof(*m));
	kb_held_set(rec, n);
}

/* Points iov[0..max_segs) at the segments of m and stores their number in
 * *nb. The walk is bounded by max_segs, so a cyclic chain ends as
 * TOO_MANY_SEGS instead of looping. */
static inline uint8_t
kb_mbuf_iov(struct rte_mbuf *m, struct iovec *iov, uint16_t max_segs,
	    int allow_extbuf, uint16_t *nb)
{
	uint32_t pkt_len = rte_pktmbuf_pkt_len(m), sum = 0;
	uint16_t k = 0;
	uint8_t verdict = KB_PKT_OK;

	for (; m != NULL; m = m->next) {
		if (k == max_segs) {
			verdict = KB_PKT_TOO_MANY_SEGS;
			break;
		}
		if ((!allow_extbuf && RTE_MBUF_HAS_EXTBUF(m)) ||
		    (uint32_t)m->data_off + m->data_len > m->buf_len) {
			verdict = KB_PKT_MALFORMED;
			break;
		}
		iov[k].iov_base = rte_pktmbuf_mtod(m, void *);
		iov[k].iov_len = m->data_len;
		sum += m->data_len;
		k++;
	}
	if (verdict == KB_PKT_OK && sum != pkt_len)
		verdict = KB_PKT_MALFORMED;
	*nb = k;
	return verdict;
}

/* Copies one frame into a fresh mbuf chain from pool; NULL when the pool
 * runs dry (what was taken is freed). */
static struct rte_mbuf *
kb_mbuf_copy(struct rte_mempool *pool, const uint8_t *data, uint32_t len)
{
	struct rte_mbuf *head = NULL, *tail = NULL;
	uint32_t off = 0;

	do {
		struct rte_mbuf *m = rte_pktmbuf_alloc(pool);
		uint32_t room, chunk;

		if (m == NULL) {
			rte_pktmbuf_free(head);
			return NULL;
		}
		room = rte_pktmbuf_tailroom(m);
		if (room == 0) {
			/* An mbuf with no room (the pool's data room is all
			 * headroom: refused at attach) would loop until the
			 * pool is empty. */
			rte_pktmbuf_free(m);
			rte_pktmbuf_free(head);
			return NULL;
		}
		chunk = len - off < room ? len - off : room;
		memcpy(rte_pktmbuf_mtod(m, void *), data + off, chunk);
		m->data_len = (uint16_t)chunk;
		off += chunk;
		if (head == NULL) {
			head = m;
		} else {
			tail->next = m;
			head->nb_segs++;
		}
		tail = m;
	} while (off < len);
	head->pkt_len = len;
	return head;
}

struct kb_out *
kb_out_new(const struct kb_out *cfg)
{
	struct kb_out *b = malloc(sizeof(*b));

	if (b == NULL)
		return NULL;
	*b = *cfg;
	b->n = 0;
	b->csum_sw = 0;
	memset(b->hist, 0, sizeof(b->hist));
	b->copp_next = NULL;
	memset(&b->copp, 0, sizeof(b->copp));
	memset(&b->copp_stats, 0, sizeof(b->copp_stats));
	b->last_policed = 0;
	b->mbufs = calloc(b->cap, sizeof(*b->mbufs));
	b->policed = calloc(b->cap, sizeof(*b->policed));
	b->pkts = calloc(b->cap, sizeof(*b->pkts));
	b->iov = calloc((size_t)b->cap * b->max_segs, sizeof(*b->iov));
	if (b->mbufs == NULL || b->pkts == NULL || b->iov == NULL || b->policed == NULL) {
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
kb_out_release(struct kb_out *b)
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
	kb_held_clear(&b->held);
	rte_pktmbuf_free_bulk(b->mbufs, b->n);
	b->n = 0;
}

/* Completes the L4 checksum of a packet sent with a partial checksum
 * (librte_vhost hands NEEDS_CSUM over as RX_L4_CKSUM_NONE: data good,
 * checksum field holding the pseudo-header sum only). Returns 1 when done. */
static int
kb_complete_csum(struct rte_mbuf *m)
{
	struct rte_net_hdr_lens hl;
	uint32_t ptype = rte_net_get_ptype(m, &hl, RTE_PTYPE_L2_MASK |
					   RTE_PTYPE_L3_MASK | RTE_PTYPE_L4_MASK);
	uint32_t l4off = hl.l2_len + hl.l3_len, at;
	uint16_t sum;
	void *l3;

	if (rte_pktmbuf_data_len(m) < l4off + sizeof(struct rte_tcp_hdr))
		return 0;
	l3 = rte_pktmbuf_mtod_offset(m, void *, hl.l2_len);
	switch (ptype & RTE_PTYPE_L4_MASK) {
	case RTE_PTYPE_L4_TCP:
		at = l4off + offsetof(struct rte_tcp_hdr, cksum);
		break;
	case RTE_PTYPE_L4_UDP:
		at = l4off + offsetof(struct rte_udp_hdr, dgram_cksum);
		break;
	default:
		return 0;
	}
	if (!RTE_ETH_IS_IPV4_HDR(ptype) && !RTE_ETH_IS_IPV6_HDR(ptype))
		return 0;
	sum = 0;
	memcpy(rte_pktmbuf_mtod_offset(m, uint8_t *, at), &sum, sizeof(sum));
	if (RTE_ETH_IS_IPV4_HDR(ptype))
		sum = rte_ipv4_udptcp_cksum_mbuf(m, l3, l4off);
	else
		sum = rte_ipv6_udptcp_cksum_mbuf(m, l3, l4off);
	memcpy(rte_pktmbuf_mtod_offset(m, uint8_t *, at), &sum, sizeof(sum));
	return 1;
}

/* Fills p from m: lengths, the enqueue TSC, offload hints, verdict. */
static inline void
kb_out_describe(struct kb_out *b, struct rte_mbuf *m, struct kb_pkt *p,
		uint16_t seg)
{
	uint64_t l4 = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;

	p->pkt_len = rte_pktmbuf_pkt_len(m);
	p->first_seg = seg;
	p->written = 0;
	p->enq_tsc = b->tsc_offset >= 0 ?
		*RTE_MBUF_DYNFIELD(m, b->tsc_offset, uint64_t *) : 0;
	p->offload = 0;
	p->tso_segsz = 0;
	if ((m->ol_flags & RTE_MBUF_F_RX_LRO) && m->tso_segsz != 0) {
		/* The kernel side writes it as GSO with NEEDS_CSUM: the
		 * checksum field is rewritten anyway. */
		p->offload |= KB_PKT_LRO;
		p->tso_segsz = m->tso_segsz;
	} else if (l4 == RTE_MBUF_F_RX_L4_CKSUM_NONE &&
		   (b->flags & KB_BURST_COMPLETE_CSUM) && kb_complete_csum(m)) {
		p->offload |= KB_PKT_L4_CSUM_GOOD;
		b->csum_sw++;
	}
	if (l4 == RTE_MBUF_F_RX_L4_CKSUM_GOOD)
		p->offload |= KB_PKT_L4_CSUM_GOOD;
	p->verdict = kb_mbuf_iov(m, &b->iov[seg], b->max_segs,
				 b->flags & KB_BURST_EXTBUF, &p->nb_iov);
	/* The coalescer checks a TCP frame's checksums before it merges it;
	 * here, on bytes just prefetched and in C, the check costs less than
	 * half of what it does in Go. A chained or LRO packet, or one whose
	 * check fails, is left to the coalescer as before. */
	if (p->verdict == KB_PKT_OK && p->nb_iov == 1 && p->offload == 0 &&
	    kb_tcp_csum_good(b->iov[seg].iov_base, (uint32_t)b->iov[seg].iov_len))
		p->offload |= KB_PKT_CSUM_CHECKED;
}

static uint64_t
kb_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * KB_NS + (uint64_t)ts.tv_nsec;
}

/* Puts in force what kb_out_set_copp handed over, if anything. */
static void
kb_out_take_copp(struct kb_out *b)
{
	struct kb_copp *c;
	uint64_t now;
	unsigned int i;

	if (__atomic_load_n(&b->copp_next, __ATOMIC_RELAXED) == NULL)
		return;
	c = __atomic_exchange_n(&b->copp_next, NULL, __ATOMIC_ACQUIRE);
	if (c == NULL)
		return;
	b->copp = *c;
	free(c);
	now = kb_now_ns();
	for (i = 0; i < KBRIDGE_CLASSES; i++)
		kb_policer_init(&b->pol[i], &b->copp.rate[i], now);
}

/* Classifies the burst's frames by their first segment and frees those
 * their class's policer refuses, keeping the others in order; returns how
 * many it kept. The held record is cleared before the record of what is
 * kept is written, and that before the policed are freed: a kbridge killed
 * in between leaks those mbufs and never frees one twice. */
static uint16_t
kb_out_police(struct kb_out *b)
{
	uint64_t now = kb_now_ns();
	uint16_t i, k = 0, d = 0;
	int sv_slot;
	const struct kb_sv_view *sv = kb_sv_enter(now, &sv_slot);

	for (i = 0; i < b->n; i++) {
		struct rte_mbuf *m = b->mbufs[i];
		uint32_t len = (uint32_t)m->data_off + m->data_len <= m->buf_len ? m->data_len : 0;
		uint8_t why;
		unsigned int c = kbridge_classify(rte_pktmbuf_mtod(m, const uint8_t *), len,
					     &b->copp.match, &why);

		c = kb_sv_class(sv, c, rte_pktmbuf_mtod(m, const uint8_t *), len,
				rte_pktmbuf_pkt_len(m), b->copp_stats.unwanted);

		if (unlikely(why != KBRIDGE_HDR_PARSED))
			b->copp_stats.why[why]++;
		if (kb_policer_take(&b->pol[c], rte_pktmbuf_pkt_len(m), now)) {
			b->copp_stats.passed[c]++;
			b->mbufs[k++] = m;
		} else {
			b->copp_stats.policed[c]++;
			b->copp_stats.policed_at[c] = now;
			b->policed[d++] = m;
		}
	}
	kb_sv_leave(sv_slot);
	b->last_policed = d;
	if (d == 0)
		return k;
	if (b->held.n != NULL) {
		__atomic_store_n(b->held.n, 0, __ATOMIC_RELEASE);
		kb_held_note(&b->held, b->mbufs, k);
	}
	rte_pktmbuf_free_bulk(b->policed, d);
	return k;
}

uint16_t
kb_out_next(struct kb_out *b)
{
	uint16_t i, seg = 0;

	kb_out_release(b);
	kb_out_take_copp(b);
	b->last_policed = 0;
	if (b->held.n != NULL && b->ops->dequeue_held != NULL) {
		b->n = b->ops->dequeue_held(b->ctx, &b->held, b->mbufs, b->cap);
	} else {
		b->n = b->ops->dequeue(b->ctx, b->mbufs, b->cap);
		kb_held_note(&b->held, b->mbufs, b->n);
	}
	kb_prefetch_burst(b->mbufs, b->n);
	if (b->copp.on && b->n > 0)
		b->n = kb_out_police(b);
	for (i = 0; i < b->n; i++) {
		kb_out_describe(b, b->mbufs[i], &b->pkts[i], seg);
		seg += b->max_segs;
	}
	return b->n;
}

void
kb_out_free(struct kb_out *b)
{
	if (b == NULL)
		return;
	if (b->mbufs != NULL)
		kb_out_release(b);
	free(b->copp_next);
	free(b->policed);
	free(b->mbufs);
	free(b->pkts);
	free(b->iov);
	free(b);
}

int
kb_out_set_copp(struct kb_out *b, const struct kb_copp *c)
{
	struct kb_copp *n = malloc(sizeof(*n));

	if (n == NULL)
		return -ENOMEM;
	*n = *c;
	free(__atomic_exchange_n(&b->copp_next, n, __ATOMIC_ACQ_REL));
	return 0;
}

struct kb_in *
kb_in_new(const struct kb_in *cfg)
{
	struct kb_in *b = malloc(sizeof(*b));

	if (b == NULL)
		return NULL;
	*b = *cfg;
	b->n = b->queued = b->no_mbuf = b->ring_full = 0;
	b->reserved = 0;
	memset(b->room_dropped, 0, sizeof(b->room_dropped));
	b->room = rte_pktmbuf_data_room_size(b->pool);
	b->room = b->room > RTE_PKTMBUF_HEADROOM ? b->room - RTE_PKTMBUF_HEADROOM : 0;
	b->buf = aligned_alloc(64, (size_t)b->cap * b->stride);
	b->lens = calloc(b->cap, sizeof(*b->lens));
	b->mbufs = calloc(b->cap, sizeof(*b->mbufs));
	if (b->buf == NULL || b->lens == NULL || b->mbufs == NULL) {
		kb_in_free(b);
		return NULL;
	}
	return b;
}

/* Whether every frame of the burst fits one mbuf. */
static inline int
kb_in_one_mbuf_each(const struct kb_in *b)
{
	uint16_t i;

	for (i = 0; i < b->n; i++)
		if (b->lens[i] > b->room)
			return 0;
	return 1;
}

/* The mode's enqueue_held clears the record itself, around its ring
 * operation; otherwise it is cleared first. */
void
kb_in_hand_over(struct kb_in *b, uint16_t k)
{
	uint16_t sent;

	if (b->held.n != NULL && b->ops->enqueue_held != NULL) {
		sent = b->ops->enqueue_held(b->ctx, &b->held, b->mbufs, k);
	} else {
		kb_held_clear(&b->held);
		sent = b->ops->enqueue(b->ctx, b->mbufs, k);
	}
	b->queued = sent;
	b->ring_full += (uint16_t)(k - sent);
}

/* Whether the frame data[0..len) goes to the app whose side has *room
 * slots, the last reserve of them kept for the control plane (taking one if
 * so); counts it by class if not. */
static inline int
kb_in_admits(struct kb_in *b, const uint8_t *data, uint32_t len, unsigned int *room,
	     unsigned int reserve)
{
	static const struct kbridge_class_match none;
	unsigned int c;
	uint8_t why;

	if (*room > reserve) {
		(*room)--;
		return 1;
	}
	c = kbridge_classify_host(data, len, &none, &why);
	if (*room > 0 && kbridge_class_reserved(c)) {
		(*room)--;
		b->reserved++;
		return 1;
	}
	b->room_dropped[c]++;
	b->ring_full++;
	return 0;
}

unsigned int
kb_in_admit_n(struct kb_in *b, const uint8_t *data, uint32_t len, unsigned int n)
{
	static const struct kbridge_class_match none;
	unsigned int reserve = 0, room, k = 0, c;
	uint8_t why;

	if (!__atomic_load_n(&b->reserve_on, __ATOMIC_RELAXED) || b->ops->room == NULL)
		return n;
	room = b->ops->room(b->ctx, &reserve);
	if (room >= reserve + n)
		return n;
	if (room > reserve) {
		k = room - reserve;
		room = reserve;
	}
	/* One class for all n: classified once, as kb_in_admits would have
	 * classified each. */
	c = kbridge_classify_host(data, len, &none, &why);
	if (kbridge_class_reserved(c)) {
		unsigned int r = RTE_MIN(n - k, room);

		b->reserved += r;
		k += r;
	}
	b->room_dropped[c] += n - k;
	b->ring_full += (uint16_t)(n - k);
	return k;
}

/* Cuts the burst to what the app's side has room for, keeping its reserve
 * for control and neighbour frames, the kept frames moved up in order.
 * Classifies nothing while the burst fits above the reserve. */
static void
kb_in_admit(struct kb_in *b)
{
	unsigned int reserve = 0, room;
	uint16_t i, k = 0;

	b->kept = b->n;
	if (!__atomic_load_n(&b->reserve_on, __ATOMIC_RELAXED) || b->ops->room == NULL || b->n == 0)
		return;
	room = b->ops->room(b->ctx, &reserve);
	if (room >= reserve + b->n)
		return;
	for (i = 0; i < b->n; i++) {
		uint8_t *f = b->buf + (size_t)i * b->stride;

		if (!kb_in_admits(b, f, b->lens[i], &room, reserve))
			continue;
		if (k != i) {
			memmove(b->buf + (size_t)k * b->stride, f, b->lens[i]);
			b->lens[k] = b->lens[i];
		}
		k++;
	}
	b->n = b->kept = k;
}

void
kb_in_put(struct kb_in *b)
{
	uint16_t i, k = 0;

	b->queued = b->no_mbuf = b->ring_full = 0;
	kb_sv_learn(b->buf, b->stride, b->lens, b->n);
	kb_in_admit(b);
	if (b->n > 0 && kb_in_one_mbuf_each(b) &&
	    rte_pktmbuf_alloc_bulk(b->pool, b->mbufs, b->n) == 0) {
		/* The common case, MTU frames: one mbuf each, taken from the
		 * pool in one go rather than one rte_pktmbuf_alloc apiece. */
		for (i = 0; i < b->n; i++) {
			struct rte_mbuf *m = b->mbufs[i];

			kb_held_add(&b->held, i + 1, m);
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
			kb_held_add(&b->held, k, m);
		}
	}
	b->n = 0;
	if (k > 0)
		kb_in_hand_over(b, k);
}

int
kb_in_put_tso(struct kb_in *b, uint8_t *data, uint32_t len)
{
	const struct kb_tso *t = &b->tso;
	uint32_t segs = (len + b->room - 1) / b->room;
	uint8_t *l3 = data + t->l2;
	struct rte_tcp_hdr *tcp = (struct rte_tcp_hdr *)(l3 + t->l3);
	struct rte_mbuf *m;
	uint64_t ol;

	b->queued = b->no_mbuf = b->ring_full = 0;
	if ((b->max_segs != 0 && segs > b->max_segs) ||
	    (uint32_t)t->l2 + t->l3 + t->l4 > b->room ||
	    (b->ops->takes_tso != NULL && !b->ops->takes_tso(b->ctx, t->ipv6)))
		return -E2BIG;
	if (kb_in_admit_n(b, data, len, 1) == 0)
		return 0;
	/* The headers as DPDK's TSO wants them: IPv4 checksum left to the
	 * port, TCP checksum field holding the pseudo-header sum without the
	 * length (rte_ipv4_phdr_cksum leaves it out for TX_TCP_SEG). That is
	 * also what virtio_enqueue_offload (lib/vhost/virtio_net.c) turns
	 * into a GSO virtio-net header: NEEDS_CSUM at l2+l3, gso_type from
	 * TX_IPV4/6, gso_size tso_segsz, hdr_len l2+l3+l4, the IPv4 header
	 * checksum computed for TX_IP_CKSUM. */
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
	b->mbufs[0] = m;
	kb_held_add(&b->held, 1, m);
	kb_in_hand_over(b, 1);
	return b->queued;
}

void
kb_in_free(struct kb_in *b)
{
	if (b == NULL)
		return;
	free(b->buf);
	free(b->lens);
	free(b->mbufs);
	free(b);
}

void
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

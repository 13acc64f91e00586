/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stddef.h>
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
#include "burst_csum.h"
#include "burst_prefetch.h"

/* Gives a buffer over the app's rings that got no held record one of its
 * own, in C memory, so that what it holds is on a record (what the spent
 * ring has no room for stays there); NULL when out of memory or a burst of
 * cap would not fit. Only a buffer made without a claim (tests of the burst
 * core) has none: a takeover cannot read this one. */
static struct kbridge_held_q *
kb_own_record(struct kb_held *rec, const struct kb_src *src, uint16_t cap, int dir)
{
	struct kbridge_held_q *own;

	if (src->pool != NULL || rec->n != NULL || cap > KBRIDGE_HELD_MAX)
		return NULL;
	own = calloc(1, sizeof(*own));
	if (own != NULL)
		*rec = (struct kb_held){ &own->n, own->m, &own->pend, dir };
	return own;
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
	b->own = kb_own_record(&b->held, &b->src, b->cap, KB_TEST_HOLD_OUT);
	/* What a record names already (a takeover's leftovers the spent ring
	 * had no room for) goes there before the first burst. */
	b->pending = b->src.pool == NULL && b->held.n != NULL && *b->held.n > 0;
	b->mbufs = calloc(b->cap, sizeof(*b->mbufs));
	b->policed = calloc(b->cap, sizeof(*b->policed));
	b->pkts = calloc(b->cap, sizeof(*b->pkts));
	b->iov = calloc((size_t)b->cap * b->max_segs, sizeof(*b->iov));
	if (b->mbufs == NULL || b->pkts == NULL || b->iov == NULL || b->policed == NULL ||
	    (b->src.pool == NULL && b->held.n == NULL)) {
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

/* Releases the burst: its residence times, then every mbuf back to the
 * source. A pool frees the burst (the policed ones went already); the rings
 * take everything the record names, written or policed, or nothing, and
 * then the buffer holds it still (pending) and tries again next time. */
static void
kb_out_release(struct kb_out *b)
{
	uint16_t i, n = b->n;

	if (n > 0 && b->tsc_offset >= 0 && b->tsc_hz != 0) {
		uint64_t now = rte_rdtsc();

		for (i = 0; i < n; i++) {
			uint64_t d;

			if (!b->pkts[i].written)
				continue;
			d = now - b->pkts[i].enq_tsc;
			/* Cycles to ns without overflow for any sane delay. */
			b->hist[kb_hist_bucket(d * 1000 / (b->tsc_hz / 1000000))]++;
		}
	}
	b->n = 0;
	b->pending = !kb_src_give_held(&b->src, &b->held, b->mbufs, n);
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
	/* The rings: the record keeps naming the whole burst, and the policed
	 * go to the spent ring with the rest when it is released. */
	if (b->src.pool == NULL)
		return k;
	if (b->held.n != NULL) {
		__atomic_store_n(b->held.n, 0, __ATOMIC_RELEASE);
		kb_held_note(&b->held, b->mbufs, k);
	}
	kb_src_give(&b->src, b->policed, d);
	return k;
}

uint16_t
kb_out_next(struct kb_out *b)
{
	uint16_t i, seg = 0;

	kb_out_release(b);
	if (b->pending)
		return 0; /* the spent ring first: nothing more is taken */
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
	free(b->own); /* what it names still is lost: only tests go without a claim */
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
	b->own = kb_own_record(&b->held, &b->src, b->cap, KB_TEST_HOLD_IN);
	b->pending = b->src.pool == NULL && b->held.n != NULL && *b->held.n > 0;
	b->max_chain = b->room > 0 ? (RTE_MAX(b->stride, KB_IN_FRAME_MAX) + b->room - 1) / b->room : 0;
	b->buf = aligned_alloc(64, (size_t)b->cap * b->stride);
	b->lens = calloc(b->cap, sizeof(*b->lens));
	b->csum = calloc(b->cap, sizeof(*b->csum));
	b->mbufs = calloc(b->cap, sizeof(*b->mbufs));
	b->segs = calloc(b->max_chain + 1, sizeof(*b->segs));
	if (b->buf == NULL || b->lens == NULL || b->csum == NULL || b->mbufs == NULL || b->segs == NULL ||
	    (b->src.pool == NULL && b->held.n == NULL)) {
		kb_in_free(b);
		return NULL;
	}
	return b;
}

int
kb_in_flush(struct kb_in *b)
{
	if (likely(!b->pending))
		return 1;
	b->pending = !kb_src_give_held(&b->src, &b->held, NULL, 0);
	return !b->pending;
}

/* Copies one frame into a chain of mbufs taken from the source, each
 * holding room bytes; NULL when the source has not that many (a pool's
 * partial take is given back). Not on the record: the caller records the
 * head (a kbridge killed in between leaks one chain, never frees twice). */
static struct rte_mbuf *
kb_in_chain(struct kb_in *b, const uint8_t *data, uint32_t len)
{
	struct kb_held none = { NULL, NULL, NULL, 0 };
	uint32_t need = len == 0 ? 1 : (len + b->room - 1) / b->room, off = 0, i;
	struct rte_mbuf *head;

	if (b->room == 0 || need > b->max_chain || kb_src_avail(&b->src) < need)
		return NULL;
	i = kb_src_take(&b->src, &none, b->segs, (uint16_t)need);
	if (i < need) {
		kb_src_give(&b->src, b->segs, (uint16_t)i);
		return NULL;
	}
	head = b->segs[0];
	for (i = 0; i < need; i++) {
		struct rte_mbuf *m = b->segs[i];
		uint32_t chunk = RTE_MIN(len - off, b->room);

		memcpy(rte_pktmbuf_mtod(m, void *), data + off, chunk);
		m->data_len = (uint16_t)chunk;
		off += chunk;
		if (i > 0)
			b->segs[i - 1]->next = m;
	}
	head->nb_segs = (uint16_t)need;
	head->pkt_len = len;
	return head;
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
 * operation; otherwise it is cleared first. What the app's side did not
 * take (every one, when its enqueue copies) goes back to the source; with
 * the rings that is nothing, the burst having been cut to the room. */
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
	if (b->ops->copies)
		kb_src_give(&b->src, b->mbufs, k);
	else if (sent < k)
		kb_src_give(&b->src, b->mbufs + sent, (uint16_t)(k - sent));
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
	int on = __atomic_load_n(&b->reserve_on, __ATOMIC_RELAXED);
	uint8_t why;

	if ((!on && b->src.pool != NULL) || b->ops->room == NULL)
		return n;
	room = b->ops->room(b->ctx, &reserve);
	if (!on)
		reserve = 0;
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
 * Classifies nothing while the burst fits above the reserve. With the
 * rings as the source it cuts even without a reserve: kbridge alone fills
 * the ring, so what it admits the enqueue takes, and no mbuf of the app's
 * is left over. */
static void
kb_in_admit(struct kb_in *b)
{
	unsigned int reserve = 0, room;
	int on = __atomic_load_n(&b->reserve_on, __ATOMIC_RELAXED);
	uint16_t i, k = 0;

	b->kept = b->n;
	if ((!on && b->src.pool != NULL) || b->ops->room == NULL || b->n == 0)
		return;
	room = b->ops->room(b->ctx, &reserve);
	if (!on)
		reserve = 0;
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

/* Finishes the partial checksums the kernel left in the slots (b->csum),
 * before anything reads or copies the frames: the field holds the
 * pseudo-header's sum, so the sum from csum_start to the frame's end,
 * inverted, is the checksum, whatever the protocol; 0 is stored as 0xffff,
 * as the kernel's skb_checksum_help does (0 means none to UDP). The slot is
 * in this core's cache since the TAP read; the mbuf it is copied to is not. */
static void
kb_in_finish_csums(struct kb_in *b)
{
	uint16_t i;

	for (i = 0; i < b->n; i++) {
		uint32_t c = b->csum[i], start = c >> 16, at = start + (c & 0xffff);
		uint8_t *f = b->buf + (size_t)i * b->stride;
		uint16_t sum;

		if (c == 0)
			continue;
		b->csum[i] = 0;
		if (at + 2 > b->lens[i]) /* the kernel side checked it: never */
			continue;
		sum = (uint16_t)~kb_fold(kb_sum(f + start, b->lens[i] - start, 0));
		if (sum == 0)
			sum = 0xffff;
		memcpy(f + at, &sum, 2);
	}
}

void
kb_in_put(struct kb_in *b)
{
	uint16_t i, k = 0;

	b->queued = b->no_mbuf = b->ring_full = 0;
	kb_in_finish_csums(b);
	kb_sv_learn(b->buf, b->stride, b->lens, b->n);
	b->kept = b->n;
	if (!kb_in_flush(b)) {
		b->no_mbuf = b->n;
		b->n = 0;
		return;
	}
	kb_in_admit(b);
	if (b->n > 0 && kb_in_one_mbuf_each(b)) {
		/* The common case, MTU frames: one mbuf each, taken from the
		 * source in one go (and so recorded) rather than one apiece. */
		k = kb_src_take(&b->src, &b->held, b->mbufs, b->n);
		for (i = 0; i < k; i++) {
			struct rte_mbuf *m = b->mbufs[i];

			memcpy(rte_pktmbuf_mtod(m, void *), b->buf + (size_t)i * b->stride,
			       b->lens[i]);
			m->data_len = (uint16_t)b->lens[i];
			m->pkt_len = b->lens[i];
		}
		b->no_mbuf = (uint16_t)(b->n - k);
	} else {
		for (i = 0; i < b->n; i++) {
			struct rte_mbuf *m = kb_in_chain(b, b->buf + (size_t)i * b->stride, b->lens[i]);

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
	if (!kb_in_flush(b)) {
		b->no_mbuf = 1;
		return 0;
	}
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
	m = kb_in_chain(b, data, len);
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
	free(b->csum);
	free(b->mbufs);
	free(b->segs);
	free(b->own);
	free(b);
}

/* ---- The test hook (built with the kbridge_testhook tag only) ---- */

#ifdef KB_RING_TESTHOOK
#include <stdio.h>

volatile int kb_test_hold;

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
#endif

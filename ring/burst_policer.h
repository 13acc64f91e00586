/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst_policer.h: a token bucket in packets and one in bytes, for one class of
 * one queue. Pure: the caller passes the time (ns, any monotonic origin),
 * so a test drives it with a fake clock. Tokens are counted in 1e-9 units,
 * so that refilling takes a multiplication and no division; a rate of 0
 * leaves that dimension unlimited.
 */
#ifndef KB_POLICER_H
#define KB_POLICER_H

#include <stdint.h>

#define KB_NS 1000000000ULL

/* A class's rates: packets per second with a burst in packets, bytes per
 * second with a burst in bytes. 0 rates: unlimited. */
struct kb_rate {
	uint64_t pps, burst, bps, burst_bytes;
};

/*
 * A frame larger than the byte burst passes when the bucket is full and
 * leaves it in debt by the excess: the refill pays the debt before the
 * bucket holds a token again, so the long-run rate stays the configured one
 * and a big frame only waits for a full bucket. The other way, a minimum
 * burst that covers the largest frame, has no bound to name here: the burst
 * core polices what the app hands over by its mbuf chain's pkt_len, which
 * no header bounds (a 64 KiB IPv4 super-frame is 65549 bytes with its
 * Ethernet header, 65553 tagged, 65589 as IPv6, more with QinQ or IPv6
 * extension headers, and a NIC's LRO chain may be longer still), and a
 * frame one byte over any such minimum would be policed forever, as
 * 65549 bytes were under the 65536 minimum (issue 43).
 */
struct kb_bucket {
	uint64_t rate;   /* units per second; 0: unlimited */
	uint64_t cap;    /* burst * KB_NS */
	uint64_t tokens; /* in 1e-9 units */
	uint64_t debt;   /* 1e-9 units a frame larger than the burst took beyond it */
};

struct kb_policer {
	struct kb_bucket pkts, bytes;
	uint64_t last; /* ns of the last refill */
};

/* Sets p to the rates r with full buckets at time now. */
void kb_policer_init(struct kb_policer *p, const struct kb_rate *r, uint64_t now);

static inline void
kb_bucket_refill(struct kb_bucket *b, uint64_t elapsed)
{
	uint64_t add, t;

	if (__builtin_mul_overflow(elapsed, b->rate, &add))
		add = UINT64_MAX;
	if (b->debt > 0) {
		if (add < b->debt) {
			b->debt -= add;
			return;
		}
		add -= b->debt;
		b->debt = 0;
	}
	if (__builtin_add_overflow(b->tokens, add, &t) || t > b->cap)
		t = b->cap;
	b->tokens = t;
}

/* Whether b lets cost through: unlimited, enough tokens, or full (the
 * frame is larger than the burst; a bucket in debt holds no token). */
static inline int
kb_bucket_allows(const struct kb_bucket *b, uint64_t cost)
{
	return b->rate == 0 || b->tokens >= cost || b->tokens == b->cap;
}

static inline void
kb_bucket_take(struct kb_bucket *b, uint64_t cost)
{
	if (b->rate == 0)
		return;
	if (b->tokens >= cost) {
		b->tokens -= cost;
	} else {
		b->debt = cost - b->tokens;
		b->tokens = 0;
	}
}

/* Whether a frame of len bytes passes at time now; takes its tokens if so. */
static inline int
kb_policer_take(struct kb_policer *p, uint32_t len, uint64_t now)
{
	uint64_t cost = (uint64_t)len * KB_NS;

	if (now > p->last) {
		kb_bucket_refill(&p->pkts, now - p->last);
		kb_bucket_refill(&p->bytes, now - p->last);
		p->last = now;
	}
	if (!kb_bucket_allows(&p->pkts, KB_NS) || !kb_bucket_allows(&p->bytes, cost))
		return 0;
	kb_bucket_take(&p->pkts, KB_NS);
	kb_bucket_take(&p->bytes, cost);
	return 1;
}

#endif

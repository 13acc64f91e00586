/* SPDX-License-Identifier: BSD-3-Clause
 *
 * policer.h: a token bucket in packets and one in bytes, for one class of
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

struct kb_bucket {
	uint64_t rate;   /* units per second; 0: unlimited */
	uint64_t cap;    /* burst * KB_NS */
	uint64_t tokens; /* in 1e-9 units */
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

	if (__builtin_mul_overflow(elapsed, b->rate, &add) ||
	    __builtin_add_overflow(b->tokens, add, &t) || t > b->cap)
		t = b->cap;
	b->tokens = t;
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
	if ((p->pkts.rate != 0 && p->pkts.tokens < KB_NS) ||
	    (p->bytes.rate != 0 && p->bytes.tokens < cost))
		return 0;
	if (p->pkts.rate != 0)
		p->pkts.tokens -= KB_NS;
	if (p->bytes.rate != 0)
		p->bytes.tokens -= cost;
	return 1;
}

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
#include "burst_policer.h"

static void
kb_bucket_init(struct kb_bucket *b, uint64_t rate, uint64_t burst)
{
	b->rate = rate;
	b->cap = burst * KB_NS;
	b->tokens = b->cap;
	b->debt = 0;
}

void
kb_policer_init(struct kb_policer *p, const struct kb_rate *r, uint64_t now)
{
	kb_bucket_init(&p->pkts, r->pps, r->burst);
	kb_bucket_init(&p->bytes, r->bps, r->burst_bytes);
	p->last = now;
}

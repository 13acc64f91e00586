/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>

#include <rte_mbuf.h>

#include "burst_cut.h"
#include "burst_split.h"

int
kb_in_put_split(struct kb_in *b, uint8_t *data, uint32_t len)
{
	const struct kb_tso *t = &b->tso;
	struct kb_cut c = { .data = data, .hlen = (uint32_t)t->l2 + t->l3 + t->l4 };
	uint32_t admitted, k = 0, queued = 0;

	b->queued = b->no_mbuf = b->ring_full = 0;
	if (t->mss == 0 || len < c.hlen || t->l2 < 14 ||
	    t->l3 < (t->ipv6 ? 40 : 20) || t->l4 < 20)
		return -E2BIG;
	c.payload = len - c.hlen;
	c.n = c.payload == 0 ? 1 : (c.payload + t->mss - 1) / t->mss;
	if (c.hlen + RTE_MIN((uint32_t)t->mss, c.payload) > b->room || c.n > UINT16_MAX)
		return -E2BIG;
	kb_cut_start(t, &c);
	if (!kb_in_flush(b)) {
		b->no_mbuf = (uint16_t)c.n;
		return 0;
	}
	admitted = kb_in_admit_n(b, data, len, c.n);
	while (k < admitted) {
		uint16_t want = (uint16_t)RTE_MIN(admitted - k, (uint32_t)b->cap);
		/* Taken from the source, and so recorded, in one go. */
		uint16_t got = kb_src_take(&b->src, &b->held, b->mbufs, want), i;

		for (i = 0; i < got; i++) {
			struct rte_mbuf *m = b->mbufs[i];
			uint32_t n;

			n = kb_cut_segment(t, &c, k + i, rte_pktmbuf_mtod(m, uint8_t *));
			m->data_len = (uint16_t)n;
			m->pkt_len = n;
		}
		if (got > 0) {
			kb_in_hand_over(b, got);
			queued += b->queued;
		}
		k += got;
		/* What is queued stays a prefix of the segments: a dry source
		 * or a full ring ends the cut. */
		if (got < want) {
			b->no_mbuf += (uint16_t)(admitted - k);
			break;
		}
		if (b->queued < got) {
			b->ring_full += (uint16_t)(admitted - k);
			break;
		}
	}
	b->queued = (uint16_t)queued;
	return (int)queued;
}

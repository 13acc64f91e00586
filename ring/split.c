/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include <rte_byteorder.h>
#include <rte_common.h>
#include <rte_mbuf.h>

#include "csum.h"
#include "split.h"

/* The TCP flags a segment keeps only at one end of the super-frame. */
#define KB_TCP_FIN 0x01
#define KB_TCP_PSH 0x08
#define KB_TCP_CWR 0x80

/* One super-frame being cut: its lengths and, summed once from the frame,
 * what every segment's checksums start from: the pseudo-header's addresses,
 * the IPv4 header without its total length, ID and checksum, the TCP header
 * without its sequence number, flags word and checksum. */
struct kb_cut {
	const uint8_t *data;
	uint32_t hlen, payload, n;
	uint64_t addrs, ip, tcp;
	uint32_t seq;
	uint16_t id;
};

static void
kb_cut_start(const struct kb_tso *t, struct kb_cut *c)
{
	const uint8_t *ip = c->data + t->l2, *tcp = ip + t->l3;

	c->addrs = t->ipv6 ? kb_sum(ip + 8, 32, 0) : kb_sum(ip + 12, 8, 0);
	if (!t->ipv6) {
		c->ip = kb_sum(ip, t->l3, 0) + kb_unword(ip + 2) + kb_unword(ip + 4) +
			kb_unword(ip + 10);
		c->id = kb_get16(ip + 4);
	}
	c->tcp = kb_sum(tcp, t->l4, 0) + kb_unword(tcp + 4) + kb_unword(tcp + 6) +
		 kb_unword(tcp + 12) + kb_unword(tcp + 16);
	memcpy(&c->seq, tcp + 4, 4);
	c->seq = rte_be_to_cpu_32(c->seq);
}

/* Writes segment k of the cut to d, as Super.Segment does: headers
 * copied, IPv4 total length, ID + k and header checksum, IPv6 payload
 * length, sequence number + k*mss, FIN and PSH on the last segment only,
 * CWR on the first only, the full TCP checksum. Returns its length.
 *
 * d is an mbuf the app's lcore last touched, its lines in the other core's
 * cache: every store to it waits for its line. So d is only written, never
 * read back, and nothing stored since is loaded: a load that a store does
 * not forward waits for every store before it, the payload's to d included
 * (reading back a header so cost about 300 ns a 1500-byte frame on the
 * bed). The checksums are sums of the frame, taken once (kb_cut_start),
 * and of the changed fields, kept in registers; the payload is summed from
 * the frame, in this core's cache since the TAP read. */
static inline uint32_t
kb_cut_segment(const struct kb_tso *t, const struct kb_cut *c, uint32_t k, uint8_t *d)
{
	uint32_t off = k * t->mss, plen = RTE_MIN((uint32_t)t->mss, c->payload - off);
	uint32_t tcplen = t->l4 + plen, seq = rte_cpu_to_be_32(c->seq + off);
	const uint8_t *pay = c->data + c->hlen + off;
	uint8_t *ip = d + t->l2, *tcp = ip + t->l3;
	uint8_t fl;
	uint16_t v;
	uint64_t acc;

	/* The payload's sum first: loads only, ahead of the stores to d. */
	acc = kb_sum(pay, plen, c->addrs + c->tcp);
	memcpy(d, c->data, c->hlen);
	memcpy(d + c->hlen, pay, plen);
	if (t->ipv6) {
		v = rte_cpu_to_be_16((uint16_t)tcplen);
		memcpy(ip + 4, &v, 2);
	} else {
		uint16_t tl = rte_cpu_to_be_16((uint16_t)(t->l3 + tcplen));
		uint16_t id = rte_cpu_to_be_16((uint16_t)(c->id + k));

		memcpy(ip + 2, &tl, 2);
		memcpy(ip + 4, &id, 2);
		v = (uint16_t)~kb_fold(c->ip + tl + id);
		memcpy(ip + 10, &v, 2);
	}
	memcpy(tcp + 4, &seq, 4);
	fl = c->data[t->l2 + t->l3 + 13];
	if (k != c->n - 1)
		fl &= (uint8_t)~(KB_TCP_FIN | KB_TCP_PSH);
	if (k != 0)
		fl &= (uint8_t)~KB_TCP_CWR;
	tcp[13] = fl;
	/* The flags word from registers: data offset and flags. */
	acc += kb_be16(IPPROTO_TCP) + kb_be16((uint16_t)tcplen) + (seq & 0xffff) + (seq >> 16) +
	       kb_be16((uint16_t)(c->data[t->l2 + t->l3 + 12] << 8 | fl));
	v = (uint16_t)~kb_fold(acc);
	memcpy(tcp + 16, &v, 2);
	return c->hlen + plen;
}

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

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst_cut.h: TCP segmentation, the one cut kbridge makes of a TCP
 * super-frame read from the TAP into MTU frames, in C. kb_in_put_split
 * (burst_split.c) cuts with it into the app's mbufs in both modes, and the
 * floor forwarder (tests/floor) cuts with it too, so that the floor is the
 * same work without the rest of kbridge. tap/vnet's Super.Segment is the
 * fallback, for what no app side cuts (a segment larger than an mbuf).
 */
#ifndef KB_CUT_H
#define KB_CUT_H

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include <rte_byteorder.h>
#include <rte_common.h>

#include "burst.h"
#include "burst_csum.h"

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

static inline void
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

#endif

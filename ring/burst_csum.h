/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst_csum.h: Internet checksums in software, for the burst core. The sums the
 * C cut (burst_cut.h) builds each segment's checksums from, and the check of a
 * TCP frame from the app (kb_tcp_csum_good), which kb_out_describe makes
 * as kb_out_next describes a burst, on bytes it has just prefetched: in C it is about
 * 2.5 times as fast as tap/vnet's Go sum, which then has nothing to check.
 */
#ifndef KB_BURST_CSUM_H
#define KB_BURST_CSUM_H

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include <rte_byteorder.h>

/* The ones-complement sum is independent of byte order (RFC 1071 2(B)): the
 * sums below add native words and the folded result is stored as it is.
 * Eight bytes add as their two 32-bit halves into 64 bits, which cannot
 * overflow for any frame, and fold at the end. */

/* Adds p[0..n) to acc; p starts at an even offset of the summed data. Four
 * sums, 32 bytes a step. */
static inline uint64_t
kb_sum(const uint8_t *p, uint32_t n, uint64_t acc)
{
	uint64_t w0, w1, w2, w3, a = 0, b = 0, c = 0, d = 0;
	uint32_t w4;
	uint16_t h = 0;

	/* Scalars, not an array: an array is copied through the stack, and
	 * a store waits behind the copy's stores to a cold mbuf. */
	for (; n >= 32; p += 32, n -= 32) {
		memcpy(&w0, p, 8);
		memcpy(&w1, p + 8, 8);
		memcpy(&w2, p + 16, 8);
		memcpy(&w3, p + 24, 8);
		a += (w0 & 0xffffffff) + (w0 >> 32);
		b += (w1 & 0xffffffff) + (w1 >> 32);
		c += (w2 & 0xffffffff) + (w2 >> 32);
		d += (w3 & 0xffffffff) + (w3 >> 32);
	}
	acc += a + b + c + d;
	for (; n >= 8; p += 8, n -= 8) {
		memcpy(&w0, p, 8);
		acc += (w0 & 0xffffffff) + (w0 >> 32);
	}
	if (n >= 4) {
		memcpy(&w4, p, 4);
		acc += w4;
		p += 4;
		n -= 4;
	}
	if (n >= 2) {
		memcpy(&h, p, 2);
		acc += h;
		p += 2;
		n -= 2;
	}
	if (n == 1) {
		/* The odd byte is the high byte of a word padded with zero. */
		h = 0;
		memcpy(&h, p, 1);
		acc += h;
	}
	return acc;
}

static inline uint16_t
kb_fold(uint64_t acc)
{
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return (uint16_t)acc;
}

static inline uint16_t
kb_get16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return rte_be_to_cpu_16(v);
}

/* The 16-bit word at p, as kb_sum adds it. */
static inline uint64_t
kb_word(const uint8_t *p)
{
	uint16_t w;

	memcpy(&w, p, 2);
	return w;
}

/* The ones-complement negation of the word at p: adding it takes the word
 * out of a sum. */
static inline uint64_t
kb_unword(const uint8_t *p)
{
	return (uint16_t)~kb_word(p);
}

/* A 16-bit value as the word the header holds, for a sum. */
static inline uint64_t
kb_be16(uint16_t v)
{
	return rte_cpu_to_be_16(v);
}

/* Whether the single-segment frame f[0..len) is a TCP segment whose IPv4
 * header and TCP checksums are both right. It vouches only for what the
 * coalescer (tap/vnet) would check the same way: Ethernet with at most one
 * 802.1Q tag; IPv4 without options or fragmentation, or IPv6 with TCP as
 * the next header; an IP length that ends exactly at the frame's end (no
 * padding); a TCP header inside it. Anything else, a wrong checksum
 * included, returns 0 and the coalescer checks the frame as it always did,
 * and counts it there when it is bad. */
static inline int
kb_tcp_csum_good(const uint8_t *f, uint32_t len)
{
	uint32_t l2 = 14, l3, l4, iplen;
	const uint8_t *ip, *tcp;
	uint16_t et;
	uint64_t acc;

	if (len < 14 + 40)
		return 0;
	et = kb_get16(f + 12);
	if (et == 0x8100) {
		et = kb_get16(f + 16);
		l2 = 18;
	}
	ip = f + l2;
	if (et == 0x0800) {
		l3 = 20;
		if (len < l2 + l3 + 20 || ip[0] != 0x45 || ip[9] != IPPROTO_TCP ||
		    (kb_get16(ip + 6) & 0x3fff) != 0) /* MF or an offset */
			return 0;
		iplen = kb_get16(ip + 2);
		if (kb_fold(kb_sum(ip, l3, 0)) != 0xffff)
			return 0;
		acc = kb_sum(ip + 12, 8, 0);
	} else if (et == 0x86dd) {
		l3 = 40;
		if (len < l2 + l3 + 20 || ip[0] >> 4 != 6 || ip[6] != IPPROTO_TCP)
			return 0;
		iplen = l3 + kb_get16(ip + 4);
		acc = kb_sum(ip + 8, 32, 0);
	} else {
		return 0;
	}
	if (l2 + iplen != len)
		return 0;
	tcp = ip + l3;
	l4 = (uint32_t)(tcp[12] >> 4) * 4;
	if (l4 < 20 || l3 + l4 > iplen)
		return 0;
	acc += kb_be16(IPPROTO_TCP) + kb_be16((uint16_t)(iplen - l3));
	return kb_fold(kb_sum(tcp, iplen - l3, acc)) == 0xffff;
}

#endif

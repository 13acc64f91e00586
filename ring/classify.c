/* SPDX-License-Identifier: BSD-3-Clause */
#include <string.h>

#include "classify.h"

#define ET_IPV4 0x0800
#define ET_ARP 0x0806
#define ET_VLAN 0x8100
#define ET_QINQ 0x88a8
#define ET_QINQ_OLD 0x9100
#define ET_IPV6 0x86dd
#define ET_SLOW 0x8809 /* LACP, marker */
#define ET_LLDP 0x88cc

#define PROTO_TCP 6
#define PROTO_UDP 17
#define PROTO_ICMPV6 58
#define PROTO_OSPF 89
#define PROTO_VRRP 112
#define PROTO_HOPOPTS 0
#define PROTO_ROUTING 43
#define PROTO_FRAGMENT 44
#define PROTO_DSTOPTS 60

#define PORT_BGP 179

static inline uint16_t
rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline int
has16(const uint16_t *v, unsigned int n, uint16_t x)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

/* UDP destination ports of control protocols: DHCPv4 server and client,
 * DHCPv6 client and server, BFD single-hop, echo, multihop, micro-BFD. */
static inline int
udp_control(uint16_t dport)
{
	switch (dport) {
	case 67: case 68: case 546: case 547:
	case 3784: case 3785: case 4784: case 6784:
		return 1;
	}
	return 0;
}

static int
prefix_has(const struct kb_copp_prefix *px, const uint8_t *src, int v6)
{
	unsigned int full = px->len / 8, rest = px->len % 8;

	if (px->v6 != v6 || memcmp(px->addr, src, full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	return ((px->addr[full] ^ src[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

/* The class of an IP packet whose upper-layer header (protocol proto) is at
 * p[l4..len); nonfirst: a fragment other than the first, without one. */
static unsigned int
classify_l4(const uint8_t *p, uint32_t len, uint32_t l4, uint8_t proto, int nonfirst,
	    const uint8_t *src, int v6, const struct kb_copp_match *mg, uint8_t *why)
{
	uint16_t sport = 0, dport = 0;
	int ports = 0;
	unsigned int i;

	if (proto == PROTO_OSPF || proto == PROTO_VRRP)
		return KB_COPP_CONTROL;
	if (!nonfirst) {
		if (v6 && proto == PROTO_ICMPV6) {
			if (len - l4 < 1) {
				*why = KB_COPP_TRUNCATED;
				return KB_COPP_DEFAULT;
			}
			/* Router and neighbour solicitations and
			 * advertisements, redirect. */
			if (p[l4] >= 133 && p[l4] <= 137)
				return KB_COPP_NEIGHBOR;
		} else if (proto == PROTO_TCP || proto == PROTO_UDP) {
			if (len - l4 < 4) {
				*why = KB_COPP_TRUNCATED;
				return KB_COPP_DEFAULT;
			}
			sport = rd16(p + l4);
			dport = rd16(p + l4 + 2);
			ports = 1;
			if (proto == PROTO_TCP ? sport == PORT_BGP || dport == PORT_BGP :
						 udp_control(dport))
				return KB_COPP_CONTROL;
		}
	}
	if (ports && (has16(mg->ports, mg->nports, sport) || has16(mg->ports, mg->nports, dport)))
		return KB_COPP_MANAGEMENT;
	for (i = 0; i < mg->nprotos; i++)
		if (mg->protos[i] == proto)
			return KB_COPP_MANAGEMENT;
	for (i = 0; i < mg->nprefixes; i++)
		if (prefix_has(&mg->prefixes[i], src, v6))
			return KB_COPP_MANAGEMENT;
	return KB_COPP_DEFAULT;
}

static unsigned int
classify_ipv4(const uint8_t *p, uint32_t len, uint32_t off, const struct kb_copp_match *mg,
	      uint8_t *why)
{
	uint32_t ihl;

	if (len - off < 20) {
		*why = KB_COPP_TRUNCATED;
		return KB_COPP_DEFAULT;
	}
	ihl = (uint32_t)(p[off] & 0xf) * 4;
	if (p[off] >> 4 != 4 || ihl < 20) {
		*why = KB_COPP_MALFORMED;
		return KB_COPP_DEFAULT;
	}
	if (len - off < ihl) {
		*why = KB_COPP_TRUNCATED;
		return KB_COPP_DEFAULT;
	}
	return classify_l4(p, len, off + ihl, p[off + 9], (rd16(p + off + 6) & 0x1fff) != 0,
			   p + off + 12, 0, mg, why);
}

static unsigned int
classify_ipv6(const uint8_t *p, uint32_t len, uint32_t off, const struct kb_copp_match *mg,
	      uint8_t *why)
{
	uint32_t l4 = off + 40, hl;
	uint8_t nh;
	int nonfirst = 0;
	unsigned int i;

	if (len - off < 40) {
		*why = KB_COPP_TRUNCATED;
		return KB_COPP_DEFAULT;
	}
	if (p[off] >> 4 != 6) {
		*why = KB_COPP_MALFORMED;
		return KB_COPP_DEFAULT;
	}
	nh = p[off + 6];
	for (i = 0;; i++) {
		if (nh != PROTO_HOPOPTS && nh != PROTO_ROUTING && nh != PROTO_DSTOPTS &&
		    nh != PROTO_FRAGMENT)
			break;
		if (i == KB_COPP_MAX_EXT) {
			*why = KB_COPP_DEEP;
			return KB_COPP_DEFAULT;
		}
		if (len - l4 < 8) { /* every extension header is 8 bytes or more */
			*why = KB_COPP_TRUNCATED;
			return KB_COPP_DEFAULT;
		}
		if (nh == PROTO_FRAGMENT) {
			nonfirst |= (rd16(p + l4 + 2) & 0xfff8) != 0;
			hl = 8;
		} else {
			hl = ((uint32_t)p[l4 + 1] + 1) * 8;
		}
		nh = p[l4];
		if (len - l4 < hl) {
			*why = KB_COPP_TRUNCATED;
			return KB_COPP_DEFAULT;
		}
		l4 += hl;
	}
	return classify_l4(p, len, l4, nh, nonfirst, p + off + 8, 1, mg, why);
}

unsigned int
kb_classify(const uint8_t *p, uint32_t len, const struct kb_copp_match *mg, uint8_t *why)
{
	uint32_t off = 12;
	uint16_t et;
	int tags;

	*why = KB_COPP_PARSED;
	if (len < 14) {
		*why = KB_COPP_TRUNCATED;
		return KB_COPP_DEFAULT;
	}
	/* IEEE 802.1D link-local group addresses, 01-80-C2-00-00-0x: STP,
	 * LACP, LLDP, 802.1X; never forwarded by a bridge. */
	if (p[0] == 0x01 && p[1] == 0x80 && p[2] == 0xc2 && p[3] == 0 && p[4] == 0 &&
	    (p[5] & 0xf0) == 0)
		return KB_COPP_CONTROL;
	et = rd16(p + off);
	for (tags = 0; tags < 2 && (et == ET_VLAN || et == ET_QINQ || et == ET_QINQ_OLD); tags++) {
		off += 4;
		if (len < off + 2) {
			*why = KB_COPP_TRUNCATED;
			return KB_COPP_DEFAULT;
		}
		et = rd16(p + off);
	}
	off += 2;
	switch (et) {
	case ET_IPV4:
		return classify_ipv4(p, len, off, mg, why);
	case ET_IPV6:
		return classify_ipv6(p, len, off, mg, why);
	case ET_ARP:
		return KB_COPP_NEIGHBOR;
	case ET_SLOW:
	case ET_LLDP:
		return KB_COPP_CONTROL;
	}
	if (et < 0x0600) {
		/* An 802.3 length: IS-IS rides LLC with DSAP and SSAP 0xfe. */
		if (len - off < 2) {
			*why = KB_COPP_TRUNCATED;
			return KB_COPP_DEFAULT;
		}
		if (p[off] == 0xfe && p[off + 1] == 0xfe)
			return KB_COPP_CONTROL;
	}
	if (has16(mg->ethertypes, mg->nethertypes, et))
		return KB_COPP_MANAGEMENT;
	return KB_COPP_DEFAULT;
}

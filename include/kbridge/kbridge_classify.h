/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge_classify.h: the control-plane classifier. Part of kbridge.h,
 * which applications include: kbridge_to_kernel() classes a frame with it
 * only when the to_kernel ring's room is down to the reserve the control
 * plane keeps (kbridge_ring.h), and kbridge's burst core classes every
 * frame with it to police it. Pure over bytes (no DPDK): it reads the
 * Ethernet header (up to two VLAN tags), IPv4 or IPv6 (with its extension
 * headers) and the first bytes of TCP, UDP or ICMPv6, never past len, and
 * says which class a frame is in. A frame it cannot read to the end of its
 * headers is classed default and the reason is returned.
 *
 * A control class is earned by what the headers prove, never by a port
 * alone, which anyone can forge from anywhere: a routing protocol's frame
 * is classed control (bgp, bfd, control, neighbor) only when it can have
 * come from the link it arrived on alone (kbridge_on_link_: TTL or hop
 * limit 255, or an address no router forwards); link-layer frames (ARP,
 * LACP, LLDP, STP, IS-IS) cannot cross a router at all. Anything else that
 * claims a control port is classed as if it did not (default, or what the
 * management match makes it), so that a forged flood never takes a real
 * peer's bucket or reserved slot. kbridge itself also classes BGP by the
 * host's own sessions (ring/burst_sockview.h), which needs no TTL.
 */
#ifndef KBRIDGE_CLASSIFY_H
#define KBRIDGE_CLASSIFY_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The classes. Control-plane classes (kbridge_class_control) and
 * neighbour frames may take a queue's reserve (kbridge_class_reserved). */
#define KBRIDGE_CLASS_CONTROL 0    /* the rest of the control plane, proven
				    * on-link: OSPF, VRRP, DHCPv4/v6; IS-IS */
#define KBRIDGE_CLASS_NEIGHBOR 1   /* ARP; IPv6 NS/NA/RS/RA/redirect, on-link */
#define KBRIDGE_CLASS_MANAGEMENT 2 /* what the operator lists (kbridge_class_match) */
#define KBRIDGE_CLASS_DEFAULT 3
/* A TCP connection opening (SYN without ACK) that the port list would make
 * management: policed apart, so that a SYN flood to a served port cannot
 * take the established sessions' class. */
#define KBRIDGE_CLASS_MANAGEMENT_SYN 4
#define KBRIDGE_CLASS_BGP 5  /* TCP port 179 either side, on-link (GTSM) */
#define KBRIDGE_CLASS_BFD 6  /* UDP to 3784, 3785, 4784 or 6784, on-link */
#define KBRIDGE_CLASS_LINK 7 /* LACP, LLDP, STP, 802.1X: IEEE 802.1D
			      * link-local groups, slow protocols, LLDP */
/* kbridge's own, never returned here: a frame for the host's own address
 * that no socket of the host wants (ring/burst_sockview.h). */
#define KBRIDGE_CLASS_UNWANTED 8
#define KBRIDGE_CLASSES 9

/* Why a frame's headers could not be read to the end (0: they could). */
#define KBRIDGE_HDR_PARSED 0
#define KBRIDGE_HDR_TRUNCATED 1 /* a header runs past the frame (or its first segment) */
#define KBRIDGE_HDR_MALFORMED 2 /* an IP version or header length that makes no sense */
#define KBRIDGE_HDR_DEEP 3      /* more IPv6 extension headers than KBRIDGE_CLASS_MAX_EXT */
#define KBRIDGE_HDR_WHYS 4

#define KBRIDGE_CLASS_MAX_EXT 8
#define KBRIDGE_MATCH_MAX_PORTS 16
#define KBRIDGE_MATCH_MAX_ETHERTYPES 8
#define KBRIDGE_MATCH_MAX_PROTOS 8
#define KBRIDGE_MATCH_MAX_PREFIXES 16

/* A source prefix: addr's first len bits (an IPv4 address in addr[0..4)). */
struct kbridge_prefix {
	uint8_t addr[16];
	uint8_t len;
	uint8_t v6;
};

/* What makes a frame management traffic: a TCP or UDP port on either side,
 * an ethertype, an IP protocol, an IP source prefix. All zero: nothing. */
struct kbridge_class_match {
	uint16_t ports[KBRIDGE_MATCH_MAX_PORTS];
	uint16_t ethertypes[KBRIDGE_MATCH_MAX_ETHERTYPES];
	uint8_t protos[KBRIDGE_MATCH_MAX_PROTOS];
	struct kbridge_prefix prefixes[KBRIDGE_MATCH_MAX_PREFIXES];
	uint8_t nports, nethertypes, nprotos, nprefixes;
};

static inline uint16_t
kbridge_rd16_(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline int
kbridge_has16_(const uint16_t *v, unsigned int n, uint16_t x)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

/* The class of a UDP destination port of a control protocol, or -1: DHCPv4
 * server and client, DHCPv6 client and server; BFD single-hop, echo,
 * multihop, micro-BFD. */
static inline int
kbridge_udp_control_(uint16_t dport)
{
	switch (dport) {
	case 67: case 68: case 546: case 547:
		return KBRIDGE_CLASS_CONTROL;
	case 3784: case 3785: case 4784: case 6784:
		return KBRIDGE_CLASS_BFD;
	}
	return -1;
}

/* Whether the IP packet whose header is at ip (IPv6 if v6) can only have
 * come from the link it arrived on, whoever forged it: sent with TTL or hop
 * limit 255, which a router on the way would have decremented (GTSM, RFC
 * 5082; single-hop BFD, RFC 5881, VRRP, RFC 5798, and ND, RFC 4861, are
 * sent so), or to or from an address no router forwards: IPv4 224.0.0.0/24
 * (OSPF's 224.0.0.5 and .6) and 255.255.255.255 (DHCP), IPv6 link-local
 * unicast fe80::/10 either side (OSPFv3, BGP unnumbered) and link-scope
 * multicast ff02::/16. The caller has checked that the header is there. */
static inline int
kbridge_on_link_(const uint8_t *ip, int v6)
{
	if (!v6)
		return ip[8] == 255 || (ip[16] == 224 && ip[17] == 0 && ip[18] == 0) ||
		       (ip[16] == 255 && ip[17] == 255 && ip[18] == 255 && ip[19] == 255);
	return ip[7] == 255 || (ip[8] == 0xfe && (ip[9] & 0xc0) == 0x80) ||
	       (ip[24] == 0xfe && (ip[25] & 0xc0) == 0x80) || (ip[24] == 0xff && (ip[25] & 0x0f) == 2);
}

static inline int
kbridge_prefix_has_(const struct kbridge_prefix *px, const uint8_t *src, int v6)
{
	unsigned int full = px->len / 8, rest = px->len % 8;

	if (px->v6 != v6 || memcmp(px->addr, src, full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	return ((px->addr[full] ^ src[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

/* The class of an IP packet whose header is at ip and whose upper-layer
 * header (protocol proto) is at p[l4..len); nonfirst: a fragment other
 * than the first, without one; host: a frame the host itself sends, whose
 * ports alone make it control (nobody forges the host's own frames).
 * Protocols: TCP 6, UDP 17, ICMPv6 58, OSPF 89, VRRP 112; BGP is TCP 179. */
static inline unsigned int
kbridge_classify_l4_(const uint8_t *p, uint32_t len, uint32_t l4, uint8_t proto,
		     int nonfirst, const uint8_t *ip, int v6, int host,
		     const struct kbridge_class_match *mg, uint8_t *why)
{
	const uint8_t *src = ip + (v6 ? 8 : 12);
	int proven = host || kbridge_on_link_(ip, v6), c;
	uint16_t sport = 0, dport = 0;
	int ports = 0;
	unsigned int i;

	if ((proto == 89 || proto == 112) && proven)
		return KBRIDGE_CLASS_CONTROL;
	if (!nonfirst) {
		if (v6 && proto == 58) {
			if (len - l4 < 1) {
				*why = KBRIDGE_HDR_TRUNCATED;
				return KBRIDGE_CLASS_DEFAULT;
			}
			/* Router and neighbour solicitations and
			 * advertisements, redirect. */
			if (p[l4] >= 133 && p[l4] <= 137 && proven)
				return KBRIDGE_CLASS_NEIGHBOR;
		} else if (proto == 6 || proto == 17) {
			if (len - l4 < 4) {
				*why = KBRIDGE_HDR_TRUNCATED;
				return KBRIDGE_CLASS_DEFAULT;
			}
			sport = kbridge_rd16_(p + l4);
			dport = kbridge_rd16_(p + l4 + 2);
			ports = 1;
			if (proto == 6 && (sport == 179 || dport == 179) && proven)
				return KBRIDGE_CLASS_BGP;
			if (proto == 17 && (c = kbridge_udp_control_(dport)) >= 0 && proven)
				return (unsigned int)c;
		}
	}
	if (ports && (kbridge_has16_(mg->ports, mg->nports, sport) ||
		      kbridge_has16_(mg->ports, mg->nports, dport))) {
		if (proto != 6)
			return KBRIDGE_CLASS_MANAGEMENT;
		/* TCP flags are at byte 13: SYN 0x02, ACK 0x10. */
		if (len - l4 < 14) {
			*why = KBRIDGE_HDR_TRUNCATED;
			return KBRIDGE_CLASS_DEFAULT;
		}
		return (p[l4 + 13] & 0x12) == 0x02 ? KBRIDGE_CLASS_MANAGEMENT_SYN :
						     KBRIDGE_CLASS_MANAGEMENT;
	}
	for (i = 0; i < mg->nprotos; i++)
		if (mg->protos[i] == proto)
			return KBRIDGE_CLASS_MANAGEMENT;
	for (i = 0; i < mg->nprefixes; i++)
		if (kbridge_prefix_has_(&mg->prefixes[i], src, v6))
			return KBRIDGE_CLASS_MANAGEMENT;
	return KBRIDGE_CLASS_DEFAULT;
}

static inline unsigned int
kbridge_classify_ipv4_(const uint8_t *p, uint32_t len, uint32_t off, int host,
		       const struct kbridge_class_match *mg, uint8_t *why)
{
	uint32_t ihl;

	if (len - off < 20) {
		*why = KBRIDGE_HDR_TRUNCATED;
		return KBRIDGE_CLASS_DEFAULT;
	}
	ihl = (uint32_t)(p[off] & 0xf) * 4;
	if (p[off] >> 4 != 4 || ihl < 20) {
		*why = KBRIDGE_HDR_MALFORMED;
		return KBRIDGE_CLASS_DEFAULT;
	}
	if (len - off < ihl) {
		*why = KBRIDGE_HDR_TRUNCATED;
		return KBRIDGE_CLASS_DEFAULT;
	}
	return kbridge_classify_l4_(p, len, off + ihl, p[off + 9],
				    (kbridge_rd16_(p + off + 6) & 0x1fff) != 0, p + off, 0, host,
				    mg, why);
}

/* IPv6 extension headers walked: hop-by-hop 0, routing 43, fragment 44,
 * destination options 60. */
static inline unsigned int
kbridge_classify_ipv6_(const uint8_t *p, uint32_t len, uint32_t off, int host,
		       const struct kbridge_class_match *mg, uint8_t *why)
{
	uint32_t l4 = off + 40, hl;
	uint8_t nh;
	int nonfirst = 0;
	unsigned int i;

	if (len - off < 40) {
		*why = KBRIDGE_HDR_TRUNCATED;
		return KBRIDGE_CLASS_DEFAULT;
	}
	if (p[off] >> 4 != 6) {
		*why = KBRIDGE_HDR_MALFORMED;
		return KBRIDGE_CLASS_DEFAULT;
	}
	nh = p[off + 6];
	for (i = 0;; i++) {
		if (nh != 0 && nh != 43 && nh != 60 && nh != 44)
			break;
		if (i == KBRIDGE_CLASS_MAX_EXT) {
			*why = KBRIDGE_HDR_DEEP;
			return KBRIDGE_CLASS_DEFAULT;
		}
		if (len - l4 < 8) { /* every extension header is 8 bytes or more */
			*why = KBRIDGE_HDR_TRUNCATED;
			return KBRIDGE_CLASS_DEFAULT;
		}
		if (nh == 44) {
			nonfirst |= (kbridge_rd16_(p + l4 + 2) & 0xfff8) != 0;
			hl = 8;
		} else {
			hl = ((uint32_t)p[l4 + 1] + 1) * 8;
		}
		nh = p[l4];
		if (len - l4 < hl) {
			*why = KBRIDGE_HDR_TRUNCATED;
			return KBRIDGE_CLASS_DEFAULT;
		}
		l4 += hl;
	}
	return kbridge_classify_l4_(p, len, l4, nh, nonfirst, p + off, 1, host, mg, why);
}

static inline unsigned int
kbridge_classify_from_(const uint8_t *p, uint32_t len, const struct kbridge_class_match *mg,
		       uint8_t *why, int host)
{
	uint32_t off = 12;
	uint16_t et;
	int tags;

	*why = KBRIDGE_HDR_PARSED;
	if (len < 14) {
		*why = KBRIDGE_HDR_TRUNCATED;
		return KBRIDGE_CLASS_DEFAULT;
	}
	/* IEEE 802.1D link-local group addresses, 01-80-C2-00-00-0x: STP,
	 * LACP, LLDP, 802.1X; never forwarded by a bridge. */
	if (p[0] == 0x01 && p[1] == 0x80 && p[2] == 0xc2 && p[3] == 0 && p[4] == 0 &&
	    (p[5] & 0xf0) == 0)
		return KBRIDGE_CLASS_LINK;
	et = kbridge_rd16_(p + off);
	for (tags = 0; tags < 2 && (et == 0x8100 || et == 0x88a8 || et == 0x9100); tags++) {
		off += 4;
		if (len < off + 2) {
			*why = KBRIDGE_HDR_TRUNCATED;
			return KBRIDGE_CLASS_DEFAULT;
		}
		et = kbridge_rd16_(p + off);
	}
	off += 2;
	switch (et) {
	case 0x0800:
		return kbridge_classify_ipv4_(p, len, off, host, mg, why);
	case 0x86dd:
		return kbridge_classify_ipv6_(p, len, off, host, mg, why);
	case 0x0806:
		return KBRIDGE_CLASS_NEIGHBOR;
	case 0x8809:
	case 0x88cc:
		return KBRIDGE_CLASS_LINK;
	}
	if (et < 0x0600) {
		/* An 802.3 length: IS-IS rides LLC with DSAP and SSAP 0xfe. */
		if (len - off < 2) {
			*why = KBRIDGE_HDR_TRUNCATED;
			return KBRIDGE_CLASS_DEFAULT;
		}
		if (p[off] == 0xfe && p[off + 1] == 0xfe)
			return KBRIDGE_CLASS_CONTROL;
	}
	if (kbridge_has16_(mg->ethertypes, mg->nethertypes, et))
		return KBRIDGE_CLASS_MANAGEMENT;
	return KBRIDGE_CLASS_DEFAULT;
}

/* The class (KBRIDGE_CLASS_*) of the Ethernet frame p[0..len), received
 * from the wire; *why is set to a KBRIDGE_HDR_* reason. Ethertypes: IPv4
 * 0x0800, ARP 0x0806, VLAN 0x8100 and 0x88a8 and 0x9100, IPv6 0x86dd, slow
 * protocols (LACP) 0x8809, LLDP 0x88cc. */
static inline unsigned int
kbridge_classify(const uint8_t *p, uint32_t len, const struct kbridge_class_match *mg,
		 uint8_t *why)
{
	return kbridge_classify_from_(p, len, mg, why, 0);
}

/* The class of a frame the host itself sends (kbridge's reserve toward the
 * app): its ports and protocols alone make it control, since nothing on
 * the wire forged it. */
static inline unsigned int
kbridge_classify_host(const uint8_t *p, uint32_t len, const struct kbridge_class_match *mg,
		      uint8_t *why)
{
	return kbridge_classify_from_(p, len, mg, why, 1);
}

/* The slots of a ring (or vring) of that capacity kept for control and
 * neighbour frames (kbridge.h version 6): an eighth. */
#define KBRIDGE_RESERVE(capacity) ((capacity) / 8)

/* Whether class c is the control plane's: bgp, bfd, link and control. */
static inline int
kbridge_class_control(unsigned int c)
{
	return c == KBRIDGE_CLASS_CONTROL || c == KBRIDGE_CLASS_BGP || c == KBRIDGE_CLASS_BFD ||
	       c == KBRIDGE_CLASS_LINK;
}

/* Whether a frame of class c may take the room a queue reserves for the
 * control plane: control-plane and neighbour frames. */
static inline int
kbridge_class_reserved(unsigned int c)
{
	return kbridge_class_control(c) || c == KBRIDGE_CLASS_NEIGHBOR;
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_CLASSIFY_H */

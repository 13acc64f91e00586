/* SPDX-License-Identifier: BSD-3-Clause
 *
 * classify.h: the control-plane classifier of the to-kernel path. Pure over
 * bytes (no DPDK), so that package ring's Go wrapper can drive it in tests:
 * it reads the Ethernet header (up to two VLAN tags), IPv4 or IPv6 (with its
 * extension headers) and the first bytes of TCP, UDP or ICMPv6, never past
 * len, and says which class a frame is in. A frame it cannot read to the end
 * of its headers is classed default and the reason is returned.
 */
#ifndef KB_CLASSIFY_H
#define KB_CLASSIFY_H

#include <stdint.h>

/* The classes, in priority order. */
#define KB_COPP_CONTROL 0    /* routing and link protocols: BGP, BFD, OSPF, IS-IS,
			      * VRRP, LACP, LLDP, STP, DHCPv4/v6 */
#define KB_COPP_NEIGHBOR 1   /* ARP, IPv6 NS/NA/RS/RA/redirect */
#define KB_COPP_MANAGEMENT 2 /* what the operator lists (kb_copp_match) */
#define KB_COPP_DEFAULT 3
#define KB_COPP_CLASSES 4

/* Why a frame's headers could not be read to the end (0: they could). */
#define KB_COPP_PARSED 0
#define KB_COPP_TRUNCATED 1 /* a header runs past the frame (or its first segment) */
#define KB_COPP_MALFORMED 2 /* an IP version or header length that makes no sense */
#define KB_COPP_DEEP 3      /* more IPv6 extension headers than KB_COPP_MAX_EXT */
#define KB_COPP_WHYS 4

#define KB_COPP_MAX_EXT 8
#define KB_COPP_MAX_PORTS 16
#define KB_COPP_MAX_ETHERTYPES 8
#define KB_COPP_MAX_PROTOS 8
#define KB_COPP_MAX_PREFIXES 16

/* A source prefix: addr's first len bits (an IPv4 address in addr[0..4)). */
struct kb_copp_prefix {
	uint8_t addr[16];
	uint8_t len;
	uint8_t v6;
};

/* What makes a frame management traffic: a TCP or UDP port on either side,
 * an ethertype, an IP protocol, an IP source prefix. */
struct kb_copp_match {
	uint16_t ports[KB_COPP_MAX_PORTS];
	uint16_t ethertypes[KB_COPP_MAX_ETHERTYPES];
	uint8_t protos[KB_COPP_MAX_PROTOS];
	struct kb_copp_prefix prefixes[KB_COPP_MAX_PREFIXES];
	uint8_t nports, nethertypes, nprotos, nprefixes;
};

/* The class (KB_COPP_*) of the Ethernet frame p[0..len); *why is set to a
 * KB_COPP_PARSED..KB_COPP_DEEP reason. */
unsigned int kb_classify(const uint8_t *p, uint32_t len, const struct kb_copp_match *mg,
			 uint8_t *why);

#endif

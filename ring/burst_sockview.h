/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst_sockview.h: kbridge's view of the host's sockets, which the burst core
 * reads for each frame toward the kernel (kb_sv_class) without a syscall:
 *  - unwanted frames: a TCP or UDP frame for one of the host's own unicast
 *    addresses (its local routes), to a port that no socket of that
 *    protocol holds, is classed KBRIDGE_CLASS_UNWANTED. The kernel would
 *    only answer it (a RST, a port unreachable), so its class's policer
 *    may free it before the write. Frames for other addresses (forwarded,
 *    NATed on the way through) and fragments are never candidates;
 *  - BGP by session: a TCP frame of port 179 whose four-tuple is one of the
 *    host's TCP connections is classed KBRIDGE_CLASS_BGP, though it does
 *    not prove itself on-link (kbridge_classify.h): forging one takes the
 *    session's two addresses and two ports, not a port alone.
 * Go reads the host's sockets (package sockview, over NETLINK_SOCK_DIAG)
 * and publishes them here every copp.unwanted.refresh, in one call
 * (kb_sv_publish). Between two readings a socket may open: the ports the
 * host itself sends from through the TAP (kb_sv_learn, on every frame
 * toward the app) are wanted from their first frame on, so an outbound
 * connection's or query's reply can never arrive before kbridge knows its
 * port; a listening socket opened since the last reading is seen at the
 * next one, within a refresh (its frames meanwhile are unwanted: policed,
 * not dropped outright, by default). The TCP connections cost a walk of
 * the kernel's whole hash table to read, so a reading walks them only when
 * a frame since the last one suggests a connection the view lacks (a
 * segment to a port no socket holds, one of port 179 of no session it
 * lists), and at least every 10 s (package sockview); a TCP port learned
 * is kept until such a walk. While no frame toward the kernel asks for the
 * view, the writer reads less often (once a second, kb_sv_used).
 *
 * A packet socket on the interface (tcpdump, lldpd, a DHCP client) captures
 * what its classic BPF filter accepts: the view holds those filters and
 * runs them (burst_cbpf.h) on a frame it would find unwanted, which is kept if
 * one would capture it. A packet socket without a filter, or with one the
 * view cannot run, turns the judging off instead (package sockview).
 *
 * One view per process: kbridge serves one TAP interface, in one network
 * namespace, whose sockets are one table. Readers (the workers) take the
 * published view per burst (kb_sv_enter / kb_sv_leave); the one writer
 * fills the view no reader holds, then publishes it: never a lock on the
 * data path, never a frame judged on a half-written view.
 */
#ifndef KB_SOCKVIEW_H
#define KB_SOCKVIEW_H

#include <stdint.h>

#include "burst_cbpf.h"
#include "kbridge_classify.h"

#define KB_SV_WORDS (65536 / 64) /* a bitmap of the 65536 ports */
#define KB_SV_MAX_LOCAL 64       /* the host's own address prefixes, both families */
#define KB_SV_MAX_BGP 1024       /* BGP sessions looked up by four-tuple */
#define KB_SV_BGP_SLOTS 2048     /* their hash table: a power of two, half full at most */
#define KB_SV_MAX_FILTERS 8      /* packet sockets' filters run */
#define KB_SV_MAX_INSNS 128      /* instructions of one */

/* What the view classes unwanted (struct kb_sv_spec.filter): each protocol
 * is on unless something on the host takes its frames without a socket of
 * its port (a raw socket of that protocol, a packet socket on the
 * interface, NAT or IPVS: package sockview decides). */
#define KB_SV_UDP 0x1
#define KB_SV_TCP 0x2

/* Why a frame is unwanted (copp.UnwantedWhyNames). */
#define KB_SV_WHY_UDP 0
#define KB_SV_WHY_SYN 1
#define KB_SV_WHY_TCP 2
#define KB_SV_WHYS 3

/* An address prefix: addr's first len bits (IPv4 in addr[0..4)). */
struct kb_sv_prefix {
	uint8_t addr[16];
	uint8_t len;
	uint8_t v6;
};

/* One of the host's TCP connections with port 179 on one side, as the
 * host sees it: local and remote address and port. */
struct kb_sv_session {
	uint8_t laddr[16], raddr[16];
	uint16_t lport, rport;
	uint8_t v6;
	uint8_t used;
};

/* A packet socket's filter, for the frames it is bound to: proto
 * ETH_P_ALL (0x0003), ETH_P_IP or ETH_P_IPV6; dgram: a SOCK_DGRAM socket,
 * whose filter sees the frame from its network header. */
struct kb_sv_filter {
	struct kb_cbpf_insn insn[KB_SV_MAX_INSNS];
	uint16_t n;
	uint16_t proto;
	uint8_t dgram;
	uint8_t pad[3];
};

/* What Go hands kb_sv_publish: ports in use per protocol, the host's own
 * prefixes, its BGP sessions (IPv4-mapped IPv6 addresses given as IPv4),
 * which protocols to filter, and until when (ns, CLOCK_MONOTONIC) the view
 * may be used: a view not refreshed in time is not used at all. */
struct kb_sv_spec {
	const uint16_t *tcp, *udp;
	uint32_t ntcp, nudp;
	const struct kb_sv_prefix *local;
	uint32_t nlocal;
	const struct kb_sv_session *bgp;
	uint32_t nbgp;
	const struct kb_sv_filter *filters;
	uint32_t nfilters;
	uint32_t filter;
	/* The reading did not walk the TCP connections: the ports learned
	 * from TCP frames are kept until one does. */
	uint32_t keep_tcp;
	uint64_t expires;
};

struct kb_sv_view {
	uint64_t tcp[KB_SV_WORDS], udp[KB_SV_WORDS];
	struct kb_sv_prefix local[KB_SV_MAX_LOCAL];
	uint32_t nlocal, nbgp;
	uint32_t filter;
	uint32_t nfilters;
	uint64_t expires;
	struct kb_sv_session bgp[KB_SV_BGP_SLOTS];
	struct kb_sv_filter filters[KB_SV_MAX_FILTERS];
};

/* The published view for one burst of frames (NULL: none, or out of
 * date); *slot says what kb_sv_leave gives back. now: ns, CLOCK_MONOTONIC.
 * It notes that a burst wanted a view (kb_sv_used). */
const struct kb_sv_view *kb_sv_enter(uint64_t now, int *slot);
void kb_sv_leave(int slot);

/* The class of the frame whose first len bytes (of pkt_len) are at p, c
 * by its headers (kbridge_classify): KBRIDGE_CLASS_UNWANTED when no socket
 * wants it (counted in why[KB_SV_WHY_*]), KBRIDGE_CLASS_BGP when it is of a
 * BGP session of the host's, else c. v NULL: c. */
unsigned int kb_sv_class(const struct kb_sv_view *v, unsigned int c, const uint8_t *p,
			 uint32_t len, uint32_t pkt_len, uint64_t *why);

/* Marks the source ports of the n frames the host sends, at buf + i *
 * stride, lens[i] bytes each, as wanted until a reading of the host's
 * sockets begun after now has been published. */
void kb_sv_learn(const uint8_t *buf, uint32_t stride, const uint32_t *lens, uint16_t n);

/* The writer's side: one goroutine at a time. kb_sv_rotate before each
 * reading of the host's sockets: it returns 1 when a frame since the last
 * rotate would be explained by a TCP connection the view lacks (a segment
 * other than a SYN or a reset judged unwanted, or one of port 179 that is
 * no session it lists), so the reading should walk the connections.
 * kb_sv_publish with what it read (it waits for the readers of the view it
 * overwrites, a burst at most); then what was learned before the reading
 * began is forgotten (TCP's only by a reading that walked the
 * connections). kb_sv_withdraw publishes nothing: no frame is classed by
 * sockets. Return 0, or -E2BIG/-EINVAL for a spec beyond the view's bounds
 * (nothing changed). */
int kb_sv_rotate(void);
/* 1 when a burst has entered since the last call: the writer reads the
 * host's sockets less often while none does. */
int kb_sv_used(void);
int kb_sv_publish(const struct kb_sv_spec *s);
void kb_sv_withdraw(void);

#endif

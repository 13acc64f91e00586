/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <string.h>
#include <time.h>

#include <rte_common.h>

#include "burst_sockview.h"

#define KB_SV_NONE 2u

/* The process's one view. The two buffers alternate: the writer fills the
 * one readers may not be in (users[t] == 0 once active points away from
 * it), then points active at it. A reader counts itself in users[a] and
 * then checks that active is still a: if the writer moved on meanwhile it
 * backs off without reading, so it never reads a buffer being written.
 * learned[g][p]: ports the host sent from, generation g, UDP (0) or TCP (1);
 * gen's parity is the generation learners write. */
static struct {
	struct kb_sv_view view[2];
	struct {
		uint32_t n;
	} __rte_cache_aligned users[2];
	uint32_t active __rte_cache_aligned;
	uint32_t last; /* the buffer published last (the writer's own) */
	uint32_t gen __rte_cache_aligned;
	uint64_t learned[2][2][KB_SV_WORDS] __rte_cache_aligned;
	/* What the writer reads and clears at each reading, set by the
	 * workers once between two: missed, a frame that a TCP connection
	 * the view lacks would explain (kb_sv_miss: the next reading walks
	 * them); used, a burst classed by the view, or that would have been
	 * had one been in force (kb_sv_used). */
	struct {
		uint32_t missed, used;
	} note __rte_cache_aligned;
} kb_sv = { .active = KB_SV_NONE, .last = 1 };

/* One TCP or UDP frame's headers, as the view needs them. */
struct kb_sv_pkt {
	const uint8_t *src, *dst;
	uint16_t sport, dport;
	uint8_t proto; /* 6 or 17 */
	uint8_t v6;
	uint8_t flags; /* TCP's */
	uint8_t frag;  /* the first fragment of a datagram */
	uint8_t tags;  /* VLAN tags before the IP header */
	uint32_t l3;   /* the IP header's offset */
};

static inline uint16_t
kb_sv_rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Reads a TCP or UDP frame's addresses and ports, as kbridge_classify
 * walks it (up to two VLAN tags, IPv6 extension headers), never past len.
 * 0: not one, or a fragment other than the first (no ports). */
static int
kb_sv_parse(const uint8_t *p, uint32_t len, struct kb_sv_pkt *k)
{
	uint32_t off = 12, l4, ihl, hl;
	uint16_t et;
	uint8_t nh;
	int i;

	if (len < 14)
		return 0;
	et = kb_sv_rd16(p + off);
	for (i = 0; i < 2 && (et == 0x8100 || et == 0x88a8 || et == 0x9100); i++) {
		off += 4;
		if (len < off + 2)
			return 0;
		et = kb_sv_rd16(p + off);
	}
	off += 2;
	k->frag = 0;
	k->tags = (uint8_t)i;
	k->l3 = off;
	if (et == 0x0800) {
		if (len - off < 20)
			return 0;
		ihl = (uint32_t)(p[off] & 0xf) * 4;
		if (p[off] >> 4 != 4 || ihl < 20 || len - off < ihl)
			return 0;
		if (kb_sv_rd16(p + off + 6) & 0x1fff)
			return 0;
		k->frag = (p[off + 6] & 0x20) != 0;
		k->proto = p[off + 9];
		k->src = p + off + 12;
		k->dst = p + off + 16;
		k->v6 = 0;
		l4 = off + ihl;
	} else if (et == 0x86dd) {
		if (len - off < 40 || p[off] >> 4 != 6)
			return 0;
		k->src = p + off + 8;
		k->dst = p + off + 24;
		k->v6 = 1;
		nh = p[off + 6];
		l4 = off + 40;
		for (i = 0; nh == 0 || nh == 43 || nh == 60 || nh == 44; i++) {
			if (i == KBRIDGE_CLASS_MAX_EXT || len - l4 < 8)
				return 0;
			if (nh == 44) {
				if (kb_sv_rd16(p + l4 + 2) & 0xfff8)
					return 0;
				k->frag = 1;
				hl = 8;
			} else {
				hl = ((uint32_t)p[l4 + 1] + 1) * 8;
			}
			nh = p[l4];
			if (len - l4 < hl)
				return 0;
			l4 += hl;
		}
		k->proto = nh;
	} else {
		return 0;
	}
	if ((k->proto != 6 && k->proto != 17) || len - l4 < (k->proto == 6 ? 14u : 4u))
		return 0;
	k->sport = kb_sv_rd16(p + l4);
	k->dport = kb_sv_rd16(p + l4 + 2);
	k->flags = k->proto == 6 ? p[l4 + 13] : 0;
	return 1;
}

static inline int
kb_sv_prefix_has(const struct kb_sv_prefix *px, const uint8_t *a, int v6)
{
	unsigned int full = px->len / 8, rest = px->len % 8;

	if (px->v6 != v6 || memcmp(px->addr, a, full) != 0)
		return 0;
	return rest == 0 || ((px->addr[full] ^ a[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

static inline int
kb_sv_local(const struct kb_sv_view *v, const uint8_t *dst, int v6)
{
	uint32_t i;

	for (i = 0; i < v->nlocal; i++)
		if (kb_sv_prefix_has(&v->local[i], dst, v6))
			return 1;
	return 0;
}

/* Whether a socket of protocol tcp (else UDP) holds port, as last read or
 * as learned since from what the host sent. */
static inline int
kb_sv_wanted(const struct kb_sv_view *v, int tcp, uint16_t port)
{
	uint32_t w = port >> 6;
	uint64_t bit = 1ULL << (port & 63);
	uint64_t seen = (tcp ? v->tcp : v->udp)[w];

	seen |= __atomic_load_n(&kb_sv.learned[0][tcp][w], __ATOMIC_RELAXED);
	seen |= __atomic_load_n(&kb_sv.learned[1][tcp][w], __ATOMIC_RELAXED);
	return (seen & bit) != 0;
}

/* The hash slot a session's remote address and ports start at. */
static inline uint32_t
kb_sv_bgp_hash(const uint8_t *raddr, int v6, uint16_t rport, uint16_t lport)
{
	uint32_t h = (uint32_t)rport << 16 | lport, w;
	int i;

	for (i = 0; i < (v6 ? 16 : 4); i += 4) {
		memcpy(&w, raddr + i, 4);
		h ^= w;
	}
	return (h * 0x9e3779b1u) >> (32 - 11); /* KB_SV_BGP_SLOTS == 1 << 11 */
}

_Static_assert(KB_SV_BGP_SLOTS == 1 << 11, "kb_sv_bgp_hash's shift");
_Static_assert(KB_SV_BGP_SLOTS >= 2 * KB_SV_MAX_BGP, "the BGP table stays half empty");

static int
kb_sv_bgp_has(const struct kb_sv_view *v, const struct kb_sv_pkt *k)
{
	uint32_t h = kb_sv_bgp_hash(k->src, k->v6, k->sport, k->dport), n;
	size_t alen = k->v6 ? 16 : 4;

	if (v->nbgp == 0)
		return 0;
	for (n = 0; n < KB_SV_BGP_SLOTS; n++, h = (h + 1) & (KB_SV_BGP_SLOTS - 1)) {
		const struct kb_sv_session *s = &v->bgp[h];

		if (!s->used)
			return 0;
		if (s->v6 == k->v6 && s->rport == k->sport && s->lport == k->dport &&
		    memcmp(s->raddr, k->src, alen) == 0 && memcmp(s->laddr, k->dst, alen) == 0)
			return 1;
	}
	return 0;
}

const struct kb_sv_view *
kb_sv_enter(uint64_t now, int *slot)
{
	if (!__atomic_load_n(&kb_sv.note.used, __ATOMIC_RELAXED))
		__atomic_store_n(&kb_sv.note.used, 1, __ATOMIC_RELAXED);
	for (;;) {
		uint32_t a = __atomic_load_n(&kb_sv.active, __ATOMIC_SEQ_CST);

		if (a == KB_SV_NONE) {
			*slot = -1;
			return NULL;
		}
		__atomic_fetch_add(&kb_sv.users[a].n, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&kb_sv.active, __ATOMIC_SEQ_CST) == a) {
			*slot = (int)a;
			return now <= kb_sv.view[a].expires ? &kb_sv.view[a] : NULL;
		}
		__atomic_fetch_sub(&kb_sv.users[a].n, 1, __ATOMIC_SEQ_CST);
	}
}

void
kb_sv_leave(int slot)
{
	if (slot >= 0)
		__atomic_fetch_sub(&kb_sv.users[slot].n, 1, __ATOMIC_RELEASE);
}

/* Whether a packet socket's filter would capture the frame. What a filter
 * would see differently from the frame here (a chain of which only the
 * first segment is at hand; a VLAN tag, which the kernel takes off before
 * packet sockets see it) counts as captured. */
static int
kb_sv_captured(const struct kb_sv_view *v, const uint8_t *p, uint32_t len, uint32_t pkt_len,
	       const struct kb_sv_pkt *k)
{
	uint16_t proto = k->v6 ? 0x86dd : 0x0800;
	uint32_t i;

	if (len != pkt_len || k->tags != 0)
		return 1;
	for (i = 0; i < v->nfilters; i++) {
		const struct kb_sv_filter *f = &v->filters[i];

		if (f->proto != 0x0003 && f->proto != proto)
			continue;
		if (f->dgram ? kb_cbpf_run(f->insn, f->n, p + k->l3, len - k->l3) :
			       kb_cbpf_run(f->insn, f->n, p, len))
			return 1;
	}
	return 0;
}

/* Notes a frame that a TCP connection opened since the last walk would
 * explain. Read first: during a flood of such frames the line is only read
 * by the workers, written once a reading. */
static inline void
kb_sv_miss(void)
{
	if (!__atomic_load_n(&kb_sv.note.missed, __ATOMIC_RELAXED))
		__atomic_store_n(&kb_sv.note.missed, 1, __ATOMIC_RELAXED);
}

unsigned int
kb_sv_class(const struct kb_sv_view *v, unsigned int c, const uint8_t *p, uint32_t len,
	    uint32_t pkt_len, uint64_t *why)
{
	struct kb_sv_pkt k;
	int tcp;

	if (v == NULL || !kb_sv_parse(p, len, &k))
		return c;
	tcp = k.proto == 6;
	if (!k.frag && (v->filter & (tcp ? KB_SV_TCP : KB_SV_UDP)) &&
	    !kb_sv_wanted(v, tcp, k.dport) && kb_sv_local(v, k.dst, k.v6) &&
	    (v->nfilters == 0 || !kb_sv_captured(v, p, len, pkt_len, &k))) {
		unsigned int w = !tcp ? KB_SV_WHY_UDP :
				     (k.flags & 0x12) == 0x02 ? KB_SV_WHY_SYN : KB_SV_WHY_TCP;

		/* A segment other than a SYN, to a port no socket holds: of a
		 * connection opened since the last walk, or a forgery. */
		if (w == KB_SV_WHY_TCP && !(k.flags & 0x06))
			kb_sv_miss();
		why[w]++;
		return KBRIDGE_CLASS_UNWANTED;
	}
	if (tcp && c != KBRIDGE_CLASS_BGP && (k.sport == 179 || k.dport == 179)) {
		if (kb_sv_bgp_has(v, &k))
			return KBRIDGE_CLASS_BGP;
		/* A session's segment the view does not list yet: a session
		 * opens with a SYN, and a reset ends one. */
		if (!(k.flags & 0x06))
			kb_sv_miss();
	}
	return c;
}

void
kb_sv_learn(const uint8_t *buf, uint32_t stride, const uint32_t *lens, uint16_t n)
{
	/* The generation is read before the frames: a learner that still
	 * writes the old one learned from frames the kernel sent before the
	 * reading began, so their sockets are in it. */
	uint32_t g = __atomic_load_n(&kb_sv.gen, __ATOMIC_SEQ_CST) & 1;
	struct kb_sv_pkt k;
	uint16_t i;

	for (i = 0; i < n; i++) {
		uint64_t *w, bit;

		if (!kb_sv_parse(buf + (size_t)i * stride, lens[i], &k))
			continue;
		/* A reset is the kernel's answer to a segment no socket
		 * took: learning its port would let a SYN flood to a closed
		 * port open that port for itself from its first answer on.
		 * A socket that resets had sent from its port before. */
		if (k.proto == 6 && (k.flags & 0x04))
			continue;
		w = &kb_sv.learned[g][k.proto == 6][k.sport >> 6];
		bit = 1ULL << (k.sport & 63);
		/* Read first: a port in use stays set, and its line is
		 * only read by every worker, never written. */
		if (!(__atomic_load_n(w, __ATOMIC_RELAXED) & bit))
			__atomic_fetch_or(w, bit, __ATOMIC_RELAXED);
	}
}

int
kb_sv_rotate(void)
{
	/* The generation learners move to was forgotten at the last
	 * publish (or holds what a failed reading left: kept longer, never
	 * lost). */
	__atomic_fetch_add(&kb_sv.gen, 1, __ATOMIC_SEQ_CST);
	return (int)__atomic_exchange_n(&kb_sv.note.missed, 0, __ATOMIC_SEQ_CST);
}

int
kb_sv_used(void)
{
	return (int)__atomic_exchange_n(&kb_sv.note.used, 0, __ATOMIC_SEQ_CST);
}

static void
kb_sv_set(uint64_t *bits, const uint16_t *ports, uint32_t n)
{
	uint32_t i;

	memset(bits, 0, KB_SV_WORDS * sizeof(*bits));
	for (i = 0; i < n; i++)
		bits[ports[i] >> 6] |= 1ULL << (ports[i] & 63);
}

int
kb_sv_publish(const struct kb_sv_spec *s)
{
	struct timespec pause = { .tv_sec = 0, .tv_nsec = 20 * 1000 };
	uint32_t t = kb_sv.last ^ 1, i, g;
	struct kb_sv_view *v = &kb_sv.view[t];

	if (s->nlocal > KB_SV_MAX_LOCAL || s->nbgp > KB_SV_MAX_BGP || s->nfilters > KB_SV_MAX_FILTERS)
		return -E2BIG;
	for (i = 0; i < s->nfilters; i++)
		if (s->filters[i].n == 0 || s->filters[i].n > KB_SV_MAX_INSNS)
			return -EINVAL;
	for (i = 0; i < s->nlocal; i++)
		if (s->local[i].len > (s->local[i].v6 ? 128 : 32))
			return -EINVAL;
	/* Readers that took this buffer before it was last replaced finish
	 * their burst first. */
	while (__atomic_load_n(&kb_sv.users[t].n, __ATOMIC_SEQ_CST) != 0)
		nanosleep(&pause, NULL);
	kb_sv_set(v->tcp, s->tcp, s->ntcp);
	kb_sv_set(v->udp, s->udp, s->nudp);
	memcpy(v->local, s->local, (size_t)s->nlocal * sizeof(*v->local));
	v->nlocal = s->nlocal;
	memset(v->bgp, 0, sizeof(v->bgp));
	for (i = 0; i < s->nbgp; i++) {
		const struct kb_sv_session *b = &s->bgp[i];
		uint32_t h = kb_sv_bgp_hash(b->raddr, b->v6, b->rport, b->lport);

		while (v->bgp[h].used)
			h = (h + 1) & (KB_SV_BGP_SLOTS - 1);
		v->bgp[h] = *b;
		v->bgp[h].used = 1;
	}
	v->nbgp = s->nbgp;
	memcpy(v->filters, s->filters, (size_t)s->nfilters * sizeof(*v->filters));
	v->nfilters = s->nfilters;
	v->filter = s->filter;
	v->expires = s->expires;
	__atomic_store_n(&kb_sv.active, t, __ATOMIC_SEQ_CST);
	kb_sv.last = t;
	/* The reading began after the last rotate: what was learned in the
	 * generation before it is in the view now, if its socket lives;
	 * but a TCP connection only if the reading walked them: else its
	 * port moves on to the generation learners write now. */
	g = (__atomic_load_n(&kb_sv.gen, __ATOMIC_SEQ_CST) - 1) & 1;
	for (i = 0; i < 2 * KB_SV_WORDS; i++) {
		uint32_t tcp = i / KB_SV_WORDS, w = i % KB_SV_WORDS;
		uint64_t *old = &kb_sv.learned[g][tcp][w];

		if (tcp && s->keep_tcp && __atomic_load_n(old, __ATOMIC_RELAXED) != 0)
			__atomic_fetch_or(&kb_sv.learned[g ^ 1][tcp][w],
					  __atomic_load_n(old, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
		__atomic_store_n(old, 0, __ATOMIC_RELAXED);
	}
	return 0;
}

void
kb_sv_withdraw(void)
{
	__atomic_store_n(&kb_sv.active, KB_SV_NONE, __ATOMIC_SEQ_CST);
}

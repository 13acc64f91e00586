//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * kbridge XDP programs.
 *
 * kbridge_steer runs on the NIC. A frame that matches a fast-path rule goes
 * to the AF_XDP socket bound to its rx queue (xsks_map); every other frame is
 * redirected into the exception veth, whose peer is kb0, so the kernel stack
 * sees it as if it had arrived on kb0.
 *
 * kbridge_return runs on the outer exception veth end: whatever the kernel
 * transmits on kb0 arrives there and is redirected out of the NIC.
 *
 * kbridge_pass only returns XDP_PASS. kbridge attaches it to kb0 when asked
 * to give kb0 NAPI that way instead of GRO, and it is the "bare XDP_PASS"
 * reference in the cost measurements.
 *
 * kbridge_steer must stay the first program in this file: DPDK's net_af_xdp
 * (xdp_prog=FILE) attaches the first program of the object it is given.
 *
 * Every map is pinned by name so that a second loader of this object (the
 * PMD's libbpf) reuses kbridge's maps instead of creating its own.
 */
#include "kbridge_bpf.h"

#define KB_MAX_RULES 64
#define KB_MAX_QUEUES 256
#define KB_MAX_EXT_HDRS 4

/* Which fields of a kb_rule take part in the match. */
enum kb_match {
	KB_MATCH_PROTO = 1 << 0,
	KB_MATCH_PORTS = 1 << 1,
	KB_MATCH_DST = 1 << 2,
	KB_MATCH_MAC = 1 << 3,
};

/* What to do with a fast-path frame when no AF_XDP socket is bound. */
enum kb_fallback {
	KB_FALLBACK_EXCEPTION = 0,
	KB_FALLBACK_DROP = 1,
	KB_FALLBACK_PASS = 2,
};

/* Index into the stats map. Each frame is counted under exactly one of
 * FAST_PATH, EXCEPTION, RETURNED, PASS, DROP, ABORTED; PARSE_ERROR and
 * XSK_MISS are reasons counted in addition to the action taken. */
enum kb_stat {
	KB_STAT_FAST_PATH = 0,
	KB_STAT_EXCEPTION,
	KB_STAT_RETURNED,
	KB_STAT_PASS,
	KB_STAT_DROP,
	KB_STAT_ABORTED,
	KB_STAT_PARSE_ERROR,
	KB_STAT_XSK_MISS,
	KB_STAT_MAX,
};

struct kb_rule {
	enum kb_match match; /* bits; an enum so bpf2go emits the names */
	__u16 port_lo; /* host order, inclusive */
	__u16 port_hi;
	__u64 dmac;    /* 48-bit destination MAC, first octet most significant */
	__u8 proto;    /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 family;   /* 4 or 6, for KB_MATCH_DST */
	__u8 pad[6];
	__be32 addr[4]; /* network order, already masked */
	__be32 mask[4]; /* network order; IPv4 uses word 0 only */
};

/* One array entry holds the whole configuration: one lookup per frame, and
 * Go replaces it with a single map update.
 *
 * The redirect targets are plain ifindexes for bpf_redirect(), not DEVMAPs:
 * the kernel reports every DEVMAP with BPF_F_RDONLY_PROG set although it
 * refuses that flag at creation, so older libbpf (1.1 in Debian 12, which
 * DPDK 22.11 uses) refuses to reuse a pinned DEVMAP ("parameter mismatch"),
 * while recent libbpf, which masks the flag, refuses the workaround of
 * declaring it. bpf_redirect() uses the same per-CPU bulk queues as a
 * DEVMAP redirect. */
struct kb_config {
	__u32 nrules;
	enum kb_fallback fallback;
	__u32 exception_ifindex; /* outer end of the exception veth */
	__u32 egress_ifindex;    /* the NIC */
	struct kb_rule rules[KB_MAX_RULES];
};

struct kb_counter {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, KB_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xsks_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kb_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} steer_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KB_STAT_MAX);
	__type(key, enum kb_stat); /* enum keys put the names into BTF for bpf2go */
	__type(value, struct kb_counter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stats SEC(".maps");

/* What the classifier needs to know about one frame. */
struct kb_pkt {
	__u64 dmac;
	__be32 daddr[4];
	__u16 dport;
	__u8 family;
	__u8 l4proto;
	__u8 has_ports;
};

static __always_inline void count(enum kb_stat idx, __u64 len)
{
	struct kb_counter *c = bpf_map_lookup_elem(&stats, &idx);

	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

/* Byte loads keep the parser free of alignment assumptions. */
static __always_inline __u16 load_be16(const __u8 *p)
{
	return ((__u16)p[0] << 8) | p[1];
}

static __always_inline int parse_ports(__u8 *l4, void *end, struct kb_pkt *p)
{
	if (p->l4proto != IPPROTO_TCP && p->l4proto != IPPROTO_UDP)
		return 0;
	if ((void *)(l4 + 4) > end)
		return -1;
	p->dport = load_be16(l4 + 2);
	p->has_ports = 1;
	return 0;
}

static __always_inline int parse_ipv4(__u8 *ip, void *end, struct kb_pkt *p)
{
	__u32 ihl;

	if ((void *)(ip + 20) > end)
		return -1;
	ihl = ip[0] & 0x0f;
	if ((ip[0] >> 4) != 4 || ihl < 5)
		return -1;
	p->family = 4;
	p->daddr[0] = *(__be32 *)(ip + 16);
	p->l4proto = ip[9];
	/* Only the first fragment carries ports. Rather than steer the first
	 * fragment one way and the rest the other, no fragment matches a port
	 * rule: the whole datagram goes to the kernel, which reassembles it. */
	if (load_be16(ip + 6) & 0x3fff)
		return 0;
	return parse_ports(ip + ihl * 4, end, p);
}

static __always_inline int parse_ipv6(__u8 *ip6, void *end, struct kb_pkt *p)
{
	__u8 *cur = ip6 + 40;
	__u8 nh;
	int i;

	if ((void *)(ip6 + 40) > end)
		return -1;
	if ((ip6[0] >> 4) != 6)
		return -1;
	p->family = 6;
	p->daddr[0] = *(__be32 *)(ip6 + 24);
	p->daddr[1] = *(__be32 *)(ip6 + 28);
	p->daddr[2] = *(__be32 *)(ip6 + 32);
	p->daddr[3] = *(__be32 *)(ip6 + 36);
	nh = ip6[6];

	/* Skip a few common extension headers; anything deeper is left to the
	 * kernel (the frame then matches no port rule). */
#pragma unroll
	for (i = 0; i < KB_MAX_EXT_HDRS; i++) {
		if (nh != IPPROTO_HOPOPTS && nh != IPPROTO_ROUTING &&
		    nh != IPPROTO_DSTOPTS)
			break;
		if ((void *)(cur + 2) > end)
			return -1;
		nh = cur[0];
		cur += ((__u32)cur[1] + 1) * 8;
	}
	if (nh == IPPROTO_FRAGMENT) {
		/* Same policy as IPv4 fragments: protocol known, ports not. */
		if ((void *)(cur + 8) > end)
			return -1;
		p->l4proto = cur[0];
		return 0;
	}
	p->l4proto = nh;
	return parse_ports(cur, end, p);
}

static __always_inline int parse(void *data, void *end, struct kb_pkt *p)
{
	__u8 *eth = data;
	__u8 *l3 = eth + 14;
	__u16 proto;

	if ((void *)(eth + 14) > end)
		return -1;
	p->dmac = ((__u64)eth[0] << 40) | ((__u64)eth[1] << 32) |
		  ((__u64)eth[2] << 24) | ((__u64)eth[3] << 16) |
		  ((__u64)eth[4] << 8) | (__u64)eth[5];
	proto = load_be16(eth + 12);
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		if ((void *)(l3 + 4) > end)
			return -1;
		proto = load_be16(l3 + 2);
		l3 += 4;
	}
	if (proto == ETH_P_IP)
		return parse_ipv4(l3, end, p);
	if (proto == ETH_P_IPV6)
		return parse_ipv6(l3, end, p);
	return 0; /* ARP and friends: only MAC rules can match */
}

static __always_inline int rule_match(const struct kb_rule *r,
				      const struct kb_pkt *p)
{
	if ((r->match & KB_MATCH_MAC) && r->dmac != p->dmac)
		return 0;
	if (r->match & KB_MATCH_DST) {
		if (r->family != p->family)
			return 0;
		if ((p->daddr[0] & r->mask[0]) != r->addr[0])
			return 0;
		if (p->family == 6 &&
		    (((p->daddr[1] & r->mask[1]) != r->addr[1]) ||
		     ((p->daddr[2] & r->mask[2]) != r->addr[2]) ||
		     ((p->daddr[3] & r->mask[3]) != r->addr[3])))
			return 0;
	}
	if ((r->match & KB_MATCH_PROTO) && r->proto != p->l4proto)
		return 0;
	if (r->match & KB_MATCH_PORTS) {
		if (!p->has_ports || p->dport < r->port_lo ||
		    p->dport > r->port_hi)
			return 0;
	}
	return 1;
}

static __always_inline int is_fast_path(const struct kb_config *cfg,
					const struct kb_pkt *p)
{
	__u32 n = cfg->nrules;
	__u32 i;

	for (i = 0; i < KB_MAX_RULES; i++) {
		if (i >= n)
			break;
		if (rule_match(&cfg->rules[i], p))
			return 1;
	}
	return 0;
}

static __always_inline int redirect(__u32 ifindex, enum kb_stat ok, __u64 len)
{
	/* bpf_redirect() only fails on bad flags. A target of 0 means Go has
	 * not filled the config yet: count a drop rather than redirect blind. */
	if (ifindex && bpf_redirect(ifindex, 0) == XDP_REDIRECT) {
		count(ok, len);
		return XDP_REDIRECT;
	}
	count(KB_STAT_DROP, len);
	return XDP_DROP;
}

static __always_inline int to_exception(const struct kb_config *cfg, __u64 len)
{
	return redirect(cfg->exception_ifindex, KB_STAT_EXCEPTION, len);
}

SEC("xdp")
int kbridge_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 len = end - data;
	struct kb_config *cfg;
	struct kb_pkt p = {};
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&steer_config, &zero);
	if (!cfg) {
		count(KB_STAT_ABORTED, len);
		return XDP_ABORTED;
	}
	if (parse(data, end, &p) < 0) {
		/* Let the kernel see (and account for) what we cannot parse. */
		count(KB_STAT_PARSE_ERROR, len);
		return to_exception(cfg, len);
	}
	if (!is_fast_path(cfg, &p))
		return to_exception(cfg, len);

	/* XDP_PASS is only a marker for "no socket on this queue". */
	if (bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS) ==
	    XDP_REDIRECT) {
		count(KB_STAT_FAST_PATH, len);
		return XDP_REDIRECT;
	}
	count(KB_STAT_XSK_MISS, len);
	switch (cfg->fallback) {
	case KB_FALLBACK_DROP:
		count(KB_STAT_DROP, len);
		return XDP_DROP;
	case KB_FALLBACK_PASS:
		count(KB_STAT_PASS, len);
		return XDP_PASS;
	default:
		return to_exception(cfg, len);
	}
}

SEC("xdp")
int kbridge_return(struct xdp_md *ctx)
{
	__u64 len = (void *)(long)ctx->data_end - (void *)(long)ctx->data;
	struct kb_config *cfg;
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&steer_config, &zero);
	if (!cfg) {
		count(KB_STAT_ABORTED, len);
		return XDP_ABORTED;
	}
	return redirect(cfg->egress_ifindex, KB_STAT_RETURNED, len);
}

SEC("xdp")
int kbridge_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";

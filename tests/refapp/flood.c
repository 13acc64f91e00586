/* SPDX-License-Identifier: BSD-3-Clause */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_arp.h>
#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include "flood.h"

enum { F_UDP, F_SYN, F_SYN22, F_BGP, F_ARP, F_KINDS };
static const char *const kind_names[F_KINDS] = { "udp", "syn", "syn22", "bgp", "arp" };

#define FRAME_LEN 60
/* Credit kept when the lcore falls behind: 10 ms of a kind's rate, so
 * that a stall does not turn into a burst the rate never asked for. */
#define CREDIT_MS 10

struct flood {
	const char *path;
	struct rte_mempool *mp;
	struct rte_ether_addr dst, src;
	uint32_t from, to; /* network order */
	uint64_t pps[F_KINDS];
	double credit[F_KINDS];
	uint64_t last; /* TSC of the last burst */
	uint64_t made[F_KINDS], queued[F_KINDS];
	uint32_t seq;
	unsigned int next, last_kind;
};

static volatile sig_atomic_t flood_reread;

static void
on_usr2(int sig)
{
	(void)sig;
	flood_reread = 1;
}

/* Reads the spec file: "KIND=PPS", "from=IP", "to=IP" words. */
static int
flood_load(struct flood *f)
{
	char buf[4096], *save = NULL, *w;
	uint64_t pps[F_KINDS] = { 0 };
	uint32_t from = f->from, to = f->to;
	FILE *fp = fopen(f->path, "r");
	size_t n;
	unsigned int k;

	if (fp == NULL) {
		fprintf(stderr, "kbridge-refapp: --flood %s: %s\n", f->path, strerror(errno));
		return -1;
	}
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	for (w = strtok_r(buf, " \t\n,", &save); w != NULL; w = strtok_r(NULL, " \t\n,", &save)) {
		char *eq = strchr(w, '='), *end;
		unsigned long long v;
		struct in_addr a;

		if (eq == NULL)
			goto bad;
		*eq = '\0';
		if (strcmp(w, "mac") == 0) {
			if (rte_ether_unformat_addr(eq + 1, &f->dst) != 0)
				goto bad;
			continue;
		}
		if (strcmp(w, "from") == 0 || strcmp(w, "to") == 0) {
			if (inet_pton(AF_INET, eq + 1, &a) != 1)
				goto bad;
			*(w[0] == 'f' ? &from : &to) = a.s_addr;
			continue;
		}
		for (k = 0; k < F_KINDS && strcmp(w, kind_names[k]) != 0; k++)
			;
		v = strtoull(eq + 1, &end, 10);
		if (k == F_KINDS || *end != '\0' || end == eq + 1 || v > 100000000ULL)
			goto bad;
		pps[k] = v;
	}
	memcpy(f->pps, pps, sizeof(pps));
	memset(f->credit, 0, sizeof(f->credit));
	f->from = from;
	f->to = to;
	f->last = rte_rdtsc();
	printf("kbridge-refapp: flood set");
	for (k = 0; k < F_KINDS; k++)
		printf(" %s=%" PRIu64, kind_names[k], f->pps[k]);
	printf("\n");
	fflush(stdout);
	return 0;
bad:
	fprintf(stderr, "kbridge-refapp: --flood %s: %s is not KIND=PPS (udp, syn, syn22, bgp, arp; up to 100000000), "
		"from=IPv4, to=IPv4 or mac=MAC\n", f->path, w);
	return -1;
}

struct flood *
flood_new(const char *path, struct rte_mempool *mp, const struct rte_ether_addr *dst)
{
	struct flood *f = calloc(1, sizeof(*f));
	struct sigaction sa;

	if (f == NULL)
		return NULL;
	f->path = path;
	f->mp = mp;
	f->dst = *dst;
	f->src = (struct rte_ether_addr){ { 0x02, 0, 0, 0, 0xf1, 0x00 } };
	f->from = htonl(0xc6120001); /* 198.18.0.1 */
	f->to = htonl(0xc6120002);   /* 198.18.0.2 */
	if (flood_load(f) < 0) {
		free(f);
		return NULL;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr2;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
	return f;
}

/* Writes an IPv4 header of protocol proto and total length len, TTL 64,
 * with its checksum. */
static void
put_ipv4(const struct flood *f, struct rte_ipv4_hdr *ip, uint8_t proto, uint16_t len)
{
	memset(ip, 0, sizeof(*ip));
	ip->version_ihl = 0x45;
	ip->total_length = rte_cpu_to_be_16(len);
	ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
	ip->time_to_live = 64;
	ip->next_proto_id = proto;
	ip->src_addr = f->from;
	ip->dst_addr = f->to;
	ip->hdr_checksum = rte_ipv4_cksum(ip);
}

/* Fills m with frame i of kind k. */
static void
build(struct flood *f, unsigned int k, struct rte_mbuf *m, uint32_t i)
{
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, FRAME_LEN);
	struct rte_ether_hdr *eth = (struct rte_ether_hdr *)p;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	uint16_t sport = (uint16_t)(1024 + i % 60000);

	memset(p, 0, FRAME_LEN);
	eth->src_addr = f->src;
	eth->dst_addr = f->dst;
	eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	switch (k) {
	case F_UDP: {
		struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
		uint16_t ulen = FRAME_LEN - sizeof(*eth) - sizeof(*ip);

		put_ipv4(f, ip, IPPROTO_UDP, (uint16_t)(sizeof(*ip) + ulen));
		u->src_port = rte_cpu_to_be_16(sport);
		u->dst_port = rte_cpu_to_be_16(9);
		u->dgram_len = rte_cpu_to_be_16(ulen);
		u->dgram_cksum = rte_ipv4_udptcp_cksum(ip, u);
		break;
	}
	case F_SYN:
	case F_SYN22:
	case F_BGP: {
		struct rte_tcp_hdr *t = (struct rte_tcp_hdr *)(ip + 1);

		put_ipv4(f, ip, IPPROTO_TCP, sizeof(*ip) + sizeof(*t));
		t->src_port = rte_cpu_to_be_16(k == F_BGP ? 179 : sport);
		t->dst_port = rte_cpu_to_be_16(k == F_SYN22 ? 22 : 80);
		t->sent_seq = rte_cpu_to_be_32(i * 2654435761u);
		t->data_off = 5 << 4;
		t->tcp_flags = RTE_TCP_SYN_FLAG;
		t->rx_win = rte_cpu_to_be_16(64240);
		t->cksum = rte_ipv4_udptcp_cksum(ip, t);
		break;
	}
	case F_ARP: {
		struct rte_arp_hdr *a = (struct rte_arp_hdr *)(eth + 1);

		memset(&eth->dst_addr, 0xff, sizeof(eth->dst_addr));
		eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
		a->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
		a->arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
		a->arp_hlen = RTE_ETHER_ADDR_LEN;
		a->arp_plen = 4;
		a->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REQUEST);
		a->arp_data.arp_sha = f->src;
		a->arp_data.arp_sha.addr_bytes[5] = (uint8_t)(64 + i % 64);
		/* The host's subnet, .64 to .127: no real neighbour. */
		a->arp_data.arp_sip = (f->to & htonl(0xffffff00)) | htonl(64 + i % 64);
		a->arp_data.arp_tip = f->to;
		break;
	}
	}
}

uint16_t
flood_burst(struct flood *f, struct rte_mbuf **m, uint16_t max)
{
	uint64_t now = rte_rdtsc(), hz = rte_get_tsc_hz();
	double elapsed;
	unsigned int j, k;
	uint16_t n, i;

	if (flood_reread) {
		flood_reread = 0;
		flood_load(f);
	}
	elapsed = (double)(now - f->last) / (double)hz;
	f->last = now;
	for (k = 0; k < F_KINDS; k++) {
		double cap = (double)f->pps[k] * CREDIT_MS / 1000 + max;

		if (f->pps[k] == 0)
			continue;
		f->credit[k] += elapsed * (double)f->pps[k];
		if (f->credit[k] > cap)
			f->credit[k] = cap;
	}
	/* One kind a burst, in turns: kbridge_to_kernel() may keep part of
	 * a burst, and its kind is then the burst's. */
	for (j = 0; j < F_KINDS; j++) {
		k = (f->next + j) % F_KINDS;
		if (f->credit[k] >= 1)
			break;
	}
	if (j == F_KINDS)
		return 0;
	f->next = k + 1;
	n = f->credit[k] < max ? (uint16_t)f->credit[k] : max;
	if (rte_pktmbuf_alloc_bulk(f->mp, m, n) != 0)
		return 0;
	for (i = 0; i < n; i++)
		build(f, k, m[i], f->seq++);
	f->credit[k] -= n;
	f->made[k] += n;
	f->last_kind = k;
	return n;
}

void
flood_took(struct flood *f, uint16_t queued)
{
	f->queued[f->last_kind] += queued;
}

void
flood_print(const struct flood *f)
{
	unsigned int k;

	printf("kbridge-refapp: flood");
	for (k = 0; k < F_KINDS; k++)
		printf(" %s=%" PRIu64 "/%" PRIu64, kind_names[k], f->made[k], f->queued[k]);
	printf("\n");
	fflush(stdout);
}

void
flood_free(struct flood *f)
{
	free(f);
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge-floor: the least a forwarder between kbridge.h's rings and a TAP
 * must do, written plainly, to measure kbridge against (docs/BENCHMARKS.md,
 * tests/testbed/floor-cost.sh).
 * Not part of kbridge: one port, one queue, IPv4 and IPv6 TCP on untagged
 * Ethernet, no policy, no counters beyond a line at exit, no crash recovery.
 * Its mbufs come and go as kbridge's do: off the app's fresh ring and onto
 * its spent ring (kbridge.h version 7), or from and to the app's pool for
 * an older app.
 *
 * App to kernel: dequeue a burst of the app's mbufs; for each TCP segment
 * that could be merged, trust RTE_MBUF_F_RX_L4_CKSUM_GOOD or verify the IPv4
 * header and TCP checksums (as kbridge does); merge consecutive segments of
 * one flow into one virtio-net GSO super-frame (a patched header copy, then
 * each segment's payload) and writev it; write everything else alone; free
 * the burst. Kernel to app: read frames, finish a partial checksum, cut a
 * TCP super-frame into MTU frames straight into fresh mbufs (headers and
 * checksums as the kernel's segmentation makes them), enqueue them.
 * Between bursts it parks in epoll on the TAP and an eventfd the app kicks
 * (the need_wakeup handshake of kbridge_ring.h), after every empty poll: the
 * behaviour of kbridge's policy.mode interrupt.
 *
 * It runs where the test bed runs kbridge (KBT_KBRIDGE=bin/kbridge-floor):
 * "kbridge-floor run --config FILE" reads dpdk.file_prefix, port,
 * interface.name, interface.mtu and interface.addresses from kbridge's
 * configuration file and ignores the rest. KBF_STEPS=1 times its steps with
 * the TSC and prints ns per frame for each at exit.
 */
#define _GNU_SOURCE /* sched_getaffinity */
/* rte_ipv4/6_udptcp_cksum_verify are experimental in DPDK 22.11. */
#define ALLOW_EXPERIMENTAL_API
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_tcp.h>

#include "kbridge.h"
#include "burst_cut.h"
#include "burst_prefetch.h"

#define BURST 32
#define MAX_MERGE 64 /* packets in one super-frame, as kbridge's coalescer */
#define MAX_SPLIT 64 /* frames one 64 KiB super-frame is cut into, at most */
#define ETH_LEN 14
#define VNET_LEN ((int)sizeof(struct virtio_net_hdr))
#define MAX_HDR (ETH_LEN + 40 + 60)

static volatile sig_atomic_t stop;

static struct {
	char prefix[64], port[KBRIDGE_NAME_MAX + 1], iface[IFNAMSIZ];
	int mtu;
	char addrs[512]; /* space-separated */
} cfg = { "kbt", "kb0", "kb0", 1500, "" };

static struct kbridge_ctl *ctl;
static struct rte_ring *tk, *fk;
static struct rte_ring *fresh, *spent; /* version 7; else the pool */
static struct rte_mempool *pool;
static int tap, efd;
static uint32_t room; /* data room of one mbuf */

static struct {
	uint64_t to_kernel, writes, from_kernel, reads, parks, wakeups, dropped;
} st;

/* KBF_STEPS: TSC cycles per step, and frames each way. */
enum { S_DEQ, S_CHECK, S_WRITEV, S_FREE, S_READ, S_SPLIT, S_ENQ, S_PARK, S_N };
static const char *const step_name[S_N] = {
	"dequeue", "parse+verify+merge", "writev", "free", "read", "alloc+copy+split", "enqueue", "park",
};
static int steps;
static uint64_t step_tsc[S_N];
#define STEP(s, t0)                                        \
	do {                                               \
		if (steps) {                               \
			uint64_t now_ = rte_rdtsc();       \
			step_tsc[s] += now_ - (t0);        \
			(t0) = now_;                       \
		}                                          \
	} while (0)

static void
die(const char *what, int err)
{
	fprintf(stderr, "kbridge-floor: %s: %s\n", what, strerror(err));
	exit(1);
}

/* ---- configuration: the few keys of kbridge's file the floor needs ---- */

static void
value(const char *line, const char *key, char *dst, size_t len)
{
	size_t k = strlen(key);
	const char *v;

	if (strncmp(line, key, k) != 0)
		return;
	for (v = line + k; *v == ' '; v++)
		;
	snprintf(dst, len, "%s", v);
	dst[strcspn(dst, " #\n")] = '\0';
}

static void
read_config(const char *path)
{
	char line[512], mtu[16] = "", *s, *p;
	int in_iface = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		die(path, errno);
	while (fgets(line, sizeof(line), f) != NULL) {
		if (line[0] != ' ' && line[0] != '#')
			in_iface = strncmp(line, "interface:", 10) == 0;
		for (s = line; *s == ' '; s++)
			;
		value(s, "file_prefix:", cfg.prefix, sizeof(cfg.prefix));
		if (s == line)
			value(s, "port:", cfg.port, sizeof(cfg.port));
		if (!in_iface)
			continue;
		value(s, "name:", cfg.iface, sizeof(cfg.iface));
		value(s, "mtu:", mtu, sizeof(mtu));
		if (strncmp(s, "addresses:", 10) == 0) {
			/* addresses: [a/n, b/n] */
			snprintf(cfg.addrs, sizeof(cfg.addrs), "%s", s + 10);
			for (p = cfg.addrs; *p != '\0'; p++)
				if (*p == '[' || *p == ']' || *p == ',' || *p == '\n')
					*p = ' ';
		}
	}
	fclose(f);
	if (mtu[0] != '\0')
		cfg.mtu = atoi(mtu);
}

/* ---- the TAP ---- */

static void
open_tap(void)
{
	struct ifreq ifr = { 0 };
	int hdr = VNET_LEN;

	tap = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (tap < 0)
		die("/dev/net/tun", errno);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", cfg.iface);
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | IFF_MULTI_QUEUE;
	if (ioctl(tap, TUNSETIFF, &ifr) < 0)
		die("TUNSETIFF", errno);
	if (ioctl(tap, TUNSETVNETHDRSZ, &hdr) < 0)
		die("TUNSETVNETHDRSZ", errno);
	if (ioctl(tap, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) < 0)
		die("TUNSETOFFLOAD", errno);
}

/* The interface as kbridge makes it: the app's MAC, the MTU, the addresses
 * (IPv6 without DAD), up. With ip(8): the floor is no netlink client. */
static void
configure_iface(void)
{
	char cmd[1024], a[128];
	const char *p = cfg.addrs;
	int n, off;

	off = snprintf(cmd, sizeof(cmd), "ip link set dev %s mtu %d", cfg.iface, cfg.mtu);
	if (ctl->version >= 5 && ctl->app_mac_set) {
		const uint8_t *m = ctl->app_mac;

		off += snprintf(cmd + off, sizeof(cmd) - off,
				" address %02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
	}
	off += snprintf(cmd + off, sizeof(cmd) - off, " up");
	while (sscanf(p, "%127s%n", a, &n) == 1) {
		off += snprintf(cmd + off, sizeof(cmd) - off, " && ip addr add %s dev %s%s", a,
				cfg.iface, strchr(a, ':') != NULL ? " nodad" : "");
		p += n;
	}
	if (system(cmd) != 0) {
		fprintf(stderr, "kbridge-floor: %s: failed\n", cmd);
		exit(1);
	}
}

/* ---- the port: a DPDK secondary that claims it and hands over its eventfd ---- */

static void
open_port(void)
{
	char name[RTE_MEMZONE_NAMESIZE];
	const struct rte_memzone *mz;

	snprintf(name, sizeof(name), KBRIDGE_MZ_PREFIX "%s", cfg.port);
	mz = rte_memzone_lookup(name);
	if (mz == NULL)
		die(name, ENOENT);
	ctl = mz->addr;
	if (ctl->magic != KBRIDGE_MAGIC || ctl->version < 2)
		die("the control block (magic, or a version before 2)", EPROTO);
	kbridge_ring_name(name, sizeof(name), cfg.port, "tk", 0);
	tk = rte_ring_lookup(name);
	kbridge_ring_name(name, sizeof(name), cfg.port, "fk", 0);
	fk = rte_ring_lookup(name);
	pool = rte_mempool_lookup(ctl->mempool);
	if (tk == NULL || fk == NULL || pool == NULL)
		die("the port's rings and pool", ENOENT);
	room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
	if (ctl->version >= 7) {
		kbridge_ring_name(name, sizeof(name), cfg.port, "al", 0);
		fresh = rte_ring_lookup(name);
		kbridge_ring_name(name, sizeof(name), cfg.port, "sp", 0);
		spent = rte_ring_lookup(name);
		if (fresh == NULL || spent == NULL)
			die("the port's fresh and spent rings", ENOENT);
	}
}

/* ---- mbufs: off the fresh ring, onto the spent ring ---- */

static struct rte_mbuf *cache[BURST];
static unsigned int cached;

/* One fresh mbuf, NULL when there is none. */
static struct rte_mbuf *
take(void)
{
	if (fresh == NULL)
		return rte_pktmbuf_alloc(pool);
	if (cached == 0)
		cached = rte_ring_dequeue_burst(fresh, (void **)cache, BURST, NULL);
	return cached > 0 ? cache[--cached] : NULL;
}

/* Gives ms[0..n) back: onto the spent ring, which never fills while the app
 * runs (kbridge.h), or to the pool. */
static void
give(struct rte_mbuf **ms, unsigned int n)
{
	unsigned int sent = 0;

	if (spent == NULL) {
		rte_pktmbuf_free_bulk(ms, n);
		return;
	}
	while (sent < n && !stop)
		sent += rte_ring_enqueue_burst(spent, (void **)ms + sent, n - sent, NULL);
}

static uint64_t
owner_me(void)
{
	char state;
	long threads;
	unsigned long long start = 0;

	kbridge_proc_stat_(getpid(), &state, &threads, &start);
	return (uint64_t)(uint32_t)getpid() | (start & 0xffffffffull) << 32;
}

/* The claim kbridge makes (kbridge_ctl.owner): the app takes an eventfd only
 * from the process that owns the port. */
static void
claim(uint64_t me)
{
	uint64_t old = __atomic_load_n(&ctl->owner, __ATOMIC_SEQ_CST);

	if (old != 0 && kbridge_owner_alive_(old))
		die("the port has a live owner", EBUSY);
	if (!__atomic_compare_exchange_n(&ctl->owner, &old, me, 0, __ATOMIC_SEQ_CST,
					 __ATOMIC_SEQ_CST))
		die("claiming the port", EBUSY);
}

static void
send_eventfd(void)
{
	struct kbridge_mp_wakeup req = { .queue = 0 };
	struct rte_mp_msg msg = { 0 };
	struct rte_mp_reply reply = { 0 };
	struct timespec ts = { .tv_sec = 2 };
	int32_t status = -ETIMEDOUT;

	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd < 0)
		die("eventfd", errno);
	snprintf(req.name, sizeof(req.name), "%s", cfg.port);
	snprintf(msg.name, sizeof(msg.name), "%s", KBRIDGE_MP_WAKEUP);
	msg.len_param = sizeof(req);
	memcpy(msg.param, &req, sizeof(req));
	msg.num_fds = 1;
	msg.fds[0] = efd;
	if (rte_mp_request_sync(&msg, &reply, &ts) == 0 && reply.nb_received == 1)
		memcpy(&status, reply.msgs[0].param, sizeof(status));
	free(reply.msgs);
	if (status != 0)
		die("handing the eventfd to the app", -status);
}

/* ---- app to kernel ---- */

/* A TCP segment's headers, when it is one kbridge could merge. */
struct seg {
	uint8_t *h;   /* frame start */
	uint16_t l3, l4, hl;
	uint8_t v6, psh;
	int payload; /* -1: not a mergeable TCP segment */
	uint32_t seq;
};

static void
parse(struct rte_mbuf *m, struct seg *s)
{
	uint8_t *h = rte_pktmbuf_mtod(m, uint8_t *);
	uint16_t et, iplen;
	struct rte_tcp_hdr *t;

	s->payload = -1;
	s->h = h;
	if (m->nb_segs != 1 || m->data_len < ETH_LEN + 20)
		return;
	et = (uint16_t)(h[12] << 8 | h[13]);
	if (et == RTE_ETHER_TYPE_IPV4) {
		struct rte_ipv4_hdr *ip = (void *)(h + ETH_LEN);

		if (ip->version_ihl != 0x45 || ip->next_proto_id != IPPROTO_TCP ||
		    (rte_be_to_cpu_16(ip->fragment_offset) & 0x3fff) != 0)
			return;
		s->v6 = 0, s->l3 = 20, iplen = rte_be_to_cpu_16(ip->total_length);
	} else if (et == RTE_ETHER_TYPE_IPV6 && m->data_len >= ETH_LEN + 40 + 20) {
		struct rte_ipv6_hdr *ip = (void *)(h + ETH_LEN);

		if (ip->proto != IPPROTO_TCP)
			return;
		s->v6 = 1, s->l3 = 40, iplen = 40 + rte_be_to_cpu_16(ip->payload_len);
	} else {
		return;
	}
	t = (void *)(h + ETH_LEN + s->l3);
	s->l4 = (t->data_off >> 4) * 4;
	s->hl = ETH_LEN + s->l3 + s->l4;
	if (s->l4 < 20 || s->hl > m->data_len || ETH_LEN + iplen != m->data_len)
		return;
	if ((t->tcp_flags & ~RTE_TCP_PSH_FLAG) != RTE_TCP_ACK_FLAG || (t->data_off & 0x0f) != 0)
		return;
	s->psh = (t->tcp_flags & RTE_TCP_PSH_FLAG) != 0;
	s->seq = rte_be_to_cpu_32(t->sent_seq);
	s->payload = m->data_len - s->hl;
	if (s->payload == 0)
		s->payload = -1;
}

/* kbridge's own check (burst_csum.h), where the NIC vouched for nothing. */
static int
csum_good(struct rte_mbuf *m, const struct seg *s)
{
	if ((m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD)
		return 1;
	return kb_tcp_csum_good(s->h, m->data_len);
}

/* Whether b joins the super-frame headed by a, which ends at sequence next:
 * everything the kernel's segmentation copies from the first segment to
 * every other must be equal (kbridge's coalescer compares the same). */
static int
same_flow(const struct seg *a, const struct seg *b, uint32_t next, int gso)
{
	const uint8_t *ia = a->h + ETH_LEN, *ib = b->h + ETH_LEN;
	const uint8_t *ta = ia + a->l3, *tb = ib + b->l3;

	if (a->v6 != b->v6 || a->l4 != b->l4 || b->seq != next || b->payload > gso ||
	    memcmp(a->h, b->h, ETH_LEN) != 0)
		return 0;
	if (a->v6 ? memcmp(ia, ib, 4) != 0 || ia[7] != ib[7] || memcmp(ia + 8, ib + 8, 32) != 0
		  : ia[1] != ib[1] || (ia[6] & 0x40) != (ib[6] & 0x40) || ia[8] != ib[8] ||
			    memcmp(ia + 12, ib + 12, 8) != 0)
		return 0;
	/* ports, then ack, data offset, window, options */
	return memcmp(ta, tb, 4) == 0 && memcmp(ta + 8, tb + 8, 5) == 0 &&
	       memcmp(ta + 14, tb + 14, 2) == 0 && memcmp(ta + 20, tb + 20, a->l4 - 20) == 0;
}

static uint8_t hdrbuf[VNET_LEN + MAX_HDR];
static struct iovec iov[1 + MAX_MERGE];

static void
write_iov(int n, int frames)
{
	if (writev(tap, iov, n) < 0)
		st.dropped += frames;
	else
		st.to_kernel += frames, st.writes++;
}

/* One frame as it is, every segment of it; DATA_VALID only when the app's
 * NIC checked it. */
static void
write_alone(struct rte_mbuf *m)
{
	struct virtio_net_hdr *vh = (void *)hdrbuf;
	int n;

	memset(vh, 0, sizeof(*vh));
	if ((m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD)
		vh->flags = VIRTIO_NET_HDR_F_DATA_VALID;
	iov[0] = (struct iovec){ hdrbuf, VNET_LEN };
	for (n = 1; m != NULL && n < (int)RTE_DIM(iov); m = m->next, n++)
		iov[n] = (struct iovec){ rte_pktmbuf_mtod(m, void *), m->data_len };
	write_iov(n, 1);
}

/* segs[0..n) as one GSO super-frame: the head's headers with the merged
 * lengths, the last segment's PSH and the pseudo-header sum that
 * NEEDS_CSUM wants, then every segment's payload. */
static void
write_merged(struct rte_mbuf **ms, const struct seg *segs, int n, int payload)
{
	const struct seg *a = &segs[0];
	struct virtio_net_hdr *vh = (void *)hdrbuf;
	uint8_t *h = hdrbuf + VNET_LEN, *ip = h + ETH_LEN;
	struct rte_tcp_hdr *t = (void *)(ip + a->l3);
	int i;

	if (n == 1) {
		write_alone(ms[0]);
		return;
	}
	memcpy(h, a->h, a->hl);
	*vh = (struct virtio_net_hdr){
		.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM,
		.gso_type = a->v6 ? VIRTIO_NET_HDR_GSO_TCPV6 : VIRTIO_NET_HDR_GSO_TCPV4,
		.hdr_len = a->hl,
		.gso_size = (uint16_t)a->payload,
		.csum_start = ETH_LEN + a->l3,
		.csum_offset = 16,
	};
	if (a->v6) {
		struct rte_ipv6_hdr *ip6 = (void *)ip;

		ip6->payload_len = rte_cpu_to_be_16(a->l4 + payload);
		t->cksum = rte_ipv6_phdr_cksum(ip6, 0);
	} else {
		struct rte_ipv4_hdr *ip4 = (void *)ip;

		ip4->total_length = rte_cpu_to_be_16(20 + a->l4 + payload);
		ip4->hdr_checksum = 0;
		ip4->hdr_checksum = rte_ipv4_cksum(ip4);
		t->cksum = rte_ipv4_phdr_cksum(ip4, 0);
	}
	t->tcp_flags = (t->tcp_flags & ~RTE_TCP_PSH_FLAG) | (segs[n - 1].psh ? RTE_TCP_PSH_FLAG : 0);
	iov[0] = (struct iovec){ hdrbuf, VNET_LEN + a->hl };
	for (i = 0; i < n; i++)
		iov[1 + i] = (struct iovec){ segs[i].h + segs[i].hl, (size_t)segs[i].payload };
	write_iov(1 + n, n);
}

static unsigned int
to_kernel(void)
{
	struct rte_mbuf *ms[BURST];
	struct seg segs[BURST];
	unsigned int n, i, head = 0, open = 0;
	int payload = 0;
	uint64_t t0 = steps ? rte_rdtsc() : 0;

	n = rte_ring_dequeue_burst(tk, (void **)ms, BURST, NULL);
	if (n == 0)
		return 0;
	kb_prefetch_burst(ms, (uint16_t)n);
	STEP(S_DEQ, t0);
	for (i = 0; i < n; i++) {
		struct seg *s = &segs[i];
		int joins;

		parse(ms[i], s);
		if (s->payload > 0 && !csum_good(ms[i], s))
			s->payload = -1; /* the kernel drops it and counts it */
		joins = open > 0 && s->payload > 0 && open < MAX_MERGE &&
			payload + s->payload + s->l3 + s->l4 <= 0xffff &&
			same_flow(&segs[head], s, segs[i - 1].seq + segs[i - 1].payload,
				  segs[head].payload);
		if (joins) {
			open++;
			payload += s->payload;
			/* Only the last segment of a super-frame may be short or push. */
			if (s->psh || s->payload < segs[head].payload) {
				STEP(S_CHECK, t0);
				write_merged(&ms[head], &segs[head], open, payload);
				STEP(S_WRITEV, t0);
				open = 0;
			}
			continue;
		}
		if (open > 0) {
			STEP(S_CHECK, t0);
			write_merged(&ms[head], &segs[head], open, payload);
			STEP(S_WRITEV, t0);
			open = 0;
		}
		if (s->payload > 0 && !s->psh) {
			head = i, open = 1, payload = s->payload;
			continue;
		}
		STEP(S_CHECK, t0);
		write_alone(ms[i]);
		STEP(S_WRITEV, t0);
	}
	if (open > 0) {
		STEP(S_CHECK, t0);
		write_merged(&ms[head], &segs[head], open, payload);
		STEP(S_WRITEV, t0);
	}
	give(ms, n);
	STEP(S_FREE, t0);
	return n;
}

/* ---- kernel to app ---- */

static uint8_t rbuf[VNET_LEN + 65536 + 64];

/* Finishes a partial checksum: the field holds the pseudo-header sum. */
static void
finish_csum(uint8_t *f, int len, const struct virtio_net_hdr *vh)
{
	uint16_t sum;

	if (vh->csum_start + vh->csum_offset + 2 > len)
		return;
	sum = (uint16_t)~rte_raw_cksum(f + vh->csum_start, len - vh->csum_start);
	if (sum == 0)
		sum = 0xffff;
	memcpy(f + vh->csum_start + vh->csum_offset, &sum, 2);
}

/* Cuts a TCP super-frame of len bytes into mbufs appended at ms[*n] with
 * kbridge's own cut (burst_cut.h): what the kernel's segmentation would
 * have sent. Returns -1 when it is none. */
static int
split(uint8_t *f, int len, const struct virtio_net_hdr *vh, struct rte_mbuf **ms, unsigned int *n)
{
	struct kb_tso t = { .l2 = ETH_LEN, .ipv6 = vh->gso_type == VIRTIO_NET_HDR_GSO_TCPV6 };
	uint16_t et = (uint16_t)(f[12] << 8 | f[13]);
	struct kb_cut c = { .data = f };
	int payload;
	uint32_t k;

	if (len < ETH_LEN + (t.ipv6 ? 40 : 20) + 20 ||
	    et != (t.ipv6 ? RTE_ETHER_TYPE_IPV6 : RTE_ETHER_TYPE_IPV4))
		return -1;
	t.l3 = t.ipv6 ? 40 : (f[ETH_LEN] & 0x0f) * 4;
	t.l4 = (f[ETH_LEN + t.l3 + 12] >> 4) * 4;
	c.hlen = (uint32_t)t.l2 + t.l3 + t.l4;
	payload = len - (int)c.hlen;
	if (t.l3 < 20 || t.l4 < 20 || vh->gso_size == 0 || payload <= 0 ||
	    (int)vh->gso_size > len || cfg.mtu <= t.l3 + t.l4)
		return -1;
	t.mss = (uint16_t)RTE_MIN((int)vh->gso_size, cfg.mtu - t.l3 - t.l4);
	if (c.hlen + t.mss > room)
		return -1;
	c.payload = (uint32_t)payload;
	c.n = (c.payload + t.mss - 1) / t.mss;
	if (c.n > MAX_SPLIT)
		return -1;
	kb_cut_start(&t, &c);
	for (k = 0; k < c.n; k++) {
		struct rte_mbuf *m = take();

		if (m == NULL) {
			st.dropped++;
			return 0;
		}
		m->data_len = (uint16_t)kb_cut_segment(&t, &c, k, rte_pktmbuf_mtod(m, uint8_t *));
		m->pkt_len = m->data_len;
		ms[(*n)++] = m;
	}
	return 0;
}

static unsigned int
from_kernel(void)
{
	struct rte_mbuf *ms[BURST + MAX_SPLIT];
	unsigned int n = 0, sent, reads;
	uint64_t t0 = steps ? rte_rdtsc() : 0;

	for (reads = 0; n < BURST && reads < 2 * BURST; reads++) {
		ssize_t r = read(tap, rbuf, sizeof(rbuf));
		struct virtio_net_hdr *vh = (void *)rbuf;
		uint8_t *f = rbuf + VNET_LEN;
		int len = (int)r - VNET_LEN;
		struct rte_mbuf *m;

		STEP(S_READ, t0);
		if (r < 0)
			break;
		st.reads++;
		if (len < ETH_LEN) {
			st.dropped++;
			continue;
		}
		if (vh->gso_type != VIRTIO_NET_HDR_GSO_NONE) {
			if (split(f, len, vh, ms, &n) < 0)
				st.dropped++;
			STEP(S_SPLIT, t0);
			continue;
		}
		if ((uint32_t)len > room || (m = take()) == NULL) {
			st.dropped++;
			continue;
		}
		if (vh->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM)
			finish_csum(f, len, vh);
		memcpy(rte_pktmbuf_mtod(m, void *), f, len);
		m->data_len = (uint16_t)len;
		m->pkt_len = (uint32_t)len;
		ms[n++] = m;
		STEP(S_SPLIT, t0);
	}
	if (n == 0)
		return 0;
	sent = rte_ring_enqueue_burst(fk, (void **)ms, n, NULL);
	if (sent < n) {
		give(ms + sent, n - sent);
		st.dropped += n - sent;
	}
	st.from_kernel += sent;
	STEP(S_ENQ, t0);
	return n;
}

/* ---- the loop ---- */

/* need_wakeup, a full fence, the ring checked again: kbridge_to_kernel()
 * enqueues, fences and kicks only when it sees the flag, so one of the two
 * sees the other. Then epoll on the TAP and the eventfd. */
static void
park(int ep)
{
	struct kbridge_queue_ctl *qc = &ctl->q[0];
	struct epoll_event ev[2];
	uint64_t v, t0 = steps ? rte_rdtsc() : 0;
	int i, n;

	__atomic_store_n(&qc->need_wakeup, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (rte_ring_count(tk) == 0 && !stop) {
		st.parks++;
		STEP(S_PARK, t0);
		n = epoll_wait(ep, ev, 2, 100);
		t0 = steps ? rte_rdtsc() : 0; /* the sleep is no work */
		for (i = 0; i < n; i++)
			if (ev[i].data.fd == efd && read(efd, &v, sizeof(v)) == sizeof(v))
				st.wakeups++;
	}
	__atomic_store_n(&qc->need_wakeup, 0, __ATOMIC_RELEASE);
	STEP(S_PARK, t0);
}

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int
first_cpu(void)
{
	cpu_set_t set;
	int c;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		for (c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &set))
				return c;
	return 0;
}

int
main(int argc, char **argv)
{
	char prefix[96], lcores[32];
	char *eal[] = { argv[0], "--proc-type=secondary", prefix, "--no-pci", "--no-telemetry",
			lcores, "--log-level=lib.eal:error" };
	struct epoll_event ev = { .events = EPOLLIN };
	uint64_t me;
	int ep, i;

	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			read_config(argv[++i]);
	steps = getenv("KBF_STEPS") != NULL && strcmp(getenv("KBF_STEPS"), "1") == 0;
	snprintf(prefix, sizeof(prefix), "--file-prefix=%s", cfg.prefix);
	snprintf(lcores, sizeof(lcores), "--lcores=0@%d", first_cpu());
	if (rte_eal_init(RTE_DIM(eal), eal) < 0)
		die("rte_eal_init", rte_errno);
	open_port();
	me = owner_me();
	claim(me);
	open_tap();
	configure_iface();
	send_eventfd();
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.data.fd = tap;
	epoll_ctl(ep, EPOLL_CTL_ADD, tap, &ev);
	ev.data.fd = efd;
	epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);
	printf("kbridge-floor: port %s (%s), interface %s, MTU %d: running\n", cfg.port,
	       ctl->mempool, cfg.iface, cfg.mtu);
	fflush(stdout);

	while (!stop && !__atomic_load_n(&ctl->closing, __ATOMIC_ACQUIRE))
		if (from_kernel() + to_kernel() == 0)
			park(ep);

	if (spent != NULL) /* what it took and did not use: the app frees it */
		rte_ring_enqueue_burst(spent, (void **)cache, cached, NULL);
	__atomic_compare_exchange_n(&ctl->owner, &me, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	printf("kbridge-floor: to_kernel=%lu writes=%lu from_kernel=%lu reads=%lu parks=%lu wakeups=%lu dropped=%lu\n",
	       st.to_kernel, st.writes, st.from_kernel, st.reads, st.parks, st.wakeups, st.dropped);
	if (steps) {
		double ns = 1e9 / (double)rte_get_tsc_hz();

		for (i = 0; i < S_N; i++) {
			uint64_t frames = i < S_READ ? st.to_kernel :
					  i < S_PARK ? st.from_kernel : st.to_kernel + st.from_kernel;

			printf("kbridge-floor: step %-20s %8.1f ns per frame (%s)\n", step_name[i],
			       frames ? step_tsc[i] * ns / (double)frames : 0.0,
			       i < S_READ ? "app to kernel" : i < S_PARK ? "kernel to app" : "both ways, without the sleep");
		}
	}
	return 0;
}

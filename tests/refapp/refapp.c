/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge-refapp: the reference DPDK application for kbridge.
 *
 * It owns one ethdev port (net_af_packet on a veth in the test bed, a PCI NIC
 * in production), keeps the traffic that is its own (UDP to --own-udp-port,
 * counted and freed: a stand-in for a real fast path) and hands everything
 * else to the kernel through kbridge's exception rings. What the kernel sends
 * back through kbridge goes out of the port.
 *
 * --port NAME may repeat (up to 4 times): the i-th name is the kbridge port
 * of ethdev port i, each with its own rings, link reporter and counters,
 * all of them polled by the one lcore and fed from one mempool. Without
 * --port it serves one port, kb0, on ethdev port 0. More names than ethdev
 * ports, the same name twice, or several names with --vhost are refused.
 * --pool-size defaults to 8191 for one port and 8192 * ports - 1 for more.
 *
 * With --vhost PATH it needs no kbridge.h at all: its exception port is a
 * net_virtio_user port on kbridge's vhost-user socket (kbridge in mode
 * vhost), driven with plain rte_eth_rx_burst/tx_burst like any NIC, with the
 * offloads a real app would ask for (TCP LRO, checksums, TSO) and one queue
 * pair per --vhost-queues. Where the port does TSO it merges the NIC's
 * TCP/IPv4 frames with librte_gro and sends them as TSO packets (kbridge
 * writes each to its TAP as one GSO frame); --vhost-no-gro turns that off.
 *
 * --sw-offload (kbridge.h rings only, not with --vhost) makes each port
 * behave like a NIC doing LRO and TSO (ixgbe, i40e, mlx5 do both in
 * hardware), done in software on the lcore:
 *  - LRO: the TCP/IPv4 frames of each received burst (after the own-traffic
 *    filter) are merged with librte_gro's lightweight per-burst mode, at most
 *    LRO_MAX_FRAMES frames and 64 KiB per merged packet (kbridge's default
 *    workers.max_segments, and what kbridge writes as one GSO frame), and
 *    handed to kbridge as LRO receives: RTE_MBUF_F_RX_LRO, tso_segsz the
 *    largest segment's payload. kbridge writes each to its TAP as one GSO
 *    frame with a partial checksum (its header rebuilt from the packet), so
 *    the TCP and IPv4 checksums librte_gro leaves stale do not matter.
 *  - Receive checksums: before the merge, every TCP/UDP frame's checksums
 *    (its IPv4 header's too) are verified and the verdict set in ol_flags,
 *    RTE_MBUF_F_RX_L4_CKSUM_GOOD or _BAD, as every NIC with receive
 *    checksum offload does; only GOOD frames are merged. kbridge then skips
 *    its own check of the frames marked GOOD.
 *  - TSO: the app declares TSO to kbridge (kbridge_port_set_offloads, up to
 *    SW_TSO_SEGS mbufs a chain) although its port has none, and cuts each
 *    RTE_MBUF_F_TX_TCP_SEG super-frame kbridge hands over into MTU frames
 *    with finished checksums (librte_gso for IPv4, by copying for IPv6)
 *    before rte_eth_tx_burst. One GSO context and indirect pool serve all
 *    the ports.
 * --no-tso: the app declares no TSO to kbridge even where its port could cut
 * TCP super-frames (kbridge then cuts them into MTU frames itself), as an
 * app written for KNI, which had no offloads, does; not with --sw-offload.
 *
 * Its stats lines end in " gro=N gro_segments=N gso=N gso_segments=N
 * gso_refused=N rx_csum_bad=N" (after " port=NAME" with several ports):
 * merged packets handed to kbridge and the frames inside them, super-frames
 * cut and the frames they became, super-frames that could not be cut
 * (freed), frames received with a bad checksum (marked BAD). The ready
 * line ends in " sw_offload=1". Without it nothing of this runs: one branch
 * per burst.
 *
 *   kbridge-refapp <EAL args> -- [--port NAME]... [--queues N] [--ring-size N]
 *                                [--pool-size N] [--mbuf-size BYTES] [--own-udp-port P]
 *                                [--free-wait SECONDS] [--sw-offload | --no-tso]
 *                                [--vhost PATH [--vhost-queues N] [--vhost-server]
 *                                 [--vhost-no-gro]]
 *
 * It does not read stdin. SIGTERM/SIGINT stop it; SIGUSR1 prints its
 * counters, including the mempool's in-use count (the leak check of the test
 * bed compares it with the baseline printed at start-up). With several ports
 * it prints one stats line per port, " port=NAME" at its end; pool_in_use
 * is the shared pool's on each.
 *
 * A control thread of its own (one per port) reports the port's link to kbridge
 * (kbridge_port_set_link): at start and on every change, polled 20 ms apart
 * with rte_eth_link_get_nowait, since the bed's PMDs (net_pcap on an
 * interface, net_af_packet) have no link interrupts. kbridge sets kb0's
 * carrier from it. The same thread serves kbridge's requests
 * (kbridge_port_poll_request, kbridge.h version 5): what an administrator
 * does to kb0 (MTU, up/down, MAC, promiscuous, all-multicast) is applied to
 * the port's ethdev and answered with the ethdev's result; the port's MAC
 * is recorded for kb0 (kbridge_port_set_mac). --requests none serves none
 * (kbridge then sets every change back); --requests unanswered declares
 * them and never answers (a hung app, for the tests).
 *
 * At the stop it frees its kbridge ports. kbridge_port_free() refuses while
 * the kbridge that serves the port still runs after the header's wait
 * (stopped, frozen or starved: it may still use the rings); the app then
 * asks again until --free-wait seconds (default 10, for all its ports
 * together) have passed since the stop and, if kbridge still holds a port,
 * exits with status 3 and a message naming its pid, leaving that port's
 * rings and their mbufs alone. Then it empties its ports' receive queues
 * (drain_nic) before it stops them, and audits its pool.
 */
/* rte_ipv4/ipv6_udptcp_cksum_mbuf (checksums over an mbuf chain, for
 * the segments of --vhost) are still experimental in DPDK 22.11. */
#define ALLOW_EXPERIMENTAL_API
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_gro.h>
#include <rte_gso.h>
#include <rte_ip.h>
#include <rte_jhash.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_net.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include "flood.h"
#include "kbridge.h"

#define BURST 32
/* The most --port names: 4, or fewer if kbridge.h registers fewer ports. */
#define MAX_PORTS 4
/* kbridge's vhost.queues is at most 16. */
#define VHOST_MAX_QUEUES 16

static volatile sig_atomic_t stop;
static volatile sig_atomic_t dump;

static void
on_signal(int sig)
{
	if (sig == SIGUSR1)
		dump = 1;
	else
		stop = 1;
}

struct opts {
	const char *ports[MAX_PORTS]; /* the i-th bridges ethdev port i */
	unsigned int nports;
	uint16_t queues;
	unsigned int ring_size;
	unsigned int pool_size;
	bool pool_size_set;	/* else pool_size is the default for nports */
	unsigned int mbuf_size; /* data room with headroom: a jumbo frame needs 9018 + headroom */
	int own_udp_port;
	const char *vhost;	/* the vhost-user socket; NULL: kbridge.h rings */
	uint16_t vhost_queues;
	bool vhost_server;
	bool vhost_no_gro;
	unsigned int free_wait; /* seconds to wait for a live kbridge at the stop */
	const char *requests;   /* "serve" (the default), "none" or "unanswered" */
	unsigned int request_delay_ms; /* each request takes this long: a port restart */
	bool sw_offload;	/* LRO and TSO in software (ring mode only) */
	bool no_tso;		/* declare no TSO to kbridge, whatever the port does */
	const char *flood;	/* --flood FILE: the flood generator's spec (flood.h) */
};

struct counters {
	uint64_t rx, own, tx, tx_dropped;
};

/* librte_gro's per-burst merging of one port's TCP/IPv4 frames (gro_burst),
 * with how merged packets are marked and bounded, and its counters. */
struct gro {
	struct rte_gro_param param;
	bool lro;		/* mark them as LRO receives (--sw-offload), else for TSO (--vhost) */
	uint16_t max_frames;	/* the most frames one merged packet holds */
	uint32_t max_len;	/* the most bytes: its frames' lengths summed */
	uint64_t merged;	/* merged packets made */
	uint64_t frames;	/* frames inside them */
	uint64_t csum_bad;	/* frames received with a bad checksum (--sw-offload) */
};

/* --sw-offload's TSO in software, per port. */
struct gso_counters {
	uint64_t cut;		/* super-frames from kbridge cut into MTU frames */
	uint64_t segments;	/* the frames they became */
	uint64_t refused;	/* super-frames segment() refused: freed */
};

static void
usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s <EAL args> -- [--port NAME]... [--queues N] [--ring-size N]\n"
		"       [--pool-size N] [--mbuf-size BYTES] [--own-udp-port P] [--free-wait SECONDS]\n"
		"       [--requests serve|none|unanswered] [--request-delay MS] [--sw-offload | --no-tso]\n"
		"       [--vhost PATH [--vhost-queues N] [--vhost-server] [--vhost-no-gro]] [--flood FILE]\n"
		"--port NAME may repeat (up to %d, not with --vhost): each the next ethdev port\n"
		"--sw-offload (not with --vhost): LRO (librte_gro) and TSO (librte_gso) in software\n"
		"--no-tso: declare no TSO to kbridge (as a KNI app), even where the port has it\n",
		prog, MAX_PORTS);
}

static int
parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "queues", required_argument, NULL, 'q' },
		{ "ring-size", required_argument, NULL, 'r' },
		{ "pool-size", required_argument, NULL, 's' },
		{ "mbuf-size", required_argument, NULL, 'm' },
		{ "own-udp-port", required_argument, NULL, 'u' },
		{ "vhost", required_argument, NULL, 'v' },
		{ "vhost-queues", required_argument, NULL, 'Q' },
		{ "vhost-server", no_argument, NULL, 'S' },
		{ "vhost-no-gro", no_argument, NULL, 'G' },
		{ "free-wait", required_argument, NULL, 'W' },
		{ "requests", required_argument, NULL, 'R' },
		{ "request-delay", required_argument, NULL, 'D' },
		{ "sw-offload", no_argument, NULL, 'O' },
		{ "no-tso", no_argument, NULL, 'T' },
		{ "flood", required_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned int i, j;
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (o->nports == MAX_PORTS) {
				fprintf(stderr, "kbridge-refapp: --port may be given at most %d times\n",
					MAX_PORTS);
				return -1;
			}
			o->ports[o->nports++] = optarg;
			break;
		case 'q':
			o->queues = (uint16_t)atoi(optarg);
			break;
		case 'r':
			o->ring_size = (unsigned int)atoi(optarg);
			break;
		case 's':
			o->pool_size = (unsigned int)atoi(optarg);
			o->pool_size_set = true;
			break;
		case 'm':
			o->mbuf_size = (unsigned int)atoi(optarg);
			break;
		case 'u':
			o->own_udp_port = atoi(optarg);
			break;
		case 'v':
			o->vhost = optarg;
			break;
		case 'Q':
			o->vhost_queues = (uint16_t)atoi(optarg);
			break;
		case 'S':
			o->vhost_server = true;
			break;
		case 'G':
			o->vhost_no_gro = true;
			break;
		case 'W':
			o->free_wait = (unsigned int)atoi(optarg);
			break;
		case 'R':
			o->requests = optarg;
			break;
		case 'D':
			o->request_delay_ms = (unsigned int)atoi(optarg);
			break;
		case 'O':
			o->sw_offload = true;
			break;
		case 'T':
			o->no_tso = true;
			break;
		case 'f':
			o->flood = optarg;
			break;
		default:
			usage(argv[0]);
			return -1;
		}
	}
	if (o->queues == 0 || o->queues > KBRIDGE_MAX_QUEUES ||
	    !rte_is_power_of_2(o->ring_size)) {
		fprintf(stderr, "kbridge-refapp: --queues must be 1..%d and --ring-size a power of two\n",
			KBRIDGE_MAX_QUEUES);
		return -1;
	}
	if (o->mbuf_size < RTE_PKTMBUF_HEADROOM + 128 || o->mbuf_size > UINT16_MAX) {
		fprintf(stderr, "kbridge-refapp: --mbuf-size must be %u to %u bytes (headroom included)\n",
			RTE_PKTMBUF_HEADROOM + 128, UINT16_MAX);
		return -1;
	}
	if (strcmp(o->requests, "serve") != 0 && strcmp(o->requests, "none") != 0 &&
	    strcmp(o->requests, "unanswered") != 0) {
		fprintf(stderr, "kbridge-refapp: --requests must be serve, none or unanswered, not %s\n",
			o->requests);
		return -1;
	}
	if (o->vhost_queues == 0 || o->vhost_queues > VHOST_MAX_QUEUES) {
		fprintf(stderr, "kbridge-refapp: --vhost-queues must be 1..%d\n", VHOST_MAX_QUEUES);
		return -1;
	}
	if (o->nports == 0)
		o->ports[o->nports++] = "kb0";
	for (i = 1; i < o->nports; i++) {
		for (j = 0; j < i; j++) {
			if (strcmp(o->ports[i], o->ports[j]) == 0) {
				fprintf(stderr, "kbridge-refapp: --port %s given twice\n", o->ports[i]);
				return -1;
			}
		}
	}
	if (o->vhost != NULL && o->nports > 1) {
		fprintf(stderr, "kbridge-refapp: --vhost serves one port: give --port at most once\n");
		return -1;
	}
	if (o->vhost != NULL && o->sw_offload) {
		fprintf(stderr, "kbridge-refapp: --sw-offload is for kbridge.h rings, not --vhost "
			"(there the virtio port's own offloads and --vhost-no-gro apply): give one or the other\n");
		return -1;
	}
	if (o->no_tso && (o->sw_offload || o->vhost != NULL)) {
		fprintf(stderr, "kbridge-refapp: --no-tso is for kbridge.h rings without --sw-offload "
			"(which declares TSO to kbridge by design)\n");
		return -1;
	}
	/* Each port holds up to 1024 rx and 1024 tx descriptors and two rings
	 * of --ring-size: 4096 mbufs at the default, 8192 a port leaves room
	 * for the bursts in flight and the pool's cache (8191 for one, as
	 * always). */
	if (!o->pool_size_set)
		o->pool_size = 8192 * o->nports - 1;
	return 0;
}

/* The app's own traffic: UDP/IPv4 to --own-udp-port. Per packet: always
 * inlined (GCC otherwise stops inlining it once main grows). */
static __rte_always_inline bool
is_own(const struct rte_mbuf *m, int own_port)
{
	const struct rte_ether_hdr *eth;
	const struct rte_ipv4_hdr *ip;
	const struct rte_udp_hdr *udp;
	uint32_t l3;

	if (own_port <= 0 || rte_pktmbuf_data_len(m) < sizeof(*eth) + sizeof(*ip) + sizeof(*udp))
		return false;
	eth = rte_pktmbuf_mtod(m, const struct rte_ether_hdr *);
	if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4))
		return false;
	ip = (const struct rte_ipv4_hdr *)(eth + 1);
	if (ip->next_proto_id != IPPROTO_UDP)
		return false;
	l3 = rte_ipv4_hdr_len(ip);
	if (rte_pktmbuf_data_len(m) < sizeof(*eth) + l3 + sizeof(*udp))
		return false;
	udp = (const struct rte_udp_hdr *)((const uint8_t *)ip + l3);
	return udp->dst_port == rte_cpu_to_be_16((uint16_t)own_port);
}

/* The offloads a port needs to take TCP super-frames from kbridge whole. */
#define TSO_OFFLOADS (RTE_ETH_TX_OFFLOAD_TCP_TSO | RTE_ETH_TX_OFFLOAD_TCP_CKSUM | \
		      RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_MULTI_SEGS)

/* Configures port with queues queue pairs of nb_desc descriptors each and
 * starts it. */
static int
port_start(uint16_t port, const struct rte_eth_conf *conf, uint16_t queues, uint16_t nb_desc,
	   struct rte_mempool *mp)
{
	uint16_t q;
	int ret;

	ret = rte_eth_dev_configure(port, queues, queues, conf);
	if (ret < 0)
		return ret;
	for (q = 0; q < queues; q++) {
		ret = rte_eth_rx_queue_setup(port, q, nb_desc, rte_eth_dev_socket_id(port), NULL, mp);
		if (ret < 0)
			return ret;
		ret = rte_eth_tx_queue_setup(port, q, nb_desc, rte_eth_dev_socket_id(port), NULL);
		if (ret < 0)
			return ret;
	}
	return rte_eth_dev_start(port);
}

/* Configures the port; *tso_segs is non-zero when the port segments TCP
 * itself (TSO), with the most segments one mbuf chain may have; never
 * with no_tso (--no-tso), when the port's TSO stays off. */
static int
port_init(uint16_t port, uint16_t queues, struct rte_mempool *mp, bool no_tso, uint16_t *tso_segs)
{
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	int ret;

	memset(&conf, 0, sizeof(conf));
	*tso_segs = 0;
	ret = rte_eth_dev_info_get(port, &info);
	if (ret < 0)
		return ret;
	if (!no_tso && (info.tx_offload_capa & TSO_OFFLOADS) == TSO_OFFLOADS) {
		conf.txmode.offloads |= TSO_OFFLOADS;
		*tso_segs = info.tx_desc_lim.nb_seg_max ? info.tx_desc_lim.nb_seg_max : 1;
	}
	ret = port_start(port, &conf, queues, 1024, mp);
	if (ret < 0)
		return ret;
	/* Exception traffic is addressed to the kernel's MAC, not the port's. */
	return rte_eth_promiscuous_enable(port);
}

/* name: NULL with one port (the line as it always was), else appended as
 * " port=NAME". g and s: the --sw-offload counters, appended after that;
 * NULL without --sw-offload. */
static void
print_counters(struct kbridge_port *kp, struct rte_mempool *mp, const struct counters *c,
	       uint16_t queues, const char *name, const struct gro *g,
	       const struct gso_counters *s)
{
	uint64_t tk = 0, tkd = 0, fk = 0, kicks = 0, queued = 0;
	uint16_t q;

	for (q = 0; q < queues; q++) {
		tk += kp->ctl->q[q].to_kernel_pkts;
		tkd += kp->ctl->q[q].to_kernel_dropped;
		fk += kp->ctl->q[q].from_kernel_pkts;
		kicks += kp->ctl->q[q].kicks;
		/* With the mbufs the app keeps on the fresh ring for kbridge
		 * and those kbridge put on the spent ring for it to free. */
		queued += rte_ring_count(kp->to_kernel[q]) + rte_ring_count(kp->from_kernel[q]) +
			  rte_ring_count(kp->fresh[q]) + rte_ring_count(kp->spent[q]);
	}
	printf("kbridge-refapp: stats rx=%" PRIu64 " own=%" PRIu64 " to_kernel=%" PRIu64
	       " to_kernel_dropped=%" PRIu64 " from_kernel=%" PRIu64 " tx=%" PRIu64
	       " tx_dropped=%" PRIu64 " kicks=%" PRIu64 " in_rings=%" PRIu64 " pool_in_use=%u%s%s",
	       c->rx, c->own, tk, tkd, fk, c->tx, c->tx_dropped, kicks, queued,
	       rte_mempool_in_use_count(mp), name != NULL ? " port=" : "", name != NULL ? name : "");
	if (g != NULL && s != NULL)
		printf(" gro=%" PRIu64 " gro_segments=%" PRIu64 " gso=%" PRIu64 " gso_segments=%" PRIu64
		       " gso_refused=%" PRIu64 " rx_csum_bad=%" PRIu64, g->merged, g->frames, s->cut,
		       s->segments, s->refused, g->csum_bad);
	printf("\n");
	fflush(stdout);
}

/*
 * --vhost: the exception port is a net_virtio_user port on kbridge's
 * vhost-user socket. Everything below uses the ethdev API only, as an app
 * that knows nothing of kbridge would.
 */

/* What the app asks of the virtio port, each only when the port reports it:
 * the kernel's TCP super-frames whole (LRO: GUEST_TSO4/6) and its partial
 * checksums (GUEST_CSUM) on receive; partial checksums and TSO (CSUM,
 * HOST_TSO4/6) on transmit. virtio-net has no IPv4 header checksum offload,
 * so IPV4_CKSUM is not asked for: ethdev would refuse the configuration. */
#define VHOST_RX_OFFLOADS (RTE_ETH_RX_OFFLOAD_TCP_LRO | RTE_ETH_RX_OFFLOAD_TCP_CKSUM | \
			   RTE_ETH_RX_OFFLOAD_UDP_CKSUM)
#define VHOST_TX_OFFLOADS (RTE_ETH_TX_OFFLOAD_TCP_TSO | RTE_ETH_TX_OFFLOAD_TCP_CKSUM | \
			   RTE_ETH_TX_OFFLOAD_UDP_CKSUM | RTE_ETH_TX_OFFLOAD_MULTI_SEGS)

/* The most segments one super-frame may be cut into: 64 KiB at the smallest
 * MSS the kernel uses (536 bytes) is 123. */
#define MAX_SEGS 128

/* --sw-offload: the most frames and bytes (their lengths summed) one LRO
 * packet holds. kbridge drops a chain of more mbufs than its
 * workers.max_segments (16 by default) and writes at most 64 KiB as one GSO
 * frame; ixgbe's RSC, too, stops at 16 descriptors. */
#define LRO_MAX_FRAMES 16
#define LRO_MAX_LEN 65536
/* --sw-offload: the most mbufs of a super-frame kbridge hands over. */
#define SW_TSO_SEGS 64

struct vcounters {
	uint64_t to_kernel[VHOST_MAX_QUEUES], to_kernel_dropped;
	uint64_t from_kernel[VHOST_MAX_QUEUES];
	uint64_t lro;		/* super-frames the virtio port handed over */
	uint64_t segments;	/* MTU frames they were cut into */
	uint64_t seg_failed;	/* super-frames dropped: no mbufs, malformed */
	uint64_t csum_completed; /* partial checksums finished in software */
	uint64_t tso_refused;	/* TSO packets the virtio port's tx_prepare refused */
};

static void
log_offloads(const char *what, uint64_t want, uint64_t capa, uint64_t got, bool rx)
{
	uint64_t bit;

	printf("kbridge-refapp: virtio port %s offloads:", what);
	for (bit = 1; bit != 0; bit <<= 1) {
		if (!(want & bit))
			continue;
		printf(" %s=%s", rx ? rte_eth_dev_rx_offload_name(bit) : rte_eth_dev_tx_offload_name(bit),
		       (got & bit) ? "on" : (capa & bit) ? "off" : "unsupported");
	}
	printf("\n");
}

/* Adds the net_virtio_user vdev and configures it: queues queue pairs, the
 * offloads above where the port has them. Returns its port id, or -1; *tso
 * tells whether TCP_TSO is on (kbridge agreed to HOST_TSO4/6). */
static int
vhost_port_init(const struct opts *o, struct rte_mempool *mp, bool *tso)
{
	char args[512];
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	uint16_t port;
	int ret;

	*tso = false;
	/* queues > 1 needs the control queue (cq=1): that is how the driver
	 * tells the backend how many queue pairs to use (VIRTIO_NET_F_MQ);
	 * virtio-user answers it itself, kbridge need not offer CTRL_VQ. */
	/* queue_size=1024 rather than 256: a vring of 256 descriptors holds
	 * only a few 64 KiB super-frames, and the NIC's bursts overflow it
	 * whenever kbridge's worker is descheduled. */
	snprintf(args, sizeof(args), "net_virtio_user_kb,path=%s,queues=%u,queue_size=1024%s%s", o->vhost,
		 o->vhost_queues, o->vhost_queues > 1 ? ",cq=1" : "",
		 o->vhost_server ? ",server=1" : "");
	if (o->vhost_server) {
		/* virtio-user's probe waits in accept() until kbridge connects. */
		printf("kbridge-refapp: waiting for kbridge on %s\n", o->vhost);
		fflush(stdout);
	}
	ret = rte_dev_probe(args);
	if (ret < 0) {
		fprintf(stderr, "kbridge-refapp: probe %s: %s\n", args, rte_strerror(-ret));
		return -1;
	}
	if (rte_eth_dev_get_port_by_name("net_virtio_user_kb", &port) != 0) {
		fprintf(stderr, "kbridge-refapp: %s probed but has no ethdev\n", args);
		return -1;
	}
	ret = rte_eth_dev_info_get(port, &info);
	if (ret < 0)
		goto fail;
	memset(&conf, 0, sizeof(conf));
	conf.rxmode.offloads = VHOST_RX_OFFLOADS & info.rx_offload_capa;
	conf.txmode.offloads = VHOST_TX_OFFLOADS & info.tx_offload_capa;
	/* Link state interrupts are how virtio-user notices that its backend
	 * left (the socket closes) and, with server=1, how it takes the next
	 * one on its listening socket: without them a restarted kbridge
	 * connects and waits forever. */
	if (*info.dev_flags & RTE_ETH_DEV_INTR_LSC)
		conf.intr_conf.lsc = 1;
	/* 0 descriptors: the vring's own size (queue_size). */
	ret = port_start(port, &conf, o->vhost_queues, 0, mp);
	if (ret < 0)
		goto fail;
	/* The virtio driver renegotiates features from the offloads at
	 * configure time: what is on now is what the backend agreed to. */
	if (rte_eth_dev_conf_get(port, &conf) == 0) {
		log_offloads("rx", VHOST_RX_OFFLOADS, info.rx_offload_capa, conf.rxmode.offloads, true);
		log_offloads("tx", VHOST_TX_OFFLOADS, info.tx_offload_capa, conf.txmode.offloads, false);
		*tso = (conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_TCP_TSO) != 0;
	}
	fflush(stdout);
	return port;
fail:
	fprintf(stderr, "kbridge-refapp: virtio port %u: %s\n", port, rte_strerror(-ret));
	return -1;
}

/* The virtio port's queue for a frame from the NIC: a hash of the flow's
 * addresses and ports, the same both ways round, so that one TCP flow stays
 * on one queue pair (one kbridge worker, one TAP queue) and several spread
 * over all of them. Frames that are not IP (ARP) take queue 0. */
static uint16_t
flow_queue(const struct rte_mbuf *m, uint16_t n)
{
	struct rte_net_hdr_lens hl;
	uint32_t ptype, a = 0, ports = 0, l3 = 0;
	const uint8_t *p;
	unsigned int i;

	if (n == 1)
		return 0;
	ptype = rte_net_get_ptype(m, &hl, RTE_PTYPE_L2_MASK | RTE_PTYPE_L3_MASK |
				  RTE_PTYPE_L4_MASK);
	if (rte_pktmbuf_data_len(m) < (uint32_t)hl.l2_len + hl.l3_len + 4)
		return 0;
	p = rte_pktmbuf_mtod_offset(m, const uint8_t *, hl.l2_len);
	if (RTE_ETH_IS_IPV4_HDR(ptype)) {
		const struct rte_ipv4_hdr *ip = (const void *)p;

		a = ip->src_addr ^ ip->dst_addr;
		l3 = ip->next_proto_id;
	} else if (RTE_ETH_IS_IPV6_HDR(ptype)) {
		const struct rte_ipv6_hdr *ip = (const void *)p;
		uint32_t s, d;

		for (i = 0; i < 16; i += 4) {
			/* An array in 22.11, struct rte_ipv6_addr from 24.11:
			 * its address is the 16 bytes either way. */
			memcpy(&s, (const uint8_t *)&ip->src_addr + i, 4);
			memcpy(&d, (const uint8_t *)&ip->dst_addr + i, 4);
			a ^= s ^ d;
		}
		l3 = ip->proto;
	} else {
		return 0;
	}
	switch (ptype & RTE_PTYPE_L4_MASK) {
	case RTE_PTYPE_L4_TCP:
	case RTE_PTYPE_L4_UDP: {
		uint16_t ps[2];

		memcpy(ps, p + hl.l3_len, sizeof(ps));
		ports = (uint32_t)(ps[0] ^ ps[1]);
		break;
	}
	default:
		break;
	}
	return (uint16_t)(rte_jhash_3words(a, ports, l3, 0) % n);
}

/* Finishes a TCP/UDP checksum the kernel left partial (virtio NEEDS_CSUM,
 * RTE_MBUF_F_RX_L4_CKSUM_NONE: the field holds the pseudo-header sum). The
 * NIC in the test bed (net_af_packet) sends frames as they are. */
static bool
complete_csum(struct rte_mbuf *m, const struct rte_net_hdr_lens *hl, uint32_t ptype)
{
	uint32_t l4off = (uint32_t)hl->l2_len + hl->l3_len, at;
	uint16_t sum = 0;
	void *l3;

	switch (ptype & RTE_PTYPE_L4_MASK) {
	case RTE_PTYPE_L4_TCP:
		at = l4off + offsetof(struct rte_tcp_hdr, cksum);
		break;
	case RTE_PTYPE_L4_UDP:
		at = l4off + offsetof(struct rte_udp_hdr, dgram_cksum);
		break;
	default:
		return false;
	}
	if (rte_pktmbuf_data_len(m) < at + sizeof(sum))
		return false;
	l3 = rte_pktmbuf_mtod_offset(m, void *, hl->l2_len);
	memcpy(rte_pktmbuf_mtod_offset(m, uint8_t *, at), &sum, sizeof(sum));
	if (RTE_ETH_IS_IPV4_HDR(ptype))
		sum = rte_ipv4_udptcp_cksum_mbuf(m, l3, (uint16_t)l4off);
	else if (RTE_ETH_IS_IPV6_HDR(ptype))
		sum = rte_ipv6_udptcp_cksum_mbuf(m, l3, (uint16_t)l4off);
	else
		return false;
	memcpy(rte_pktmbuf_mtod_offset(m, uint8_t *, at), &sum, sizeof(sum));
	return true;
}

/* Cuts a TCP/IPv6 super-frame by copying: DPDK 22.11's librte_gso segments
 * TCP over IPv4 only. Each segment is one fresh mbuf of headers + mss bytes,
 * checksums complete. Returns the number of segments, or -1. */
static int
segment_ipv6(struct rte_mbuf *m, const struct rte_net_hdr_lens *hl, uint16_t mss,
	     struct rte_mempool *mp, struct rte_mbuf **out, uint16_t max)
{
	uint32_t hdr = (uint32_t)hl->l2_len + hl->l3_len + hl->l4_len;
	uint32_t payload = rte_pktmbuf_pkt_len(m) - hdr, off;
	int n = 0;

	for (off = 0; off < payload; off += mss) {
		uint32_t len = RTE_MIN((uint32_t)mss, payload - off);
		struct rte_mbuf *s = n < max ? rte_pktmbuf_alloc(mp) : NULL;
		struct rte_ipv6_hdr *ip;
		struct rte_tcp_hdr *tcp;
		uint8_t *d;

		if (s == NULL || (d = (uint8_t *)rte_pktmbuf_append(s, (uint16_t)(hdr + len))) == NULL) {
			rte_pktmbuf_free(s);
			rte_pktmbuf_free_bulk(out, n);
			return -1;
		}
		out[n++] = s;
		if (rte_pktmbuf_read(m, 0, hdr, d) != d)
			memcpy(d, rte_pktmbuf_read(m, 0, hdr, d), hdr);
		if (rte_pktmbuf_read(m, hdr + off, len, d + hdr) != d + hdr)
			memcpy(d + hdr, rte_pktmbuf_read(m, hdr + off, len, d + hdr), len);
		ip = (struct rte_ipv6_hdr *)(d + hl->l2_len);
		tcp = (struct rte_tcp_hdr *)(d + hl->l2_len + hl->l3_len);
		ip->payload_len = rte_cpu_to_be_16((uint16_t)(hl->l3_len - sizeof(*ip) +
							      hl->l4_len + len));
		tcp->sent_seq = rte_cpu_to_be_32(rte_be_to_cpu_32(tcp->sent_seq) + off);
		if (off + len < payload)
			tcp->tcp_flags &= (uint8_t)~(RTE_TCP_FIN_FLAG | RTE_TCP_PSH_FLAG);
		if (off > 0)
			tcp->tcp_flags &= (uint8_t)~RTE_TCP_CWR_FLAG;
		tcp->cksum = 0;
		tcp->cksum = rte_ipv6_udptcp_cksum_mbuf(s, ip, (uint16_t)(hl->l2_len + hl->l3_len));
	}
	return n;
}

/* Cuts a super-frame the virtio port handed over (RTE_MBUF_F_RX_LRO, MSS in
 * tso_segsz) into MTU frames for a NIC without TSO, and frees it. TCP/IPv4
 * goes through librte_gso, whose segments are a header mbuf plus indirect
 * mbufs into m's data; librte_gso fixes lengths, IDs, sequence numbers and
 * flags but no checksums, so both are computed here, per segment. */
static int
segment(struct rte_mbuf *m, struct rte_gso_ctx *gso, struct rte_mbuf **out, uint16_t max)
{
	struct rte_net_hdr_lens hl;
	uint32_t ptype = rte_net_get_ptype(m, &hl, RTE_PTYPE_L2_MASK | RTE_PTYPE_L3_MASK |
					   RTE_PTYPE_L4_MASK);
	uint16_t l4off = (uint16_t)(hl.l2_len + hl.l3_len), mss = m->tso_segsz;
	int n, i;

	if ((ptype & RTE_PTYPE_L4_MASK) != RTE_PTYPE_L4_TCP || mss == 0 ||
	    rte_pktmbuf_data_len(m) < (uint32_t)l4off + hl.l4_len) {
		n = -1;
	} else if (RTE_ETH_IS_IPV6_HDR(ptype)) {
		n = segment_ipv6(m, &hl, mss, gso->direct_pool, out, max);
	} else if (RTE_ETH_IS_IPV4_HDR(ptype)) {
		m->l2_len = hl.l2_len;
		m->l3_len = hl.l3_len;
		m->l4_len = hl.l4_len;
		m->ol_flags = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
		gso->gso_size = (uint16_t)(l4off + hl.l4_len + mss);
		n = rte_gso_segment(m, gso, out, max);
		if (n == 0) {
			/* Not longer than one MSS after all: sent as it is,
			 * checksums finished (kbridge's TSO packets leave the
			 * IPv4 header's to the port). */
			struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(m, struct rte_ipv4_hdr *,
									 hl.l2_len);

			m->ol_flags = 0;
			out[0] = m;
			ip->hdr_checksum = 0;
			ip->hdr_checksum = rte_ipv4_cksum(ip);
			complete_csum(m, &hl, ptype);
			return 1;
		}
		for (i = 0; i < n; i++) {
			struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(out[i], struct rte_ipv4_hdr *,
									 hl.l2_len);
			struct rte_tcp_hdr *tcp = (struct rte_tcp_hdr *)((uint8_t *)ip + hl.l3_len);

			out[i]->ol_flags = 0;
			ip->hdr_checksum = 0;
			ip->hdr_checksum = rte_ipv4_cksum(ip);
			tcp->cksum = 0;
			tcp->cksum = rte_ipv4_udptcp_cksum_mbuf(out[i], ip, l4off);
		}
	} else {
		n = -1;
	}
	/* The segments hold references to m's data where they need it. */
	rte_pktmbuf_free(m);
	return n < 0 ? -1 : n;
}

/* Sets gso up to cut TCP super-frames (segment()) into mbufs of mp and
 * indirect mbufs of a new pool of n, which it returns (NULL: logged). The
 * indirect mbufs carry no data. */
static struct rte_mempool *
gso_init(struct rte_gso_ctx *gso, struct rte_mempool *mp, unsigned int n)
{
	struct rte_mempool *ind;

	ind = rte_pktmbuf_pool_create("kb_gso_indirect", n, 256, 0, 0, rte_socket_id());
	if (ind == NULL) {
		fprintf(stderr, "kbridge-refapp: gso pool: %s\n", rte_strerror(rte_errno));
		return NULL;
	}
	memset(gso, 0, sizeof(*gso));
	gso->direct_pool = mp;
	gso->indirect_pool = ind;
	gso->gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO;
	return ind;
}

/* --sw-offload's receive checksum offload: verifies the checksums of a
 * single-segment TCP or UDP frame over IPv4 (its header's first) or over an
 * IPv6 header without extensions, and puts the verdict in ol_flags,
 * RTE_MBUF_F_RX_L4_CKSUM_GOOD or _BAD (and RTE_MBUF_F_RX_IP_CKSUM_*), as a
 * NIC does. Anything else stays UNKNOWN, as a NIC leaves it: other
 * protocols, chains, IPv6 extension headers (DPDK's helper assumes none), a
 * frame shorter than its IP length says, an IPv4 UDP datagram without a
 * checksum. */
static void
sw_rx_csum(struct rte_mbuf *m, struct gro *g)
{
	struct rte_net_hdr_lens hl;
	uint32_t ptype, l4, len;
	const uint8_t *l3, *l4h;
	bool bad;

	if (m->nb_segs != 1)
		return;
	ptype = rte_net_get_ptype(m, &hl, RTE_PTYPE_L2_MASK | RTE_PTYPE_L3_MASK | RTE_PTYPE_L4_MASK);
	/* Kept, as a NIC's packet type: gro_candidate reads them instead of
	 * parsing the frame again. */
	m->packet_type = ptype;
	m->l2_len = hl.l2_len;
	m->l3_len = hl.l3_len;
	m->l4_len = hl.l4_len;
	l4 = ptype & RTE_PTYPE_L4_MASK;
	if ((l4 != RTE_PTYPE_L4_TCP && l4 != RTE_PTYPE_L4_UDP) ||
	    rte_pktmbuf_data_len(m) < (uint32_t)hl.l2_len + hl.l3_len + hl.l4_len)
		return;
	l3 = rte_pktmbuf_mtod_offset(m, const uint8_t *, hl.l2_len);
	l4h = l3 + hl.l3_len;
	m->ol_flags &= ~(RTE_MBUF_F_RX_IP_CKSUM_MASK | RTE_MBUF_F_RX_L4_CKSUM_MASK);
	if (RTE_ETH_IS_IPV4_HDR(ptype)) {
		const struct rte_ipv4_hdr *ip = (const struct rte_ipv4_hdr *)l3;

		/* The helper sums what the IP length says: it must be there. */
		len = rte_be_to_cpu_16(ip->total_length);
		if (len < (uint32_t)hl.l3_len + hl.l4_len ||
		    (uint32_t)hl.l2_len + len > rte_pktmbuf_data_len(m))
			return;
		/* The header sums to 0xffff with its checksum in. */
		if (rte_raw_cksum(ip, hl.l3_len) != 0xffff) {
			m->ol_flags |= RTE_MBUF_F_RX_IP_CKSUM_BAD | RTE_MBUF_F_RX_L4_CKSUM_BAD;
			g->csum_bad++;
			return;
		}
		m->ol_flags |= RTE_MBUF_F_RX_IP_CKSUM_GOOD;
		if (l4 == RTE_PTYPE_L4_UDP && ((const struct rte_udp_hdr *)l4h)->dgram_cksum == 0)
			return;
		bad = rte_ipv4_udptcp_cksum_verify(ip, l4h) != 0;
	} else if ((ptype & RTE_PTYPE_L3_MASK) == RTE_PTYPE_L3_IPV6 &&
		   hl.l3_len == sizeof(struct rte_ipv6_hdr)) {
		const struct rte_ipv6_hdr *ip6 = (const struct rte_ipv6_hdr *)l3;

		len = rte_be_to_cpu_16(ip6->payload_len);
		if (len < hl.l4_len ||
		    (uint32_t)hl.l2_len + hl.l3_len + len > rte_pktmbuf_data_len(m))
			return;
		bad = rte_ipv6_udptcp_cksum_verify(ip6, l4h) != 0;
	} else {
		return;
	}
	m->ol_flags |= bad ? RTE_MBUF_F_RX_L4_CKSUM_BAD : RTE_MBUF_F_RX_L4_CKSUM_GOOD;
	if (bad)
		g->csum_bad++;
}

/* Whether librte_gro's TCP/IPv4 merging may take m: one mbuf holding an
 * IPv4/TCP segment with payload and no flag but ACK (DPDK 22.11 merges no
 * other; a PSH, FIN or CWR segment stays a frame of its own). Fills in the
 * packet type and header lengths, which librte_gro reads instead of
 * parsing: the NIC (net_af_packet) sets neither. */
static bool
gro_candidate(struct rte_mbuf *m, bool lro)
{
	struct rte_net_hdr_lens hl;
	const struct rte_ipv4_hdr *ip;
	const struct rte_tcp_hdr *tcp;
	uint32_t ptype, hdr;

	if (m->nb_segs != 1)
		return false;
	if (lro) {
		/* As a NIC's LRO: only frames whose checksums were verified,
		 * by sw_rx_csum, which also kept their type and lengths. */
		if ((m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) != RTE_MBUF_F_RX_L4_CKSUM_GOOD)
			return false;
		ptype = m->packet_type;
		hl.l2_len = m->l2_len;
		hl.l3_len = m->l3_len;
		hl.l4_len = m->l4_len;
	} else {
		ptype = rte_net_get_ptype(m, &hl, RTE_PTYPE_L2_MASK | RTE_PTYPE_L3_MASK |
					  RTE_PTYPE_L4_MASK);
	}
	if (!RTE_ETH_IS_IPV4_HDR(ptype) || (ptype & RTE_PTYPE_L4_MASK) != RTE_PTYPE_L4_TCP)
		return false;
	hdr = (uint32_t)hl.l2_len + hl.l3_len + hl.l4_len;
	if (rte_pktmbuf_data_len(m) < hdr)
		return false;
	ip = rte_pktmbuf_mtod_offset(m, const struct rte_ipv4_hdr *, hl.l2_len);
	tcp = rte_pktmbuf_mtod_offset(m, const struct rte_tcp_hdr *, hl.l2_len + hl.l3_len);
	/* The IP length, not the frame's: a bare ACK is padded to 60 bytes. */
	if (rte_be_to_cpu_16(ip->total_length) <= (uint32_t)hl.l3_len + hl.l4_len ||
	    tcp->tcp_flags != RTE_TCP_ACK_FLAG)
		return false;
	m->packet_type = ptype;
	m->l2_len = hl.l2_len;
	m->l3_len = hl.l3_len;
	m->l4_len = hl.l4_len;
	return true;
}

/* Sets g up for TCP/IPv4 merging. lro: merged packets are marked as the
 * NIC's LRO receives (--sw-offload, for kbridge's rings), else for TSO on
 * the virtio port (--vhost). One burst holds at most BURST frames, all of
 * which may be one flow; max_frames and max_len bound one merged packet. */
static void
gro_init(struct gro *g, bool lro, uint16_t max_frames, uint32_t max_len)
{
	memset(g, 0, sizeof(*g));
	g->param.gro_types = RTE_GRO_TCP_IPV4;
	g->param.max_flow_num = BURST;
	g->param.max_item_per_flow = BURST;
	g->lro = lro;
	g->max_frames = max_frames;
	g->max_len = max_len;
}

/* Marks a packet librte_gro merged (a chain: each candidate was one mbuf).
 * librte_gro keeps each original segment as one mbuf of the chain (the
 * first with the headers) and records no MSS: it is the largest of their
 * payloads. For TSO on the virtio port the checksums are left to
 * tx_prepare; an LRO receive needs none (kbridge writes it to its TAP with
 * a partial checksum and a rebuilt header, the stale ones unread). */
static void
gro_mark(struct rte_mbuf *m, struct gro *g)
{
	uint32_t hdr = (uint32_t)m->l2_len + m->l3_len + m->l4_len;
	uint16_t mss = (uint16_t)(rte_pktmbuf_data_len(m) - hdr);
	const struct rte_mbuf *s;

	for (s = m->next; s != NULL; s = s->next)
		mss = RTE_MAX(mss, s->data_len);
	m->tso_segsz = mss;
	if (g->lro)
		m->ol_flags |= RTE_MBUF_F_RX_LRO;
	else
		m->ol_flags |= RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_TCP_CKSUM;
	g->merged++;
	g->frames += m->nb_segs;
}

/* Merges TCP/IPv4 frames of pkts[0..n) with librte_gro's lightweight mode
 * (per burst, nothing held back) and returns how many packets are left,
 * merged ones marked (gro_mark). librte_gro returns the packets it took
 * before those it did not, so it only sees runs of candidates: whatever
 * else the burst holds (a PSH segment, an ARP, another protocol) keeps its
 * place and is not overtaken by the segments that followed it. A run is
 * handed over in chunks of at most g->max_frames frames and g->max_len
 * bytes, so that no merged packet exceeds them; one chunk's packets all
 * precede the next's. */
static uint16_t
gro_burst(struct rte_mbuf **pkts, uint16_t n, struct gro *g)
{
	uint16_t i, j, k, start = 0, out = 0;
	uint32_t len = 0;
	bool cand;

	for (i = 0; i <= n; i++) {
		cand = i < n && gro_candidate(pkts[i], g->lro);
		if (cand && i - start < g->max_frames && len + pkts[i]->pkt_len <= g->max_len) {
			len += pkts[i]->pkt_len;
			continue;
		}
		k = (uint16_t)(i - start);
		if (k > 1)
			k = rte_gro_reassemble_burst(pkts + start, k, &g->param);
		memmove(pkts + out, pkts + start, k * sizeof(*pkts));
		for (j = out; j < out + k; j++) {
			if (pkts[j]->nb_segs > 1)
				gro_mark(pkts[j], g);
		}
		out = (uint16_t)(out + k);
		if (cand) {
			/* The chunk is full: pkts[i] (still in place, out <= i)
			 * starts the next one. */
			start = i;
			len = pkts[i]->pkt_len;
			continue;
		}
		if (i < n)
			pkts[out++] = pkts[i];
		start = (uint16_t)(i + 1);
		len = 0;
	}
	return out;
}

/* Sends m[0..n) on the virtio port's queue q, freeing what it refuses, and
 * returns how many it took. With TSO packets in the burst it first runs
 * the port's tx_prepare: DPDK's TSO convention leaves the IP length out of
 * the TCP pseudo-header checksum, virtio-net wants it in (the virtio PMD's
 * prepare adds it, and fills in the IPv4 header checksum GRO left stale). */
static uint16_t
vhost_tx(uint16_t port, uint16_t q, struct rte_mbuf **m, uint16_t n, bool tso,
	 struct vcounters *v)
{
	uint16_t ok, sent;

	if (tso) {
		ok = rte_eth_tx_prepare(port, q, m, n);
		while (ok < n) {
			/* m[ok] was refused (rte_errno): drop it alone. */
			v->tso_refused++;
			rte_pktmbuf_free(m[ok]);
			memmove(m + ok, m + ok + 1, (size_t)(n - ok - 1) * sizeof(*m));
			n--;
			ok = (uint16_t)(ok + rte_eth_tx_prepare(port, q, m + ok, (uint16_t)(n - ok)));
		}
	}
	sent = rte_eth_tx_burst(port, q, m, n);
	if (sent < n) {
		v->to_kernel_dropped += n - sent;
		rte_pktmbuf_free_bulk(m + sent, n - sent);
	}
	return sent;
}

/* Frames for the NIC, sent in bursts. */
struct txbuf {
	uint16_t port, q, n;
	struct rte_mbuf *m[BURST + MAX_SEGS];
};

static void
tx_flush(struct txbuf *t, struct counters *c)
{
	uint16_t sent;

	if (t->n == 0)
		return;
	sent = rte_eth_tx_burst(t->port, t->q, t->m, t->n);
	c->tx += sent;
	if (sent < t->n) {
		c->tx_dropped += t->n - sent;
		rte_pktmbuf_free_bulk(t->m + sent, t->n - sent);
	}
	t->n = 0;
}

static void
print_vcounters(uint16_t nic, struct rte_mempool *mp, struct rte_mempool *ind,
		const struct counters *c, const struct vcounters *v, const struct gro *g,
		uint16_t queues)
{
	uint64_t tk = 0, fk = 0;
	char qs[VHOST_MAX_QUEUES * 48];
	struct rte_eth_stats es;
	uint64_t nic_missed = 0;
	size_t off = 0;
	uint16_t q;

	/* Frames the NIC lost before the app polled them (its ring full). */
	if (rte_eth_stats_get(nic, &es) == 0)
		nic_missed = es.imissed + es.rx_nombuf;

	qs[0] = '\0';
	for (q = 0; q < queues; q++) {
		tk += v->to_kernel[q];
		fk += v->from_kernel[q];
		off += (size_t)snprintf(qs + off, sizeof(qs) - off, " q%u=%" PRIu64 "/%" PRIu64,
					q, v->to_kernel[q], v->from_kernel[q]);
	}
	printf("kbridge-refapp: stats rx=%" PRIu64 " own=%" PRIu64 " to_kernel=%" PRIu64
	       " to_kernel_dropped=%" PRIu64 " from_kernel=%" PRIu64 " tx=%" PRIu64
	       " tx_dropped=%" PRIu64 " lro=%" PRIu64 " segments=%" PRIu64 " seg_failed=%" PRIu64
	       " csum_completed=%" PRIu64 " gro=%" PRIu64 " gro_segments=%" PRIu64
	       " tso_refused=%" PRIu64 " nic_missed=%" PRIu64 "%s pool_in_use=%u gso_in_use=%u\n",
	       c->rx, c->own, tk, v->to_kernel_dropped, fk, c->tx, c->tx_dropped, v->lro,
	       v->segments, v->seg_failed, v->csum_completed, g->merged, g->frames,
	       v->tso_refused, nic_missed, qs,
	       rte_mempool_in_use_count(mp), rte_mempool_in_use_count(ind));
	fflush(stdout);
}

/* The --vhost main loop: NIC queues -> virtio queues by flow hash; every
 * virtio queue -> the NIC, super-frames cut first. */
static int
run_vhost(const struct opts *o, uint16_t nic, struct rte_mempool *mp)
{
	struct rte_mbuf *pkts[BURST], *fwd[VHOST_MAX_QUEUES][BURST];
	uint16_t nfwd[VHOST_MAX_QUEUES];
	bool tso[VHOST_MAX_QUEUES];
	struct gro gro_ctx;
	struct vcounters v = { 0 };
	struct counters c = { 0 };
	struct rte_mempool *ind;
	struct rte_gso_ctx gso;
	static struct txbuf tb;
	struct txbuf *t = &tb;
	bool port_tso, gro;
	struct flood *fl = NULL;
	int vport;
	uint16_t q, i;

	ind = gso_init(&gso, mp, 4095);
	if (ind == NULL)
		return 1;
	t->port = nic;

	vport = vhost_port_init(o, mp, &port_tso);
	if (vport < 0) {
		rte_mempool_free(ind);
		if (stop) {
			printf("kbridge-refapp: stopped before kbridge connected\n");
			return 0;
		}
		return 1;
	}
	/* GRO only where the port does TSO: a merged packet must be cut
	 * again somewhere, and that is kbridge's kernel (HOST_TSO4/6). A
	 * merged packet may hold a whole burst. */
	gro = port_tso && !o->vhost_no_gro;
	gro_init(&gro_ctx, false, BURST, UINT32_MAX);
	printf("kbridge-refapp: ready vhost=%s vhost_queues=%u port=%d gro=%s lcore=%u pool=%s pool_size=%u baseline_in_use=%u\n",
	       o->vhost, o->vhost_queues, vport, gro ? "on" : "off", rte_lcore_id(), mp->name,
	       o->pool_size, rte_mempool_in_use_count(mp));
	fflush(stdout);

	if (o->flood != NULL) {
		struct rte_ether_addr mac;

		if (rte_eth_macaddr_get(nic, &mac) != 0 || (fl = flood_new(o->flood, mp, &mac)) == NULL)
			stop = 1;
	}
	/* One lcore serves every queue: enough for an exception path. */
	while (!stop) {
		/* --flood: frames as the NIC would bring them (mac= names kb0's). */
		if (fl != NULL && (i = flood_burst(fl, pkts, BURST)) > 0)
			flood_took(fl, vhost_tx((uint16_t)vport, 0, pkts, i, false, &v));
		for (q = 0; q < o->queues; q++) {
			uint16_t n = rte_eth_rx_burst(nic, q, pkts, BURST), k;

			if (n == 0)
				continue;
			c.rx += n;
			memset(nfwd, 0, sizeof(nfwd));
			memset(tso, 0, sizeof(tso));
			k = 0;
			for (i = 0; i < n; i++) {
				if (is_own(pkts[i], o->own_udp_port)) {
					c.own++;
					rte_pktmbuf_free(pkts[i]);
				} else {
					pkts[k++] = pkts[i];
				}
			}
			if (gro)
				k = gro_burst(pkts, k, &gro_ctx);
			for (i = 0; i < k; i++) {
				uint16_t vq = flow_queue(pkts[i], o->vhost_queues);

				tso[vq] |= (pkts[i]->ol_flags & RTE_MBUF_F_TX_TCP_SEG) != 0;
				fwd[vq][nfwd[vq]++] = pkts[i];
			}
			for (i = 0; i < o->vhost_queues; i++) {
				if (nfwd[i] > 0)
					v.to_kernel[i] += vhost_tx((uint16_t)vport, i, fwd[i], nfwd[i],
								   tso[i], &v);
			}
		}
		for (q = 0; q < o->vhost_queues; q++) {
			uint16_t n = rte_eth_rx_burst((uint16_t)vport, q, pkts, BURST);

			v.from_kernel[q] += n;
			t->q = q % o->queues;
			for (i = 0; i < n; i++) {
				struct rte_mbuf *m = pkts[i];
				uint64_t l4 = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;

				if (m->ol_flags & RTE_MBUF_F_RX_LRO) {
					int k;

					v.lro++;
					k = segment(m, &gso, t->m + t->n, MAX_SEGS);
					if (k < 0) {
						v.seg_failed++;
						continue;
					}
					v.segments += (uint64_t)k;
					t->n += (uint16_t)k;
				} else {
					if (l4 == RTE_MBUF_F_RX_L4_CKSUM_NONE) {
						struct rte_net_hdr_lens hl;
						uint32_t pt = rte_net_get_ptype(m, &hl,
							RTE_PTYPE_L2_MASK | RTE_PTYPE_L3_MASK |
							RTE_PTYPE_L4_MASK);

						if (complete_csum(m, &hl, pt))
							v.csum_completed++;
					}
					m->ol_flags = 0;
					t->m[t->n++] = m;
				}
				if (t->n >= BURST)
					tx_flush(t, &c);
			}
			tx_flush(t, &c);
		}
		if (dump) {
			dump = 0;
			print_vcounters(nic, mp, ind, &c, &v, &gro_ctx, o->vhost_queues);
			if (fl != NULL)
				flood_print(fl);
		}
	}
	flood_free(fl);

	print_vcounters(nic, mp, ind, &c, &v, &gro_ctx, o->vhost_queues);
	rte_eth_dev_stop((uint16_t)vport);
	rte_eth_dev_close((uint16_t)vport);
	rte_mempool_free(ind);
	return 0;
}

/* The control thread: it tells kbridge the port's link and serves kbridge's
 * requests. */
struct link_watch {
	struct kbridge_port *kp;
	uint16_t port;
	const char *tag; /* "" with one port, else "NAME: " before its requests */
	int answer; /* serve requests and answer them; 0: leave them unanswered */
	uint32_t ignored; /* --requests unanswered: the last seq logged */
	volatile int stop;
	pthread_t tid;
};

/* --request-delay: how long each request takes, as on a PMD that stops and
 * starts the port for it; kbridge's wait for the answer may end first. */
static unsigned int request_delay_ms;

/* Applies one of kbridge's requests to the ethdev: 0 or the ethdev's -errno.
 * The lcore keeps polling meanwhile; the PMDs of the bed (net_tap,
 * net_af_packet) take these calls on a started port. */
static int
apply_request(uint16_t port, const struct kbridge_request *r)
{
	struct rte_ether_addr mac;

	if (request_delay_ms > 0)
		usleep(request_delay_ms * 1000u);
	switch (r->type) {
	case KBRIDGE_REQ_MTU:
		return rte_eth_dev_set_mtu(port, (uint16_t)r->value);
	case KBRIDGE_REQ_LINK:
		return r->value ? rte_eth_dev_set_link_up(port) : rte_eth_dev_set_link_down(port);
	case KBRIDGE_REQ_MAC:
		memcpy(mac.addr_bytes, r->mac, RTE_ETHER_ADDR_LEN);
		return rte_eth_dev_default_mac_addr_set(port, &mac);
	case KBRIDGE_REQ_PROMISC:
		/* The port is promiscuous from the start (port_init): exception
		 * traffic is addressed to kb0's MAC, which need not be the
		 * port's. Turning it off would cut kb0 off: refused. */
		return r->value ? rte_eth_promiscuous_enable(port) : -EBUSY;
	case KBRIDGE_REQ_ALLMULTI:
		return r->value ? rte_eth_allmulticast_enable(port) : rte_eth_allmulticast_disable(port);
	}
	return -ENOTSUP;
}

/* Serves the request that waits, if one does, and logs it. */
static void
serve_request(struct link_watch *w)
{
	struct kbridge_request r;
	int ret;

	if (!kbridge_port_poll_request(w->kp, &r))
		return;
	if (!w->answer) {
		if (r.seq != w->ignored)
			printf("kbridge-refapp: %srequest %u value %u seq %u: left unanswered (--requests unanswered)\n",
			       w->tag, r.type, r.value, r.seq);
		fflush(stdout);
		w->ignored = r.seq;
		return;
	}
	ret = apply_request(w->port, &r);
	kbridge_port_reply(w->kp, &r, ret);
	if (r.type == KBRIDGE_REQ_MAC)
		printf("kbridge-refapp: %srequest mac %02x:%02x:%02x:%02x:%02x:%02x: %s\n", w->tag,
		       r.mac[0], r.mac[1], r.mac[2], r.mac[3], r.mac[4], r.mac[5],
		       ret == 0 ? "applied" : strerror(-ret));
	else
		printf("kbridge-refapp: %srequest %s %u: %s\n", w->tag,
		       r.type == KBRIDGE_REQ_MTU ? "mtu" : r.type == KBRIDGE_REQ_LINK ? "link" :
		       r.type == KBRIDGE_REQ_PROMISC ? "promisc" : "allmulticast",
		       r.value, ret == 0 ? "applied" : strerror(-ret));
	fflush(stdout);
}

static void *
link_watch_run(void *arg)
{
	struct link_watch *w = arg;
	struct rte_eth_link l, last;
	char s[RTE_ETH_LINK_MAX_STR_LEN];
	int first = 1;

	memset(&last, 0, sizeof(last));
	while (!w->stop) {
		serve_request(w);
		memset(&l, 0, sizeof(l));
		if (rte_eth_link_get_nowait(w->port, &l) == 0 &&
		    (first || l.link_status != last.link_status || l.link_speed != last.link_speed ||
		     l.link_duplex != last.link_duplex)) {
			kbridge_port_set_link(w->kp, l.link_status == RTE_ETH_LINK_UP, l.link_speed,
					      l.link_duplex == RTE_ETH_LINK_FULL_DUPLEX);
			rte_eth_link_to_str(s, sizeof(s), &l);
			printf("kbridge-refapp: port %u %s: reported to kbridge\n", w->port, s);
			fflush(stdout);
			last = l;
			first = 0;
		}
		usleep(20 * 1000);
	}
	return NULL;
}

/* Starts the control thread with the signals blocked: they stay the main thread's. */
static int
link_watch_start(struct link_watch *w, struct kbridge_port *kp, uint16_t port, const char *tag,
		 int answer)
{
	sigset_t all, old;
	int ret;

	w->kp = kp;
	w->port = port;
	w->tag = tag;
	w->stop = 0;
	w->answer = answer;
	w->ignored = 0;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ret = pthread_create(&w->tid, NULL, link_watch_run, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -ret;
}

static void
link_watch_stop(struct link_watch *w)
{
	w->stop = 1;
	pthread_join(w->tid, NULL);
}

/* Records the port's MAC for kb0 and, unless told not to, declares the
 * requests this app serves and the largest MTU its port takes. */
static int
declare_port(struct kbridge_port *kp, uint16_t port, const char *requests, const char *tag)
{
	struct rte_eth_dev_info info;
	struct rte_ether_addr mac;
	int ret;

	ret = rte_eth_macaddr_get(port, &mac);
	if (ret < 0)
		return ret;
	if (rte_is_valid_assigned_ether_addr(&mac))
		kbridge_port_set_mac(kp, mac.addr_bytes);
	if (strcmp(requests, "none") == 0)
		return 0;
	ret = rte_eth_dev_info_get(port, &info);
	if (ret < 0)
		return ret;
	/* The PMD's own max_mtu: some (net_tap of 22.11, net_af_packet) take
	 * less, since ethdev also holds a frame to max_rx_pktlen; they refuse
	 * such an MTU, and kbridge sets kb0 back, the refusal logged. */
	kbridge_port_serve_requests(kp, KBRIDGE_REQ_ALL, info.max_mtu);
	printf("kbridge-refapp: %sserves kbridge's requests (%s), max_mtu=%u mac=" RTE_ETHER_ADDR_PRT_FMT "\n",
	       tag, requests, info.max_mtu, RTE_ETHER_ADDR_BYTES(&mac));
	return 0;
}

/*
 * Frees the kbridge port. kbridge_port_free() returns -EBUSY while the
 * kbridge that owns the port still runs after its own wait (it may still
 * dequeue from to_kernel and free what it holds): ask again until wait_s
 * seconds have passed since start (timer cycles: the stop, shared by all the
 * ports), then name that kbridge and give up (-1), leaving the rings and
 * their mbufs to it. It stops once it runs again: it sees the port closing,
 * or this app gone.
 */
static int
free_port(struct kbridge_port *kp, const char *name, unsigned int wait_s, uint64_t start)
{
	uint64_t hz = rte_get_timer_hz();
	pid_t pid;

	while (kbridge_port_free(kp) != 0) {
		pid = kbridge_port_owner_pid(kp);
		if (pid == 0)
			continue; /* it let go or died a moment ago: free now */
		if (rte_get_timer_cycles() - start >= (uint64_t)wait_s * hz) {
			fprintf(stderr,
				"kbridge-refapp: kbridge pid %d still serves port %s after %u s (stopped, frozen or starved?): "
				"exiting without freeing the port; its rings and mbufs stay with that kbridge\n",
				(int)pid, name, wait_s);
			return -1;
		}
		printf("kbridge-refapp: kbridge pid %d still serves port %s: waiting for it (up to %u s)\n",
		       (int)pid, name, wait_s);
		fflush(stdout);
	}
	return 0;
}

/* What the main loop needs of one port, apart from its link watch (another
 * thread reads that). */
struct app_port {
	struct kbridge_port *kp;
	uint16_t port; /* the ethdev port */
	uint16_t tso_segs;
	struct counters c;
	struct gro gro;		 /* --sw-offload: its LRO */
	struct gso_counters gso; /* --sw-offload: its TSO */
};

/* --sw-offload's transmit: sends pkts[0..n) from kbridge out of port a's
 * queue q through t, each TCP super-frame (RTE_MBUF_F_TX_TCP_SEG) first cut
 * into MTU frames with finished checksums; the others go as they are
 * (kbridge finished their checksums). A super-frame segment() refuses is
 * freed (by segment()) and counted. */
static void
sw_tx(struct app_port *a, uint16_t q, struct rte_mbuf **pkts, uint16_t n,
      struct rte_gso_ctx *gso, struct txbuf *t)
{
	uint16_t i;
	int k;

	t->port = a->port;
	t->q = q;
	for (i = 0; i < n; i++) {
		struct rte_mbuf *m = pkts[i];

		if (m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) {
			/* t->n < BURST here: MAX_SEGS more fit. */
			k = segment(m, gso, t->m + t->n, MAX_SEGS);
			if (k < 0) {
				a->gso.refused++;
				continue;
			}
			a->gso.cut++;
			a->gso.segments += (uint64_t)k;
			t->n = (uint16_t)(t->n + k);
		} else {
			t->m[t->n++] = m;
		}
		if (t->n >= BURST)
			tx_flush(t, &a->c);
	}
	tx_flush(t, &a->c);
}

/* Prints a's stats line: the --sw-offload counters only with sw. */
static void
print_port(const struct app_port *a, struct rte_mempool *mp, uint16_t queues, const char *name,
	   bool sw)
{
	print_counters(a->kp, mp, &a->c, queues, name, sw ? &a->gro : NULL, sw ? &a->gso : NULL);
}

/*
 * Receives and frees what port's receive queues hold, at the stop: frames
 * that came after the loop's last burst. A real NIC's PMD frees its rings'
 * mbufs at rte_eth_dev_stop, but net_ring's "wire" is an rte_ring that
 * rte_eth_dev_close frees without freeing the mbufs in it, and the tests'
 * net_ring0 loops what the app transmits back into its own receive queue:
 * frames kbridge handed the app and the app sent just before a SIGTERM sit
 * there, out of the pool at the audit, though neither kbridge nor
 * kbridge.h holds them. Bounded: a live NIC never runs dry. Returns how
 * many it freed.
 */
static unsigned int
drain_nic(uint16_t port, uint16_t queues)
{
	struct rte_mbuf *pkts[BURST];
	unsigned int total = 0, round;
	uint16_t q, n;

	for (q = 0; q < queues; q++)
		for (round = 0; round < 64; round++) {
			n = rte_eth_rx_burst(port, q, pkts, BURST);
			if (n == 0)
				break;
			rte_pktmbuf_free_bulk(pkts, n);
			total += n;
		}
	return total;
}

/* Stops the link watches of ports [0, n) and frees their kbridge ports, on
 * a failure at start-up. */
static void
undo_ports(struct app_port *ap, struct link_watch *lw, unsigned int n)
{
	unsigned int p;

	for (p = 0; p < n; p++) {
		link_watch_stop(&lw[p]);
		kbridge_port_free(ap[p].kp);
	}
}

int
main(int argc, char **argv)
{
	struct opts o = { .queues = 1, .ring_size = 1024,
			  .pool_size = 8191, .mbuf_size = RTE_MBUF_DEFAULT_BUF_SIZE,
			  .own_udp_port = 0, .vhost_queues = 1,
			  .free_wait = 10, .requests = "serve" };
	struct rte_mbuf *pkts[BURST], *fwd[BURST];
	struct flood *fl = NULL;
	static struct app_port ap[MAX_PORTS];
	static struct link_watch lw[MAX_PORTS];
	static struct txbuf tb;
	struct rte_mempool *ind = NULL;
	struct rte_gso_ctx gso;
	char tags[MAX_PORTS][KBRIDGE_NAME_MAX + 3];
	char names[MAX_PORTS * (KBRIDGE_NAME_MAX + 1)];
	struct rte_mempool *mp;
	unsigned int p, nports, avail;
	uint64_t stop_at;
	size_t off;
	uint16_t q;
	struct sigaction sa;
	sigset_t sigs;
	bool freed, sw;
	int ret;

	/* The signals go to the main thread only: EAL's threads inherit them
	 * blocked, so that a SIGTERM interrupts what the main thread waits in. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		fprintf(stderr, "kbridge-refapp: rte_eal_init: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	argc -= ret;
	argv += ret;
	if (parse_args(argc, argv, &o) < 0)
		return 2;
	nports = o.nports;
	avail = rte_eth_dev_count_avail();
	if (avail == 0) {
		fprintf(stderr, "kbridge-refapp: no ethdev port: give one with --vdev or a PCI device\n");
		return 1;
	}
	if (nports > avail) {
		fprintf(stderr, "kbridge-refapp: %u --port names but %u ethdev port%s: give one ethdev port per name\n",
			nports, avail, avail == 1 ? "" : "s");
		return 2;
	}
	for (p = 0; p < nports; p++) {
		if (!rte_eth_dev_is_valid_port((uint16_t)p)) {
			fprintf(stderr, "kbridge-refapp: --port %s: no ethdev port %u\n", o.ports[p], p);
			return 2;
		}
		ap[p].port = (uint16_t)p;
		/* With several ports, their requests are logged with their names. */
		if (nports > 1)
			snprintf(tags[p], sizeof(tags[p]), "%s: ", o.ports[p]);
		else
			tags[p][0] = '\0';
	}

	mp = rte_pktmbuf_pool_create("kb_pool", o.pool_size, 256, 0,
				     (uint16_t)o.mbuf_size, rte_socket_id());
	if (mp == NULL) {
		fprintf(stderr, "kbridge-refapp: mempool: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	for (p = 0; p < nports; p++) {
		ret = port_init(ap[p].port, o.queues, mp, o.no_tso, &ap[p].tso_segs);
		if (ret < 0) {
			fprintf(stderr, "kbridge-refapp: port %u: %s\n", ap[p].port, rte_strerror(-ret));
			return 1;
		}
	}
	sw = o.sw_offload;
	if (sw) {
		/* One GSO context for every port. A NIC's tx queue holds up to
		 * 1024 descriptors, each at most one indirect mbuf. */
		ind = gso_init(&gso, mp, RTE_MAX(4096u, 2048u * nports * o.queues) - 1);
		if (ind == NULL)
			return 1;
	}
	/* No SA_RESTART: with --vhost-server, virtio-user's probe waits in
	 * accept() for kbridge, and a SIGTERM must end that wait (the probe
	 * then fails and the app exits) rather than restart it. */
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
	/* virtio-user writes to its vhost-user socket with plain sendmsg: a
	 * message to a backend that left (the port's stop, when kbridge went
	 * first) would otherwise kill the app. */
	signal(SIGPIPE, SIG_IGN);
	if (o.vhost != NULL) {
		/* One port (parse_args): ethdev port 0. */
		ret = run_vhost(&o, ap[0].port, mp);
		rte_eth_dev_stop(ap[0].port);
		rte_eth_dev_close(ap[0].port);
		if (ret != 0)
			return ret;
		/* Every port is closed, its rings emptied: the pool must be
		 * whole. rte_mempool_audit() panics when it is not. */
		rte_mempool_audit(mp);
		printf("kbridge-refapp: mempool audit ok pool_in_use=%u\n", rte_mempool_in_use_count(mp));
		printf("kbridge-refapp: stopped pool_in_use=%u\n", rte_mempool_in_use_count(mp));
		rte_mempool_free(mp);
		rte_eal_cleanup();
		return 0;
	}
	for (p = 0; p < nports; p++) {
		struct app_port *a = &ap[p];

		a->kp = kbridge_port_create(o.ports[p], o.queues, o.ring_size, mp, (int)rte_socket_id());
		if (a->kp == NULL) {
			fprintf(stderr, "kbridge-refapp: kbridge_port_create(%s): %s\n", o.ports[p],
				rte_strerror(rte_errno));
			undo_ports(ap, lw, p);
			return 1;
		}
		if (sw) {
			/* Like a NIC with LRO and TSO: kbridge hands TCP
			 * super-frames over whole, sw_tx cuts them. */
			kbridge_port_set_offloads(a->kp, KBRIDGE_APP_TSO, SW_TSO_SEGS);
			gro_init(&a->gro, true, LRO_MAX_FRAMES, LRO_MAX_LEN);
			printf("kbridge-refapp: port %u does LRO (up to %u frames) and TSO (up to %u segments) in software: "
			       "kbridge hands over super-frames\n", a->port, LRO_MAX_FRAMES, SW_TSO_SEGS);
		} else if (a->tso_segs > 1) {
			/* kbridge hands TCP super-frames over whole; the port cuts them. */
			kbridge_port_set_offloads(a->kp, KBRIDGE_APP_TSO, a->tso_segs);
			printf("kbridge-refapp: port %u does TSO (up to %u segments): kbridge hands over super-frames\n",
			       a->port, a->tso_segs);
		}

		request_delay_ms = o.request_delay_ms;
		ret = declare_port(a->kp, a->port, o.requests, tags[p]);
		if (ret < 0) {
			fprintf(stderr, "kbridge-refapp: port %u: %s\n", a->port, rte_strerror(-ret));
			kbridge_port_free(a->kp);
			undo_ports(ap, lw, p);
			return 1;
		}
		ret = link_watch_start(&lw[p], a->kp, a->port, tags[p],
				       strcmp(o.requests, "unanswered") != 0);
		if (ret < 0) {
			fprintf(stderr, "kbridge-refapp: link reporter: %s\n", strerror(-ret));
			kbridge_port_free(a->kp);
			undo_ports(ap, lw, p);
			return 1;
		}
	}

	off = 0;
	names[0] = '\0';
	for (p = 0; p < nports && off < sizeof(names); p++)
		off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", p > 0 ? "," : "",
					o.ports[p]);
	printf("kbridge-refapp: ready port=%s queues=%u lcore=%u pool=%s pool_size=%u baseline_in_use=%u%s\n",
	       names, o.queues, rte_lcore_id(), mp->name, o.pool_size,
	       rte_mempool_in_use_count(mp), sw ? " sw_offload=1" : "");
	fflush(stdout);

	if (o.flood != NULL) {
		struct rte_ether_addr mac;

		if (rte_eth_macaddr_get(ap[0].port, &mac) != 0 ||
		    (fl = flood_new(o.flood, mp, &mac)) == NULL)
			stop = 1;
	}
	/* One lcore serves every port and queue: enough for an exception path.
	 * --sw-offload is chosen per burst, never per packet. */
	while (!stop) {
		for (p = 0; p < nports; p++) {
			struct app_port *a = &ap[p];
			struct kbridge_port *kp = a->kp;
			struct counters *c = &a->c;
			uint16_t port = a->port;

			for (q = 0; q < o.queues; q++) {
				uint16_t n = rte_eth_rx_burst(port, q, pkts, BURST);
				uint16_t i, k = 0, sent;

				c->rx += n;
				for (i = 0; i < n; i++) {
					if (is_own(pkts[i], o.own_udp_port)) {
						c->own++;
						rte_pktmbuf_free(pkts[i]);
					} else {
						fwd[k++] = pkts[i];
					}
				}
				if (k > 0) {
					if (sw) {
						for (i = 0; i < k; i++)
							sw_rx_csum(fwd[i], &a->gro);
						k = gro_burst(fwd, k, &a->gro);
					}
					kbridge_to_kernel(kp, q, fwd, k);
				}
				/* --flood: frames as the NIC would bring them. */
				if (fl != NULL && p == 0 && q == 0 && (k = flood_burst(fl, fwd, BURST)) > 0)
					flood_took(fl, kbridge_to_kernel(kp, q, fwd, k));

				n = kbridge_from_kernel(kp, q, pkts, BURST);
				if (n > 0) {
					if (sw) {
						sw_tx(a, q, pkts, n, &gso, &tb);
					} else {
						sent = rte_eth_tx_burst(port, q, pkts, n);
						c->tx += sent;
						if (sent < n) {
							c->tx_dropped += n - sent;
							rte_pktmbuf_free_bulk(pkts + sent, n - sent);
						}
					}
				}
			}
		}
		if (dump) {
			dump = 0;
			for (p = 0; p < nports; p++)
				print_port(&ap[p], mp, o.queues, nports > 1 ? o.ports[p] : NULL, sw);
			if (fl != NULL)
				flood_print(fl);
		}
	}
	flood_free(fl);

	for (p = 0; p < nports; p++)
		print_port(&ap[p], mp, o.queues, nports > 1 ? o.ports[p] : NULL, sw);
	for (p = 0; p < nports; p++)
		link_watch_stop(&lw[p]);
	/* --free-wait is for all the ports together, counted from here. */
	stop_at = rte_get_timer_cycles();
	freed = true;
	for (p = 0; p < nports; p++) {
		if (free_port(ap[p].kp, o.ports[p], o.free_wait, stop_at) != 0)
			freed = false;
	}
	for (p = 0; p < nports; p++) {
		unsigned int drained = drain_nic(ap[p].port, o.queues);

		if (drained > 0)
			printf("kbridge-refapp: freed %u frames left in port %s's receive queues\n", drained,
			       o.ports[p]);
		rte_eth_dev_stop(ap[p].port);
		rte_eth_dev_close(ap[p].port);
	}
	if (!freed)
		return 3;
	/* kbridge_port_free() had kbridge let go before it drained the rings:
	 * the pool must be whole. rte_mempool_audit() panics when it is not. */
	rte_mempool_audit(mp);
	printf("kbridge-refapp: mempool audit ok pool_in_use=%u\n", rte_mempool_in_use_count(mp));
	if (ind != NULL) {
		/* Every indirect mbuf went back with the frame it was part of. */
		rte_mempool_audit(ind);
		printf("kbridge-refapp: gso pool audit ok gso_in_use=%u\n",
		       rte_mempool_in_use_count(ind));
		rte_mempool_free(ind);
	}
	printf("kbridge-refapp: stopped pool_in_use=%u\n", rte_mempool_in_use_count(mp));
	rte_mempool_free(mp);
	rte_eal_cleanup();
	return 0;
}

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
 *   kbridge-refapp <EAL args> -- [--port NAME] [--queues N] [--ring-size N]
 *                                [--pool-size N] [--own-udp-port P]
 *
 * It does not read stdin. SIGTERM/SIGINT stop it; SIGUSR1 prints its
 * counters, including the mempool's in-use count (the leak check of the test
 * bed compares it with the baseline printed at start-up).
 */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include "kbridge.h"

#define BURST 32

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
	const char *port;
	uint16_t queues;
	unsigned int ring_size;
	unsigned int pool_size;
	int own_udp_port;
};

struct counters {
	uint64_t rx, own, tx, tx_dropped;
};

static void
usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s <EAL args> -- [--port NAME] [--queues N] [--ring-size N]\n"
		"       [--pool-size N] [--own-udp-port P]\n",
		prog);
}

static int
parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "queues", required_argument, NULL, 'q' },
		{ "ring-size", required_argument, NULL, 'r' },
		{ "pool-size", required_argument, NULL, 's' },
		{ "own-udp-port", required_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			o->port = optarg;
			break;
		case 'q':
			o->queues = (uint16_t)atoi(optarg);
			break;
		case 'r':
			o->ring_size = (unsigned int)atoi(optarg);
			break;
		case 's':
			o->pool_size = (unsigned int)atoi(optarg);
			break;
		case 'u':
			o->own_udp_port = atoi(optarg);
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
	return 0;
}

/* The app's own traffic: UDP/IPv4 to --own-udp-port. */
static bool
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

/* Configures the port; *tso_segs is non-zero when the port segments TCP
 * itself (TSO), with the most segments one mbuf chain may have. */
static int
port_init(uint16_t port, uint16_t queues, struct rte_mempool *mp, uint16_t *tso_segs)
{
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	uint16_t q;
	int ret;

	memset(&conf, 0, sizeof(conf));
	*tso_segs = 0;
	ret = rte_eth_dev_info_get(port, &info);
	if (ret < 0)
		return ret;
	if ((info.tx_offload_capa & TSO_OFFLOADS) == TSO_OFFLOADS) {
		conf.txmode.offloads |= TSO_OFFLOADS;
		*tso_segs = info.tx_desc_lim.nb_seg_max ? info.tx_desc_lim.nb_seg_max : 1;
	}
	ret = rte_eth_dev_configure(port, queues, queues, &conf);
	if (ret < 0)
		return ret;
	for (q = 0; q < queues; q++) {
		ret = rte_eth_rx_queue_setup(port, q, 1024, rte_eth_dev_socket_id(port), NULL, mp);
		if (ret < 0)
			return ret;
		ret = rte_eth_tx_queue_setup(port, q, 1024, rte_eth_dev_socket_id(port), NULL);
		if (ret < 0)
			return ret;
	}
	ret = rte_eth_dev_start(port);
	if (ret < 0)
		return ret;
	/* Exception traffic is addressed to the kernel's MAC, not the port's. */
	return rte_eth_promiscuous_enable(port);
}

static void
print_counters(struct kbridge_port *kp, struct rte_mempool *mp, const struct counters *c,
	       uint16_t queues)
{
	uint64_t tk = 0, tkd = 0, fk = 0, kicks = 0, queued = 0;
	uint16_t q;

	for (q = 0; q < queues; q++) {
		tk += kp->ctl->q[q].to_kernel_pkts;
		tkd += kp->ctl->q[q].to_kernel_dropped;
		fk += kp->ctl->q[q].from_kernel_pkts;
		kicks += kp->ctl->q[q].kicks;
		queued += rte_ring_count(kp->to_kernel[q]) + rte_ring_count(kp->from_kernel[q]);
	}
	printf("kbridge-refapp: stats rx=%" PRIu64 " own=%" PRIu64 " to_kernel=%" PRIu64
	       " to_kernel_dropped=%" PRIu64 " from_kernel=%" PRIu64 " tx=%" PRIu64
	       " tx_dropped=%" PRIu64 " kicks=%" PRIu64 " in_rings=%" PRIu64 " pool_in_use=%u\n",
	       c->rx, c->own, tk, tkd, fk, c->tx, c->tx_dropped, kicks, queued,
	       rte_mempool_in_use_count(mp));
	fflush(stdout);
}

int
main(int argc, char **argv)
{
	struct opts o = { .port = "kb0", .queues = 1, .ring_size = 1024,
			  .pool_size = 8191, .own_udp_port = 0 };
	struct rte_mbuf *pkts[BURST], *fwd[BURST];
	struct counters c = { 0 };
	struct kbridge_port *kp;
	struct rte_mempool *mp;
	uint16_t port = 0, q;
	uint16_t tso_segs;
	int ret;

	ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		fprintf(stderr, "kbridge-refapp: rte_eal_init: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	argc -= ret;
	argv += ret;
	if (parse_args(argc, argv, &o) < 0)
		return 2;
	if (rte_eth_dev_count_avail() == 0) {
		fprintf(stderr, "kbridge-refapp: no ethdev port: give one with --vdev or a PCI device\n");
		return 1;
	}

	mp = rte_pktmbuf_pool_create("kb_pool", o.pool_size, 256, 0,
				     RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
	if (mp == NULL) {
		fprintf(stderr, "kbridge-refapp: mempool: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	ret = port_init(port, o.queues, mp, &tso_segs);
	if (ret < 0) {
		fprintf(stderr, "kbridge-refapp: port %u: %s\n", port, rte_strerror(-ret));
		return 1;
	}
	kp = kbridge_port_create(o.port, o.queues, o.ring_size, mp, (int)rte_socket_id());
	if (kp == NULL) {
		fprintf(stderr, "kbridge-refapp: kbridge_port_create(%s): %s\n", o.port,
			rte_strerror(rte_errno));
		return 1;
	}
	if (tso_segs > 1) {
		/* kbridge hands TCP super-frames over whole; the port cuts them. */
		kbridge_port_set_offloads(kp, KBRIDGE_APP_TSO, tso_segs);
		printf("kbridge-refapp: port %u does TSO (up to %u segments): kbridge hands over super-frames\n",
		       port, tso_segs);
	}

	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGUSR1, on_signal);
	printf("kbridge-refapp: ready port=%s queues=%u lcore=%u pool=%s pool_size=%u baseline_in_use=%u\n",
	       o.port, o.queues, rte_lcore_id(), mp->name, o.pool_size,
	       rte_mempool_in_use_count(mp));
	fflush(stdout);

	/* One lcore serves every queue: enough for an exception path. */
	while (!stop) {
		for (q = 0; q < o.queues; q++) {
			uint16_t n = rte_eth_rx_burst(port, q, pkts, BURST);
			uint16_t i, k = 0, sent;

			c.rx += n;
			for (i = 0; i < n; i++) {
				if (is_own(pkts[i], o.own_udp_port)) {
					c.own++;
					rte_pktmbuf_free(pkts[i]);
				} else {
					fwd[k++] = pkts[i];
				}
			}
			if (k > 0)
				kbridge_to_kernel(kp, q, fwd, k);

			n = kbridge_from_kernel(kp, q, pkts, BURST);
			if (n > 0) {
				sent = rte_eth_tx_burst(port, q, pkts, n);
				c.tx += sent;
				if (sent < n) {
					c.tx_dropped += n - sent;
					rte_pktmbuf_free_bulk(pkts + sent, n - sent);
				}
			}
		}
		if (dump) {
			dump = 0;
			print_counters(kp, mp, &c, o.queues);
		}
	}

	print_counters(kp, mp, &c, o.queues);
	kbridge_port_free(kp);
	rte_eth_dev_stop(port);
	rte_eth_dev_close(port);
	/* kbridge_port_free() had kbridge let go before it drained the rings:
	 * the pool must be whole. rte_mempool_audit() panics when it is not. */
	rte_mempool_audit(mp);
	printf("kbridge-refapp: mempool audit ok pool_in_use=%u\n", rte_mempool_in_use_count(mp));
	printf("kbridge-refapp: stopped pool_in_use=%u\n", rte_mempool_in_use_count(mp));
	rte_mempool_free(mp);
	rte_eal_cleanup();
	return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge-kniapp: a DPDK application written for KNI, against rte_kni.h
 * alone, in the styles KNI applications were written in; tests/kni runs it
 * on the test bed (docs/KNI.md). It owns one ethdev port and hands every
 * frame it receives to its first KNI, and sends what its KNIs send out of
 * the port.
 *
 *   kbridge-kniapp [EAL args] -- [--loop one|split] [--ops all|null|some]
 *                  [--kni N] [--name NAME] [--mac XX:XX:XX:XX:XX:XX]
 *                  [--refuse-mtu N] [--refuse-down] [--realloc N] [--busy-poll]
 *                  [--dotted] [--churn]
 *
 * --loop one: one lcore receives, transmits and serves the KNIs' requests
 *   (rte_kni_handle_request in the loop, as DPDK's KNI example did);
 *   split (the default): an rx lcore and a tx lcore, and the main thread
 *   serves the requests every 5 ms. Pollers yield the CPU when idle: the
 *   test bed's lcores share a CPU.
 * --busy-poll: pollers never yield, as the reference app's lcore and DPDK's
 *   KNI example: for lcores alone on their CPUs (make bench's bed). A
 *   yield gives the CPU to whatever else runs there, and the next frame
 *   waits for it.
 * --ops all (the default): every callback, each logged ("kniapp: NAME(...)
 *   = RESULT"); change_mtu sets the port's MTU and refuses --refuse-mtu,
 *   config_network_if refuses down with --refuse-down, config_promiscusity
 *   refuses off (the port stays promiscuous: the KNI's MAC is not the
 *   port's), config_mac_address and config_allmulticast accept.
 *   null: rte_kni_alloc(..., NULL), KNI's defaults. some: change_mtu and
 *   config_network_if only, port_id set: the rest falls to the defaults,
 *   applied to the port.
 * --kni N: N KNIs on the port, NAME_0 .. NAME_{N-1} (NAME alone when N is
 *   1); the first gets the port's traffic. --name: default vEth0. --mac:
 *   the first KNI's MAC (default: all zero, a random one).
 * --realloc N: release every KNI and allocate it again, N times, before
 *   forwarding.
 * --dotted: KNIs named as DPVS names its own: NAME.kni, then NAME.101,
 *   NAME.102, ... (its VLAN KNIs); KNI i > 0 has MAC 02:00:c6:12:01:<i>
 *   and gets the port's frames to that MAC, and a copy of its broadcast and
 *   multicast frames (the rest go to the first).
 * --churn (with --loop one): the lcore releases a KNI from the third on
 *   and allocates it again, under its other name (NAME.<100+i+N>, and back),
 *   every 50 ms while it forwards, as DPVS adds and removes VLAN KNIs from
 *   its lcore loop.
 * Each allocation and release is timed; at exit the app prints the first
 * allocation's time (it starts kbridge) and the others' median and
 * maximum ("kniapp: alloc ...", "kniapp: release ...").
 * A link monitor thread passes the port's link to rte_kni_update_link().
 * SIGINT or SIGTERM: the lcores stop, every KNI is released, the port
 * closed, the pool's mbufs in use printed (0: none leaked), exit 0.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_kni.h>

/* The mbufs one KNI keeps ready for the kernel's frames. kbridge's header
 * names the figure (KBRIDGE_FRESH_TARGET); an app built against DPDK's own
 * rte_kni.h does not see it, as a KNI app never did, so the app sizes its
 * pool from its own figure, checked where the header is visible. */
#define PER_KNI_SPARE 512u
#ifdef KBRIDGE_FRESH_TARGET
_Static_assert(PER_KNI_SPARE >= KBRIDGE_FRESH_TARGET, "the pool spares what kbridge keeps per KNI");
#endif

#define MAX_KNI 256
#define BURST 32
#define NB_MBUF 8192

static volatile int quit;
static uint16_t port_id;
static struct rte_kni *knis[MAX_KNI];
static unsigned int nb_kni = 1;
static char kni_name[RTE_KNI_NAMESIZE] = "vEth0";
static struct rte_ether_addr kni_mac;
static const char *ops_style = "all";
static int one_loop;
static int busy_poll;
static unsigned int refuse_mtu;
static int refuse_down;
static struct rte_mempool *pool;
static int dotted;
static int churn;
/* --churn: KNI i's name alternates between NAME.<100+i> and
 * NAME.<100+i+nb_kni> at each allocation, as VLAN KNIs come and go: a
 * name reused at once waits for the kernel to remove the old interface. */
static unsigned char second_name[MAX_KNI];

static void
logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Times of allocations and releases, microseconds. */
#define MAX_TIMES 4096
struct times {
	double us[MAX_TIMES];
	unsigned int n;
};
static struct times alloc_times, release_times;

static void
times_add(struct times *t, uint64_t start)
{
	if (t->n < MAX_TIMES)
		t->us[t->n++] = (double)(rte_get_timer_cycles() - start) * 1e6 / (double)rte_get_timer_hz();
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Prints what t holds, the first apart when first is set. */
static void
times_print(const char *what, struct times *t, int first)
{
	unsigned int from = first ? 1 : 0;

	if (t->n <= from) {
		logf_("kniapp: %s: none timed\n", what);
		return;
	}
	qsort(t->us + from, t->n - from, sizeof(t->us[0]), cmp_double);
	if (first)
		logf_("kniapp: %s: first %.3f ms (starts kbridge); the other %u: median %.3f ms, max %.3f ms\n", what,
		      t->us[0] / 1000, t->n - from, t->us[from + (t->n - from) / 2] / 1000, t->us[t->n - 1] / 1000);
	else
		logf_("kniapp: %s: %u: median %.3f ms, max %.3f ms\n", what, t->n, t->us[t->n / 2] / 1000,
		      t->us[t->n - 1] / 1000);
}

static void
on_signal(int sig)
{
	(void)sig;
	quit = 1;
}

static void
logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
logf_(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

static int
cb_change_mtu(uint16_t port, unsigned int mtu)
{
	int ret = mtu == refuse_mtu ? -EINVAL : rte_eth_dev_set_mtu(port, (uint16_t)mtu);

	logf_("kniapp: change_mtu(%u, %u) = %d\n", port, mtu, ret);
	return ret;
}

static int
cb_network_if(uint16_t port, uint8_t up)
{
	int ret = !up && refuse_down ? -EPERM : 0;

	logf_("kniapp: config_network_if(%u, %u) = %d\n", port, up, ret);
	return ret;
}

static int
cb_mac(uint16_t port, uint8_t mac[])
{
	logf_("kniapp: config_mac_address(%u, %02x:%02x:%02x:%02x:%02x:%02x) = 0\n", port, mac[0], mac[1],
	      mac[2], mac[3], mac[4], mac[5]);
	return 0;
}

static int
cb_promisc(uint16_t port, uint8_t on)
{
	int ret = on ? rte_eth_promiscuous_enable(port) : -EBUSY;

	logf_("kniapp: config_promiscusity(%u, %u) = %d\n", port, on, ret);
	return ret;
}

static int
cb_allmulti(uint16_t port, uint8_t on)
{
	int ret = on ? rte_eth_allmulticast_enable(port) : rte_eth_allmulticast_disable(port);

	logf_("kniapp: config_allmulticast(%u, %u) = %d\n", port, on, ret);
	return ret;
}

static struct rte_kni *
alloc_kni(unsigned int i)
{
	struct rte_kni_conf conf;
	struct rte_kni_ops ops;
	uint16_t mtu = 0;

	struct rte_kni *kni;
	uint64_t start;

	memset(&conf, 0, sizeof(conf));
	if (dotted && i == 0)
		snprintf(conf.name, RTE_KNI_NAMESIZE, "%.10s.kni", kni_name);
	else if (dotted)
		snprintf(conf.name, RTE_KNI_NAMESIZE, "%.10s.%u", kni_name,
			 100 + i + (second_name[i] ? nb_kni : 0));
	else if (nb_kni == 1)
		snprintf(conf.name, RTE_KNI_NAMESIZE, "%s", kni_name);
	else
		snprintf(conf.name, RTE_KNI_NAMESIZE, "%.12s_%u", kni_name, i);
	conf.core_id = rte_lcore_id(); /* no effect on kbridge, as force_bind and group_id */
	conf.force_bind = 1;
	conf.group_id = port_id;
	conf.mbuf_size = RTE_MBUF_DEFAULT_BUF_SIZE;
	if (i == 0)
		memcpy(conf.mac_addr, kni_mac.addr_bytes, RTE_ETHER_ADDR_LEN);
	else if (dotted) {
		static const uint8_t mac[5] = {0x02, 0x00, 0xc6, 0x12, 0x01};

		memcpy(conf.mac_addr, mac, sizeof(mac));
		conf.mac_addr[5] = (uint8_t)i;
	}
	if (rte_eth_dev_get_mtu(port_id, &mtu) == 0)
		conf.mtu = mtu;
	conf.max_mtu = 1500;

	memset(&ops, 0, sizeof(ops));
	ops.port_id = port_id;
	if (strcmp(ops_style, "null") != 0) {
		ops.change_mtu = cb_change_mtu;
		ops.config_network_if = cb_network_if;
	}
	if (strcmp(ops_style, "all") == 0) {
		ops.config_mac_address = cb_mac;
		ops.config_promiscusity = cb_promisc;
		ops.config_allmulticast = cb_allmulti;
	}
	start = rte_get_timer_cycles();
	kni = rte_kni_alloc(pool, &conf, strcmp(ops_style, "null") == 0 ? NULL : &ops);
	if (kni != NULL)
		times_add(&alloc_times, start);
	return kni;
}

/* Releases KNI i, timed: 0, or -1. */
static int
release_kni(unsigned int i)
{
	uint64_t start = rte_get_timer_cycles();

	if (rte_kni_release(knis[i]) != 0)
		return -1;
	times_add(&release_times, start);
	knis[i] = NULL;
	return 0;
}

/* --dotted: the KNI a frame to mac is for, by its MAC; 0 for any other. */
static unsigned int
kni_of(const struct rte_ether_addr *mac)
{
	static const uint8_t pre[5] = {0x02, 0x00, 0xc6, 0x12, 0x01};

	if (dotted && memcmp(mac->addr_bytes, pre, sizeof(pre)) == 0 && mac->addr_bytes[5] > 0 &&
	    mac->addr_bytes[5] < nb_kni && knis[mac->addr_bytes[5]] != NULL)
		return mac->addr_bytes[5];
	return 0;
}

static void
serve_requests(void)
{
	unsigned int i;

	for (i = 0; i < nb_kni; i++)
		if (knis[i] != NULL)
			rte_kni_handle_request(knis[i]);
}

/* NIC to the first KNI (--dotted: to the KNI of the frame's MAC, and a
 * copy of broadcast and multicast frames to the second): what a KNI does
 * not take is freed here. */
static unsigned int
ingress(void)
{
	struct rte_mbuf *pkts[BURST];
	unsigned int n, sent, i;

	n = rte_eth_rx_burst(port_id, 0, pkts, BURST);
	if (n == 0)
		return 0;
	if (!dotted) {
		sent = rte_kni_tx_burst(knis[0], pkts, n);
		if (sent < n)
			rte_pktmbuf_free_bulk(pkts + sent, n - sent);
		return n;
	}
	for (i = 0; i < n; i++) {
		const struct rte_ether_hdr *eth = rte_pktmbuf_mtod(pkts[i], const struct rte_ether_hdr *);
		unsigned int k = kni_of(&eth->dst_addr);

		if (rte_is_multicast_ether_addr(&eth->dst_addr) && nb_kni > 1 && knis[1] != NULL) {
			struct rte_mbuf *copy = rte_pktmbuf_copy(pkts[i], pool, 0, UINT32_MAX);

			if (copy != NULL && rte_kni_tx_burst(knis[1], &copy, 1) != 1)
				rte_pktmbuf_free(copy);
		}
		if (rte_kni_tx_burst(knis[k], &pkts[i], 1) != 1)
			rte_pktmbuf_free(pkts[i]);
	}
	return n;
}

/* Every KNI to the NIC. */
static unsigned int
egress(void)
{
	struct rte_mbuf *pkts[BURST];
	unsigned int i, n, sent, moved = 0;

	for (i = 0; i < nb_kni; i++) {
		if (knis[i] == NULL)
			continue;
		n = rte_kni_rx_burst(knis[i], pkts, BURST);
		if (n == 0)
			continue;
		sent = rte_eth_tx_burst(port_id, 0, pkts, (uint16_t)n);
		if (sent < n)
			rte_pktmbuf_free_bulk(pkts + sent, n - sent);
		moved += n;
	}
	return moved;
}

/* --churn: every 50 ms, the next KNI from the third on released and
 * allocated again, on this lcore. */
static void
churn_one(uint64_t *next, unsigned int *k)
{
	uint64_t now = rte_get_timer_cycles();

	if (!churn || nb_kni < 3 || now < *next)
		return;
	*next = now + rte_get_timer_hz() / 20;
	second_name[*k] = !second_name[*k];
	if (release_kni(*k) != 0 || (knis[*k] = alloc_kni(*k)) == NULL) {
		logf_("kniapp: churn: KNI %u failed\n", *k);
		quit = 1;
		return;
	}
	*k = *k + 1 < nb_kni ? *k + 1 : 2;
}

static int
lcore_one(void *arg)
{
	uint64_t next = 0;
	unsigned int k = 2;

	(void)arg;
	logf_("kniapp: lcore %u: rx, tx and requests%s\n", rte_lcore_id(), churn ? ", churning KNIs" : "");
	while (!quit) {
		unsigned int moved = ingress() + egress();

		serve_requests();
		churn_one(&next, &k);
		if (moved == 0 && !busy_poll)
			sched_yield();
	}
	return 0;
}

static int
lcore_rx(void *arg)
{
	(void)arg;
	logf_("kniapp: lcore %u: rx\n", rte_lcore_id());
	while (!quit)
		if (ingress() == 0 && !busy_poll)
			sched_yield();
	return 0;
}

static int
lcore_tx(void *arg)
{
	(void)arg;
	logf_("kniapp: lcore %u: tx\n", rte_lcore_id());
	while (!quit)
		if (egress() == 0 && !busy_poll)
			sched_yield();
	return 0;
}

static void *
link_monitor(void *arg)
{
	int last = -1;

	(void)arg;
	while (!quit) {
		struct rte_eth_link link;
		unsigned int i;

		memset(&link, 0, sizeof(link));
		if (rte_eth_link_get_nowait(port_id, &link) == 0 && link.link_status != last) {
			/* --churn: the lcore frees and makes the others. */
			for (i = 0; i < (churn ? 2u : nb_kni) && i < nb_kni; i++) {
				int prev = rte_kni_update_link(knis[i], link.link_status);

				logf_("kniapp: %s link %s (was %s)\n", rte_kni_get_name(knis[i]),
				      link.link_status ? "up" : "down", prev == 1 ? "up" : prev == 0 ? "down" : "?");
			}
			last = link.link_status;
		}
		usleep(100 * 1000);
	}
	return NULL;
}

static int
port_init(void)
{
	struct rte_eth_conf conf;
	int ret;

	memset(&conf, 0, sizeof(conf));
	ret = rte_eth_dev_configure(port_id, 1, 1, &conf);
	if (ret == 0)
		ret = rte_eth_rx_queue_setup(port_id, 0, 1024, rte_eth_dev_socket_id(port_id), NULL, pool);
	if (ret == 0)
		ret = rte_eth_tx_queue_setup(port_id, 0, 1024, rte_eth_dev_socket_id(port_id), NULL);
	if (ret == 0)
		ret = rte_eth_dev_start(port_id);
	/* Frames for the KNIs' MACs are not the port's. */
	if (ret == 0)
		ret = rte_eth_promiscuous_enable(port_id);
	return ret;
}

static int
parse_args(int argc, char **argv)
{
	static const struct option longs[] = {
		{"loop", required_argument, NULL, 'l'},   {"ops", required_argument, NULL, 'o'},
		{"kni", required_argument, NULL, 'k'},    {"name", required_argument, NULL, 'n'},
		{"mac", required_argument, NULL, 'm'},    {"refuse-mtu", required_argument, NULL, 'r'},
		{"refuse-down", no_argument, NULL, 'd'},  {"realloc", required_argument, NULL, 'a'},
		{"busy-poll", no_argument, NULL, 'b'},    {"dotted", no_argument, NULL, 't'},
		{"churn", no_argument, NULL, 'c'},
		{NULL, 0, NULL, 0},
	};
	int c, realloc_n = 0;

	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 'l':
			one_loop = strcmp(optarg, "one") == 0;
			break;
		case 'o':
			ops_style = optarg;
			break;
		case 'k':
			nb_kni = (unsigned int)atoi(optarg);
			break;
		case 'n':
			snprintf(kni_name, sizeof(kni_name), "%s", optarg);
			break;
		case 'm':
			if (rte_ether_unformat_addr(optarg, &kni_mac) < 0)
				return -1;
			break;
		case 'r':
			refuse_mtu = (unsigned int)atoi(optarg);
			break;
		case 'd':
			refuse_down = 1;
			break;
		case 'a':
			realloc_n = atoi(optarg);
			break;
		case 'b':
			busy_poll = 1;
			break;
		case 't':
			dotted = 1;
			break;
		case 'c':
			churn = 1;
			break;
		default:
			return -1;
		}
	}
	if (nb_kni < 1 || nb_kni > MAX_KNI || (churn && !one_loop))
		return -1;
	return realloc_n;
}

int
main(int argc, char **argv)
{
	unsigned int lcores[2], nl = 0, i, lc;
	pthread_t monitor;
	int ret, realloc_n, r;

	ret = rte_eal_init(argc, argv);
	if (ret < 0)
		rte_exit(EXIT_FAILURE, "rte_eal_init failed\n");
	realloc_n = parse_args(argc - ret, argv + ret);
	if (realloc_n < 0)
		rte_exit(EXIT_FAILURE, "usage: see tests/kniapp/kniapp.c\n");
	RTE_LCORE_FOREACH_WORKER(lc)
		if (nl < 2)
			lcores[nl++] = lc;
	if (nl < (one_loop ? 1u : 2u))
		rte_exit(EXIT_FAILURE, "--loop %s needs %u worker lcores\n", one_loop ? "one" : "split",
			 one_loop ? 1u : 2u);
	if (rte_eth_dev_count_avail() < 1)
		rte_exit(EXIT_FAILURE, "no ethdev port\n");
	/* Each KNI keeps mbufs ready for kbridge to fill, as KNI's alloc
	 * FIFO did: the pool spares them (PER_KNI_SPARE). */
	pool = rte_pktmbuf_pool_create("kni_pool", NB_MBUF + nb_kni * (PER_KNI_SPARE + 2 * BURST), 256,
				       0, RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
	if (pool == NULL)
		rte_exit(EXIT_FAILURE, "mbuf pool: %s\n", rte_strerror(rte_errno));
	if (port_init() != 0)
		rte_exit(EXIT_FAILURE, "port %u did not start\n", port_id);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	rte_kni_init(nb_kni);
	for (r = 0; r <= realloc_n; r++) {
		for (i = 0; i < nb_kni; i++) {
			if (r > 0) {
				if (release_kni(i) != 0)
					rte_exit(EXIT_FAILURE, "rte_kni_release failed\n");
				logf_("kniapp: released for realloc\n");
			}
			knis[i] = alloc_kni(i);
			if (knis[i] == NULL)
				rte_exit(EXIT_FAILURE, "rte_kni_alloc failed\n");
			if (rte_kni_get(rte_kni_get_name(knis[i])) != knis[i])
				rte_exit(EXIT_FAILURE, "rte_kni_get does not find %s\n", rte_kni_get_name(knis[i]));
			logf_("kniapp: allocated %s\n", rte_kni_get_name(knis[i]));
		}
	}
	if (pthread_create(&monitor, NULL, link_monitor, NULL) != 0)
		rte_exit(EXIT_FAILURE, "link monitor thread\n");
	if (one_loop) {
		rte_eal_remote_launch(lcore_one, NULL, lcores[0]);
	} else {
		rte_eal_remote_launch(lcore_rx, NULL, lcores[0]);
		rte_eal_remote_launch(lcore_tx, NULL, lcores[1]);
	}
	logf_("kniapp: forwarding (%s loop%s, ops %s, %u KNI)\n", one_loop ? "one" : "split",
	      busy_poll ? ", busy poll" : "", ops_style, nb_kni);
	while (!quit) {
		if (!one_loop)
			serve_requests();
		usleep(5000);
	}
	rte_eal_mp_wait_lcore();
	pthread_join(monitor, NULL);
	ret = 0;
	for (i = 0; i < nb_kni; i++) {
		const char *name = rte_kni_get_name(knis[i]);
		char copy[RTE_KNI_NAMESIZE];

		snprintf(copy, sizeof(copy), "%s", name);
		if (release_kni(i) != 0) {
			logf_("kniapp: rte_kni_release(%s) failed\n", copy);
			ret = 1;
		} else {
			logf_("kniapp: released %s\n", copy);
		}
	}
	times_print("alloc", &alloc_times, 1);
	times_print("release", &release_times, 0);
	rte_kni_close();
	rte_eth_dev_stop(port_id);
	rte_eth_dev_close(port_id);
	/* Every mbuf back: what the rings held was freed by rte_kni_release. */
	logf_("kniapp: mbufs in use after release: %u\n", rte_mempool_in_use_count(pool));
	rte_eal_cleanup();
	logf_("kniapp: exit %d\n", ret);
	return ret;
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * mixwake: one process with a kbridge.h port of its own and a KNI of
 * librte_kni.so, both served by the app's one kbridge (the discovering
 * kbridge the KNI's rte_kni_alloc() starts), both with wakeups (tests/kni,
 * TestKNIApplication). Built with librte_kni's Cflags and libs: the app's
 * kbridge.h copy and the library's are two, and only one of them is
 * DPDK's KBRIDGE_MP_WAKEUP and KBRIDGE_MP_DOORBELL action; the eventfd of
 * each worker reaches its port only if that action's registry holds both
 * ports, and the app's port rings the kbridge's doorbell only if both
 * copies share it (include/kbridge/kbridge_wakeup.h).
 *
 *   mixwake [EAL args] -- [--kni-first]
 *
 * --kni-first: the library's KNI first (its copy registers the actions and
 * takes the doorbell), else the app's port first (kbridge finds it when it
 * starts). Prints "mixwake: eventfd port=P kni=K" (1 when the port's
 * worker eventfd arrived within 10 s, else 0), releases both, stops the
 * kbridge (rte_kni_close) and exits 0 when both are 1.
 */
#include <stdio.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_kni.h>
#include <rte_mbuf.h>

#define PORT_NAME "kbmix"
#define KNI_NAME "kbmixkni"

static struct kbridge_port *port;
static struct rte_kni *kni;

/* The app's own port: made here, served by the kbridge the KNI starts
 * (discover), whichever comes first; main waits for it. */
static int
app_port(struct rte_mempool *pool)
{
	port = kbridge_port_create(PORT_NAME, 1, 1024, pool, (int)rte_socket_id());
	if (port == NULL) {
		printf("mixwake: kbridge_port_create: %s\n", rte_strerror(rte_errno));
		return -1;
	}
	return 0;
}

static int
lib_kni(struct rte_mempool *pool)
{
	struct rte_kni_conf conf;

	memset(&conf, 0, sizeof(conf));
	snprintf(conf.name, sizeof(conf.name), "%s", KNI_NAME);
	kni = rte_kni_alloc(pool, &conf, NULL);
	if (kni == NULL) {
		printf("mixwake: rte_kni_alloc failed\n");
		return -1;
	}
	return 0;
}

/* Whether p's queue 0 got its worker's eventfd within 10 s: set by the
 * wakeup handler of whichever copy registered the action. */
static int
has_eventfd(const struct kbridge_port *p)
{
	int i;

	for (i = 0; i < 1000; i++) {
		if (__atomic_load_n(&p->eventfd[0], __ATOMIC_ACQUIRE) >= 0)
			return 1;
		rte_delay_us_sleep(10000);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	struct rte_mempool *pool;
	char why[256] = "";
	int ret, kni_first, got_port, got_kni;

	ret = rte_eal_init(argc, argv);
	if (ret < 0)
		rte_exit(1, "rte_eal_init failed\n");
	kni_first = argc - ret > 1 && strcmp(argv[ret + 1], "--kni-first") == 0;
	pool = rte_pktmbuf_pool_create("mixwake_pool", 4096, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
				       (int)rte_socket_id());
	if (pool == NULL)
		rte_exit(1, "mbuf pool: %s\n", rte_strerror(rte_errno));
	if (rte_kni_init(1) != 0)
		rte_exit(1, "rte_kni_init failed\n");
	if (kni_first ? lib_kni(pool) < 0 || app_port(pool) < 0 : app_port(pool) < 0 || lib_kni(pool) < 0)
		rte_exit(1, "mixwake: no port or no KNI\n");
	if (kbridge_port_wait_served(port, 30000, why, sizeof(why)) < 0)
		rte_exit(1, "mixwake: %s: %s\n", PORT_NAME, why);
	got_port = has_eventfd(port);
	got_kni = has_eventfd(kni->port);
	printf("mixwake: eventfd port=%d kni=%d\n", got_port, got_kni);
	fflush(stdout);

	ret = 0;
	if (rte_kni_release(kni) != 0)
		ret = 1;
	if (kbridge_port_free(port) < 0)
		ret = 1;
	rte_kni_close(); /* the kbridge removes the interfaces as it stops */
	printf("mixwake: released, mbufs in use: %u\n", rte_mempool_in_use_count(pool));
	rte_eal_cleanup();
	return ret != 0 || !got_port || !got_kni;
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * knilink: a program that declares KNI's functions itself, as DPDK 22.11's
 * lib/kni/rte_kni.h declares them (and as a Rust crate's extern block or a
 * CMake check_function_exists does), includes no header of kbridge's and
 * links -lrte_kni. It calls each only when given an argument, without an
 * EAL (librte_kni must refuse: rte_kni_init's and rte_kni_alloc's answers
 * printed); run bare, it shows the loader resolved every one (linked with
 * -z now) and exits 0. With KNILINK_HEADER it includes
 * kbridge's rte_kni.h instead, as librte_kni.pc's Cflags name it
 * (RTE_KNI_LIBRARY: the library's functions, not the header's inline ones).
 */
#include <stdint.h>
#include <stdio.h>

#ifdef KNILINK_HEADER
#include <rte_kni.h>
#else
struct rte_kni;
struct rte_kni_conf;
struct rte_kni_ops;
struct rte_mbuf;
struct rte_mempool;

int rte_kni_init(unsigned int max_kni_ifaces);
struct rte_kni *rte_kni_alloc(struct rte_mempool *pktmbuf_pool, const struct rte_kni_conf *conf,
			      struct rte_kni_ops *ops);
int rte_kni_release(struct rte_kni *kni);
int rte_kni_handle_request(struct rte_kni *kni);
unsigned rte_kni_rx_burst(struct rte_kni *kni, struct rte_mbuf **mbufs, unsigned num);
unsigned rte_kni_tx_burst(struct rte_kni *kni, struct rte_mbuf **mbufs, unsigned num);
struct rte_kni *rte_kni_get(const char *name);
const char *rte_kni_get_name(const struct rte_kni *kni);
int rte_kni_register_handlers(struct rte_kni *kni, struct rte_kni_ops *ops);
int rte_kni_unregister_handlers(struct rte_kni *kni);
int rte_kni_update_link(struct rte_kni *kni, unsigned int linkup);
void rte_kni_close(void);
#endif

int
main(int argc, char **argv)
{
	struct rte_kni *kni;

	(void)argv;
	if (argc < 2)
		return 0;
	printf("rte_kni_init(1) = %d\n", rte_kni_init(1));
	kni = rte_kni_alloc(NULL, NULL, NULL);
	printf("rte_kni_alloc = %s\n", kni == NULL ? "NULL" : "a KNI");
	rte_kni_handle_request(kni);
	rte_kni_rx_burst(kni, NULL, 0);
	rte_kni_tx_burst(kni, NULL, 0);
	rte_kni_register_handlers(kni, NULL);
	rte_kni_unregister_handlers(kni);
	rte_kni_update_link(kni, 1);
	printf("rte_kni_get = %s\n", rte_kni_get("x") == NULL ? "NULL" : "a KNI");
	rte_kni_release(kni);
	rte_kni_close();
	return 0;
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * knilayout: prints the layout of KNI's structures under whichever
 * rte_kni.h is first on the include path (DPDK's own lib/kni, or kbridge's
 * ring/): each member's offset and size, force_bind's byte and bit, each
 * structure's size, RTE_KNI_NAMESIZE. tests/libkni builds it against both
 * and compares the outputs.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <rte_kni.h>

#define MEMBER(s, m) printf("%s.%s offset %zu size %zu\n", #s, #m, offsetof(struct s, m), sizeof(((struct s *)0)->m))

int
main(void)
{
	struct rte_kni_conf c;
	const unsigned char *b = (const unsigned char *)&c;
	size_t i;

	printf("RTE_KNI_NAMESIZE %d\n", RTE_KNI_NAMESIZE);
	MEMBER(rte_kni_conf, name);
	MEMBER(rte_kni_conf, core_id);
	MEMBER(rte_kni_conf, group_id);
	MEMBER(rte_kni_conf, mbuf_size);
	MEMBER(rte_kni_conf, addr);
	MEMBER(rte_kni_conf, id);
	MEMBER(rte_kni_conf, mac_addr);
	MEMBER(rte_kni_conf, mtu);
	MEMBER(rte_kni_conf, min_mtu);
	MEMBER(rte_kni_conf, max_mtu);
	memset(&c, 0, sizeof(c));
	c.force_bind = 1;
	for (i = 0; i < sizeof(c); i++)
		if (b[i] != 0)
			printf("rte_kni_conf.force_bind byte %zu value 0x%02x\n", i, b[i]);
	printf("rte_kni_conf size %zu\n", sizeof(struct rte_kni_conf));
	MEMBER(rte_kni_ops, port_id);
	MEMBER(rte_kni_ops, change_mtu);
	MEMBER(rte_kni_ops, config_network_if);
	MEMBER(rte_kni_ops, config_mac_address);
	MEMBER(rte_kni_ops, config_promiscusity);
	MEMBER(rte_kni_ops, config_allmulticast);
	printf("rte_kni_ops size %zu\n", sizeof(struct rte_kni_ops));
	return 0;
}

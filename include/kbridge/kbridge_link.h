/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge_link.h: what the app reports of its port for kbridge to give the
 * kernel interface: the link (carrier, speed, duplex) and the MAC. Part of
 * kbridge.h, which applications include.
 */
#ifndef KBRIDGE_LINK_H
#define KBRIDGE_LINK_H

#include <stdint.h>
#include <string.h>

#include <rte_atomic.h>

#include "kbridge_ring.h"
#include "kbridge_wakeup.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kbridge_ctl.link (version 4), written by kbridge_port_set_link(): the
 * speed in Mb/s in the low 32 bits and these flags. 0: never reported, and
 * kbridge leaves the kernel interface's carrier on. */
#define KBRIDGE_LINK_REPORTED (1ull << 32)
#define KBRIDGE_LINK_UP (1ull << 33)
#define KBRIDGE_LINK_FULL_DUPLEX (1ull << 34)

/*
 * Report the app port's link: up or down, its speed in Mb/s (a
 * RTE_ETH_SPEED_NUM_* value; 0 if unknown) and duplex. kbridge sets the
 * kernel interface's carrier from it within milliseconds, as a NIC's driver
 * does: down, the interface shows NO-CARRIER and its routes linkdown. Call
 * it once the port is started and whenever its link changes: from an LSC
 * callback or the app's control path (rte_eth_link_get_nowait), never from
 * the lcore loop. An app that never calls it keeps the carrier on. A
 * kbridge that serves every port of the app (discover) hears it on the
 * doorbell, and so looks at the links only then.
 */
static inline void
kbridge_port_set_link(struct kbridge_port *p, int up, uint32_t speed_mbps,
		      int full_duplex)
{
	uint64_t v;

	if (speed_mbps == UINT32_MAX) /* RTE_ETH_SPEED_NUM_UNKNOWN */
		speed_mbps = 0;
	v = KBRIDGE_LINK_REPORTED | speed_mbps;

	if (up)
		v |= KBRIDGE_LINK_UP;
	if (full_duplex)
		v |= KBRIDGE_LINK_FULL_DUPLEX;
	__atomic_store_n(&p->ctl->link, v, __ATOMIC_RELEASE);
	kbridge_doorbell_ring_();
}

/*
 * Record the app port's MAC (rte_eth_macaddr_get): kbridge gives it to the
 * kernel interface, as a NIC's driver gives its own, unless kbridge's
 * configuration names one (interface.mac). Call it before kbridge starts.
 */
static inline void
kbridge_port_set_mac(struct kbridge_port *p, const uint8_t mac[6])
{
	memcpy(p->ctl->app_mac, mac, sizeof(p->ctl->app_mac));
	__atomic_store_n(&p->ctl->app_mac_set, 1, __ATOMIC_RELEASE);
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_LINK_H */

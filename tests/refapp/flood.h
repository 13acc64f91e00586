/* SPDX-License-Identifier: BSD-3-Clause
 *
 * flood.h: the reference app's flood generator (--flood FILE). It makes
 * frames toward the kernel on the app's own lcore, at fixed rates, as a NIC
 * would deliver a flood to an exception path: they enter kbridge's path
 * where the NIC's frames do (kbridge_to_kernel, or the virtio port with
 * --vhost), so that what a flood costs kbridge and the kernel is measured
 * apart from what generating it costs (the bed's hping3 shared CPU 0 with
 * them). FILE holds "KIND=PPS" words, read at start and again on SIGUSR2:
 *   udp    UDP from the peer to a closed port (9), source ports varying
 *   syn    TCP SYN from the peer to an unopened port (80)
 *   syn22  TCP SYN from the peer to port 22
 *   bgp    TCP SYN from port 179 to port 80, TTL 64: a forged BGP source
 *   arp    ARP requests for the host's address from senders of its subnet
 *          that do not exist (.64 to .127), so that no real neighbour's
 *          entry is overwritten
 * "from=IP to=IP" set the peer's and the host's IPv4 addresses (defaults
 * 198.18.0.1 and 198.18.0.2: the bed's), "mac=MAC" kb0's MAC (default: the
 * port's, which kb0 takes in ring mode; --vhost needs it). Frames carry
 * correct checksums and are 60 bytes long. Each kind's
 * frames made and queued (taken by kbridge_to_kernel or the virtio port)
 * are printed on a line of their own after each stats line:
 *   kbridge-refapp: flood udp=MADE/QUEUED syn=MADE/QUEUED ...
 */
#ifndef REFAPP_FLOOD_H
#define REFAPP_FLOOD_H

#include <stdint.h>

#include <rte_ether.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

struct flood;

/* The generator for spec file path, its frames from mp to dst, or NULL
 * (with a message on stderr) when the file cannot be read or says nonsense. */
struct flood *flood_new(const char *path, struct rte_mempool *mp,
			const struct rte_ether_addr *dst);
/* Up to max frames of one kind that are due now, into m; 0 when none.
 * Pass what the path took of them to flood_took before the next call. */
uint16_t flood_burst(struct flood *f, struct rte_mbuf **m, uint16_t max);
void flood_took(struct flood *f, uint16_t queued);
/* Prints the counters' line. */
void flood_print(const struct flood *f);
void flood_free(struct flood *f);

#endif

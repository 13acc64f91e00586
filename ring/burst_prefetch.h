/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst_prefetch.h: asks for a dequeued burst's frame bytes before they are read.
 * The app's lcore on the other CPU wrote them, so the first read of each
 * cache line (the checksum check before coalescing) waits for a transfer
 * from that CPU's cache; asked for all at once, right after the dequeue,
 * the transfers overlap one another and the work before the check instead
 * of stalling it one frame at a time. The burst core and the floor
 * forwarder (tests/floor) both call it, so that the floor stays the best
 * the path can do.
 */
#ifndef KB_PREFETCH_H
#define KB_PREFETCH_H

#include <stdint.h>

#include <rte_common.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>

/* At most this many bytes of data a burst, about an L1 data cache (32-48
 * KiB on current x86 cores) plus the lines read before the last ones
 * arrive: far beyond it the lines asked for first would be evicted before
 * they are read. The default burst of 32 frames is 48 KiB. */
#define KB_PREFETCH_MAX (64 * 1024)

/* Prefetches the headers of m[0..n), then each first segment's data. */
static inline void
kb_prefetch_burst(struct rte_mbuf *const *m, uint16_t n)
{
	uint32_t budget = KB_PREFETCH_MAX;
	uint16_t i;

	for (i = 0; i < n; i++)
		rte_prefetch0(m[i]); /* buf_addr, data_off, data_len */
	for (i = 0; i < n && budget > 0; i++) {
		uintptr_t p = rte_pktmbuf_mtod(m[i], uintptr_t);
		uint32_t len = RTE_MIN((uint32_t)m[i]->data_len, budget);
		uintptr_t end = p + len;

		budget -= len;
		for (p &= ~(uintptr_t)(RTE_CACHE_LINE_SIZE - 1); p < end; p += RTE_CACHE_LINE_SIZE)
			rte_prefetch0((const void *)p);
	}
}

#endif

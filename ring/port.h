/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef KB_PORT_H
#define KB_PORT_H

#include <rte_mempool.h>
#include <rte_ring.h>

#include "include/kbridge.h"

/* What a secondary process finds of a port the app created. */
struct kb_port_info {
	struct kbridge_ctl *ctl;
	struct rte_mempool *pool;
	struct rte_ring *to_kernel[KBRIDGE_MAX_QUEUES];
	struct rte_ring *from_kernel[KBRIDGE_MAX_QUEUES];
	uint32_t version;      /* of the app's kbridge.h */
	uint32_t app_offloads; /* KBRIDGE_APP_*; 0 for a version-1 app */
	uint16_t app_max_segs;
};

int kb_eal_init(int argc, char **argv);
int kb_port_open(const char *name, struct kb_port_info *info);
int kb_send_eventfd(const char *name, uint16_t queue, int fd);
unsigned int kb_pool_in_use(const struct rte_mempool *mp);
unsigned int kb_pool_size(const struct rte_mempool *mp);
unsigned int kb_pool_data_room(struct rte_mempool *mp);
/* Sets the queue's need-wakeup flag, issues a full fence and returns how
 * many packets wait in r: the worker's half of the handshake, in one call. */
unsigned int kb_prepare_to_park(struct kbridge_queue_ctl *qc, const struct rte_ring *r);
void kb_unpark(struct kbridge_queue_ctl *qc);

#endif

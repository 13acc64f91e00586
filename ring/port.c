/* SPDX-License-Identifier: BSD-3-Clause */
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_memzone.h>

#include "port.h"

int
kb_eal_init(int argc, char **argv)
{
	int ret = rte_eal_init(argc, argv);

	return ret < 0 ? -rte_errno : ret;
}

int
kb_port_open(const char *name, struct kb_port_info *info)
{
	char mzname[RTE_MEMZONE_NAMESIZE];
	char rname[RTE_RING_NAMESIZE];
	const struct rte_memzone *mz;
	struct kbridge_ctl *c;
	uint16_t q;

	memset(info, 0, sizeof(*info));
	if (snprintf(mzname, sizeof(mzname), KBRIDGE_MZ_PREFIX "%s", name) >=
	    (int)sizeof(mzname))
		return -ENAMETOOLONG;
	mz = rte_memzone_lookup(mzname);
	if (mz == NULL)
		return -ENOENT;
	c = mz->addr;
	if (c->magic != KBRIDGE_MAGIC)
		return -EPROTO;
	if (c->version < KBRIDGE_VERSION_MIN || c->version > KBRIDGE_VERSION)
		return -EPROTONOSUPPORT;
	/* A version-1 block ends before the version-2 fields. */
	if (mz->len < (c->version >= 2 ? sizeof(*c) :
		       offsetof(struct kbridge_ctl, app_offloads)))
		return -EBADMSG;
	info->version = c->version;
	if (c->version >= 2) {
		info->app_offloads = __atomic_load_n(&c->app_offloads, __ATOMIC_ACQUIRE);
		info->app_max_segs = c->app_max_segs;
	}
	info->ctl = c;
	info->pool = rte_mempool_lookup(c->mempool);
	if (info->pool == NULL)
		return -ESRCH;
	for (q = 0; q < c->nb_queues && q < KBRIDGE_MAX_QUEUES; q++) {
		kbridge_ring_name(rname, sizeof(rname), name, "tk", q);
		info->to_kernel[q] = rte_ring_lookup(rname);
		kbridge_ring_name(rname, sizeof(rname), name, "fk", q);
		info->from_kernel[q] = rte_ring_lookup(rname);
		if (info->to_kernel[q] == NULL || info->from_kernel[q] == NULL)
			return -ENXIO;
	}
	return 0;
}

int
kb_send_eventfd(const char *name, uint16_t queue, int fd)
{
	struct kbridge_mp_wakeup req;
	struct rte_mp_msg msg;
	struct rte_mp_reply reply;
	struct timespec ts = { .tv_sec = 2, .tv_nsec = 0 };
	int32_t status = -EIO;

	memset(&req, 0, sizeof(req));
	rte_strlcpy(req.name, name, sizeof(req.name));
	req.queue = queue;
	memset(&msg, 0, sizeof(msg));
	rte_strlcpy(msg.name, KBRIDGE_MP_WAKEUP, sizeof(msg.name));
	msg.len_param = sizeof(req);
	memcpy(msg.param, &req, sizeof(req));
	msg.num_fds = 1;
	msg.fds[0] = fd;
	memset(&reply, 0, sizeof(reply));
	if (rte_mp_request_sync(&msg, &reply, &ts) < 0)
		return -rte_errno;
	if (reply.nb_received == 1 && reply.msgs[0].len_param >= (int)sizeof(status))
		memcpy(&status, reply.msgs[0].param, sizeof(status));
	else
		status = -ETIMEDOUT;
	free(reply.msgs);
	return status;
}

unsigned int
kb_pool_in_use(const struct rte_mempool *mp)
{
	return rte_mempool_in_use_count(mp);
}

unsigned int
kb_pool_size(const struct rte_mempool *mp)
{
	return mp->size;
}

unsigned int
kb_pool_data_room(struct rte_mempool *mp)
{
	return rte_pktmbuf_data_room_size(mp) - RTE_PKTMBUF_HEADROOM;
}

unsigned int
kb_prepare_to_park(struct kbridge_queue_ctl *qc, const struct rte_ring *r)
{
	/* Store, full fence, load: paired with kbridge_to_kernel()'s enqueue,
	 * fence, load of need_wakeup. One of the two sides sees the other on
	 * every architecture, not only on x86's strong ordering. */
	__atomic_store_n(&qc->need_wakeup, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return rte_ring_count(r);
}

void
kb_unpark(struct kbridge_queue_ctl *qc)
{
	__atomic_store_n(&qc->need_wakeup, 0, __ATOMIC_RELEASE);
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge_port.h: creating and freeing a port. Part of kbridge.h, which
 * applications include.
 *
 * Freeing: kbridge_port_free() never touches the rings while the kbridge that
 * owns the port (pid and start time) runs; it returns -EBUSY instead and lets
 * the app decide.
 */
#ifndef KBRIDGE_PORT_H
#define KBRIDGE_PORT_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rte_atomic.h>
#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_memzone.h>
#include <rte_ring.h>
#include <rte_spinlock.h>
#include <rte_string_fns.h>
#include <rte_version.h>

#include "kbridge_ring.h"
#include "kbridge_owner.h"
#include "kbridge_wakeup.h"

#ifdef __cplusplus
extern "C" {
#endif

static inline void
kbridge_drain_ring_(struct rte_ring *r)
{
	void *objs[32];
	unsigned int n;

	if (r == NULL)
		return;
	while ((n = rte_ring_dequeue_burst(r, objs, RTE_DIM(objs), NULL)) > 0)
		rte_pktmbuf_free_bulk((struct rte_mbuf **)objs, n);
}

/*
 * Frees a port; call it once no lcore uses the port. kbridge is told
 * (kbridge_ctl.closing) and given KBRIDGE_FREE_WAIT_MS to let go: it stops
 * touching the rings, frees what it holds, clears owner and exits, saying
 * why. Then what a dead kbridge held is freed, the rings are drained (their
 * mbufs freed: the fresh and spent rings' too), and the rings, the
 * memzones, the eventfds and the handle are freed. Better: stop kbridge
 * first.
 *
 * Returns 0 once the port is freed (also for NULL).
 *
 * Returns -EBUSY, and sets rte_errno to EBUSY, when the kbridge that serves
 * the port still lives after the wait: stopped (SIGSTOP), in a frozen
 * cgroup, starved of CPU. It may still dequeue from to_kernel (its ring has
 * one consumer) and free the mbufs it holds, so nothing was drained or
 * freed: the handle stays valid, closing stays set (kbridge stops as soon
 * as it runs again), and kbridge_port_owner_pid() names it. The app decides:
 * call kbridge_port_free() again to wait again, or exit without it (kbridge
 * watches the app's pid and exits too; the shared memory goes with the last
 * process that maps it). Only a kbridge that runs counts: one that exited,
 * a zombie (state Z, not reaped yet) and a pid that now names another
 * process (another start time) are dead, and the port is freed at once,
 * what they held with it.
 */
static inline int
kbridge_port_free(struct kbridge_port *p)
{
	int i;

	if (p == NULL)
		return 0;
	if (p->ctl != NULL && kbridge_port_detach_(p) < 0) {
		rte_errno = EBUSY;
		return -EBUSY;
	}
	rte_spinlock_lock(&kbridge_ports_lock_);
	for (i = 0; i < KBRIDGE_MAX_PORTS; i++)
		if (kbridge_ports_[i] == p)
			kbridge_ports_[i] = NULL;
	rte_spinlock_unlock(&kbridge_ports_lock_);
	if (p->ctl != NULL)
		kbridge_held_free_(p);
	for (i = 0; i < KBRIDGE_MAX_QUEUES; i++) {
		kbridge_drain_ring_(p->to_kernel[i]);
		kbridge_drain_ring_(p->from_kernel[i]);
		kbridge_drain_ring_(p->fresh[i]);
		kbridge_drain_ring_(p->spent[i]);
		rte_ring_free(p->to_kernel[i]);
		rte_ring_free(p->from_kernel[i]);
		rte_ring_free(p->fresh[i]);
		rte_ring_free(p->spent[i]);
		if (p->eventfd[i] >= 0)
			close(p->eventfd[i]);
	}
	if (p->mz != NULL)
		rte_memzone_free(p->mz);
	rte_free(p);
	return 0;
}

/* The spent ring's slots for to_kernel and fresh rings of ring_size slots.
 * Every mbuf kbridge puts on it after the app last found it empty (both
 * burst calls free it until they do) was then in the to_kernel or the fresh
 * ring, or held by kbridge's worker, or was put on one of the two by the
 * one app call under way (the next call frees the spent ring first): at
 * most two rings' worth of each and two records' worth of held mbufs, so
 * it never fills while the app calls kbridge_to_kernel() or
 * kbridge_from_kernel(). When it does (an app that stopped calling them),
 * kbridge keeps what it is done with and puts it later: it never frees an
 * app's mbuf, nor loses one. */
#define KBRIDGE_SPENT_SLOTS(ring_size) \
	rte_align32pow2(4 * (ring_size) + 2 * KBRIDGE_HELD_MAX)

/*
 * Create exception port `name` with `nb_queues` queue pairs of `ring_size`
 * entries (a power of two), whose kernel-to-app mbufs come from `mp`: a
 * pktmbuf pool (rte_pktmbuf_pool_create) whose mbufs hold at least 128
 * bytes after RTE_PKTMBUF_HEADROOM, else kbridge refuses to attach (frames
 * longer than one mbuf arrive as chains). The app allocates them itself,
 * here and in kbridge_from_kernel(), and keeps up to
 * min(ring_size - 1, KBRIDGE_FRESH_TARGET) per queue on the fresh ring
 * (kbridge_port_set_fresh_target()): the pool must spare that many per
 * queue. Returns NULL and sets rte_errno on failure.
 */
static inline struct kbridge_port *
kbridge_port_create(const char *name, uint16_t nb_queues, unsigned int ring_size,
		    struct rte_mempool *mp, int socket_id)
{
	static const struct rte_mbuf_dynfield tsc_field = {
		.name = KBRIDGE_DYNFIELD_TSC,
		.size = sizeof(uint64_t),
		.align = __alignof__(uint64_t),
		.flags = 0,
	};
	char mzname[RTE_MEMZONE_NAMESIZE];
	char rname[RTE_RING_NAMESIZE];
	struct kbridge_port *p;
	struct kbridge_ctl *c;
	uint16_t q;
	int i, slot = -1;

	if (name == NULL || name[0] == '\0' || strlen(name) > KBRIDGE_NAME_MAX ||
	    nb_queues == 0 || nb_queues > KBRIDGE_MAX_QUEUES || mp == NULL ||
	    rte_eal_process_type() != RTE_PROC_PRIMARY) {
		rte_errno = EINVAL;
		return NULL;
	}
	for (i = 0; i < KBRIDGE_MAX_PORTS; i++)
		if (kbridge_ports_[i] == NULL) {
			slot = i;
			break;
		}
	if (slot < 0) {
		rte_errno = ENOSPC;
		return NULL;
	}

	p = (struct kbridge_port *)rte_zmalloc("kbridge_port", sizeof(*p), 0);
	if (p == NULL) {
		rte_errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < KBRIDGE_MAX_QUEUES; i++)
		p->eventfd[i] = -1;

	snprintf(mzname, sizeof(mzname), KBRIDGE_MZ_PREFIX "%s", name);
	p->mz = rte_memzone_reserve(mzname, sizeof(*c), socket_id, 0);
	if (p->mz == NULL)
		goto fail;
	c = (struct kbridge_ctl *)p->mz->addr;
	memset(c, 0, sizeof(*c));
	p->ctl = c;
	rte_strlcpy(c->name, name, sizeof(c->name));
	rte_strlcpy(c->mempool, mp->name, sizeof(c->mempool));
	c->nb_queues = nb_queues;
	c->ring_size = ring_size;
	c->app_pid = (int32_t)getpid();
	c->tsc_offset = rte_mbuf_dynfield_register(&tsc_field);
	c->tsc_hz = rte_get_tsc_hz();
	rte_strlcpy(c->dpdk_version, rte_version(), sizeof(c->dpdk_version));
	c->dpdk_version_num = RTE_VERSION;
	kbridge_layout_fill_(&c->layout);
	rte_strlcpy(c->layout.mempool_ops, rte_mempool_get_ops(mp->ops_index)->name,
		    sizeof(c->layout.mempool_ops));
	/* A pool that is no pktmbuf pool holds no mbufs to put there:
	 * kbridge refuses it when it attaches. */
	c->fresh_target = mp->private_data_size < sizeof(struct rte_pktmbuf_pool_private) ? 0 :
			  RTE_MIN(ring_size - 1, KBRIDGE_FRESH_TARGET);
	p->mp = mp;

	for (q = 0; q < nb_queues; q++) {
		if (kbridge_ring_name(rname, sizeof(rname), name, "tk", q) != 0)
			goto toolong;
		p->to_kernel[q] = rte_ring_create(rname, ring_size, socket_id,
						  RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (p->to_kernel[q] == NULL)
			goto fail;
		if (kbridge_ring_name(rname, sizeof(rname), name, "fk", q) != 0)
			goto toolong;
		p->from_kernel[q] = rte_ring_create(rname, ring_size, socket_id,
						    RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (p->from_kernel[q] == NULL)
			goto fail;
		/* fresh: any app call puts, kbridge's worker alone takes; spent:
		 * the other way round. kbridge's side of every ring is single,
		 * which its crash recovery needs (ring/reconcile.c). */
		if (kbridge_ring_name(rname, sizeof(rname), name, "al", q) != 0)
			goto toolong;
		p->fresh[q] = rte_ring_create(rname, ring_size, socket_id, RING_F_SC_DEQ);
		if (p->fresh[q] == NULL)
			goto fail;
		if (kbridge_ring_name(rname, sizeof(rname), name, "sp", q) != 0)
			goto toolong;
		p->spent[q] = rte_ring_create(rname, KBRIDGE_SPENT_SLOTS(ring_size), socket_id,
					      RING_F_SP_ENQ);
		if (p->spent[q] == NULL)
			goto fail;
		kbridge_refill_(p, q);
	}

	if (kbridge_mp_wakeup_register_(name) < 0)
		goto fail;
	/* The slot seen free above may have been taken since (another thread
	 * creating a port): look again under the lock. */
	rte_spinlock_lock(&kbridge_ports_lock_);
	for (slot = -1, i = 0; i < KBRIDGE_MAX_PORTS && slot < 0; i++)
		if (kbridge_ports_[i] == NULL)
			slot = i;
	if (slot >= 0)
		kbridge_ports_[slot] = p;
	rte_spinlock_unlock(&kbridge_ports_lock_);
	if (slot < 0) {
		rte_errno = ENOSPC;
		goto fail;
	}

	/* Publish last: kbridge checks the magic before it trusts the rest. */
	rte_atomic_thread_fence(__ATOMIC_RELEASE);
	c->version = KBRIDGE_VERSION;
	c->magic = KBRIDGE_MAGIC;
	return p;

toolong:
	rte_errno = ENAMETOOLONG;
fail:
	i = rte_errno;
	kbridge_port_free(p);
	rte_errno = i;
	return NULL;
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_PORT_H */

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
	if (p->ctl != NULL && __atomic_load_n(&p->ctl->owner, __ATOMIC_SEQ_CST) != 0) {
		/* Tell a kbridge that serves every port of the app at once:
		 * closing first, then the doorbell. */
		__atomic_store_n(&p->ctl->closing, 1, __ATOMIC_SEQ_CST);
		kbridge_doorbell_ring_();
	}
	if (p->ctl != NULL && kbridge_port_detach_(p) < 0) {
		rte_errno = EBUSY;
		return -EBUSY;
	}
	kbridge_registry_del_(p);
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
 * kbridge_port_create() without its last step: the port is made but not
 * published, so no kbridge sees it yet. Set what a kbridge reads when it
 * takes the port (kbridge_port_set_mac(), kbridge_port_serve_requests(),
 * kbridge_port_set_interface(), kbridge_port_set_offloads()), then
 * kbridge_port_publish() it; or kbridge_port_free() it.
 */
static inline struct kbridge_port *
kbridge_port_prepare(const char *name, uint16_t nb_queues, unsigned int ring_size,
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
	int i;

	if (name == NULL || name[0] == '\0' || strlen(name) > KBRIDGE_NAME_MAX ||
	    nb_queues == 0 || nb_queues > KBRIDGE_MAX_QUEUES || mp == NULL ||
	    rte_eal_process_type() != RTE_PROC_PRIMARY) {
		rte_errno = EINVAL;
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
		 * which its crash recovery needs (ring/port_reconcile.c). */
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
	if (rte_mp_action_register(KBRIDGE_MP_DOORBELL, kbridge_mp_doorbell_) < 0 &&
	    rte_errno != EEXIST && rte_errno != ENOTSUP)
		goto fail;
	if (kbridge_registry_add_(p) < 0) {
		rte_errno = ENOMEM;
		goto fail;
	}

	return p;

toolong:
	rte_errno = ENAMETOOLONG;
fail:
	i = rte_errno;
	kbridge_port_free(p);
	rte_errno = i;
	return NULL;
}

/* Publishes a port kbridge_port_prepare() made: kbridge may take it from
 * now on, and one that serves every port of the app is told at once. */
static inline void
kbridge_port_publish(struct kbridge_port *p)
{
	/* Publish last: kbridge checks the magic before it trusts the rest. */
	rte_atomic_thread_fence(__ATOMIC_RELEASE);
	p->ctl->version = KBRIDGE_VERSION;
	__atomic_store_n(&p->ctl->magic, KBRIDGE_MAGIC, __ATOMIC_RELEASE);
	kbridge_doorbell_ring_();
}

/*
 * Create exception port `name` with `nb_queues` queue pairs of `ring_size`
 * entries (a power of two), whose kernel-to-app mbufs come from `mp`: a
 * pktmbuf pool (rte_pktmbuf_pool_create) whose mbufs hold at least 128
 * bytes after RTE_PKTMBUF_HEADROOM, else kbridge refuses to attach (frames
 * longer than one mbuf arrive as chains). The app allocates them itself,
 * here and in kbridge_from_kernel(), and keeps up to
 * min(ring_size - 1, KBRIDGE_FRESH_TARGET) per queue on the fresh ring
 * (kbridge_port_set_fresh_target()): the pool must spare that many per
 * queue. Returns NULL and sets rte_errno on failure. A kbridge that serves
 * every port of the app (discover) may take the port as soon as it is
 * made: what it must know first (the MAC, the requests served, the
 * interface wanted), make the port with kbridge_port_prepare() instead.
 */
static inline struct kbridge_port *
kbridge_port_create(const char *name, uint16_t nb_queues, unsigned int ring_size,
		    struct rte_mempool *mp, int socket_id)
{
	struct kbridge_port *p = kbridge_port_prepare(name, nb_queues, ring_size, mp, socket_id);

	if (p != NULL)
		kbridge_port_publish(p);
	return p;
}

/*
 * Says what the app wants of the interface a kbridge that discovers the
 * port makes (one that names the port in its configuration makes what that
 * says): its MTU (0: the kbridge's interface.mtu) and admin state (1 up, 0
 * down, -1: the kbridge's interface.up). Before kbridge_port_publish().
 */
static inline void
kbridge_port_set_interface(struct kbridge_port *p, uint16_t mtu, int up)
{
	p->ctl->if_mtu = mtu;
	p->ctl->if_flags = up < 0 ? 0 : KBRIDGE_IF_UP_SET | (up > 0 ? KBRIDGE_IF_UP : 0);
}

/* Polls of kbridge_port_wait_served(), microseconds. */
#define KBRIDGE_SERVED_POLL_US 100

/*
 * Waits up to timeout_ms for a kbridge to serve the port: its interface
 * exists and its workers run. Returns 0 then; -ECONNREFUSED when kbridge
 * refused the port as it is, with kbridge's reason in why (the interface's
 * name taken, a layout that differs, ...); -ETIMEDOUT when no kbridge
 * answered in time (why says so). why may be NULL.
 */
static inline int
kbridge_port_wait_served(const struct kbridge_port *p, unsigned int timeout_ms, char *why,
			 size_t whylen)
{
	const struct kbridge_ctl *c = p->ctl;
	uint64_t end = rte_get_timer_cycles() + (uint64_t)timeout_ms * rte_get_timer_hz() / 1000;

	for (;;) {
		uint32_t s = __atomic_load_n(&c->served, __ATOMIC_ACQUIRE);

		if (s == KBRIDGE_SERVED_YES)
			return 0;
		if (s == KBRIDGE_SERVED_REFUSED) {
			if (why != NULL && whylen > 0)
				snprintf(why, whylen, "%.*s", (int)sizeof(c->served_why), c->served_why);
			return -ECONNREFUSED;
		}
		if (rte_get_timer_cycles() >= end) {
			if (why != NULL && whylen > 0)
				snprintf(why, whylen, "no kbridge served port %s within %u ms", c->name, timeout_ms);
			return -ETIMEDOUT;
		}
		rte_delay_us_sleep(KBRIDGE_SERVED_POLL_US);
	}
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_PORT_H */

/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_memzone.h>

#include "port.h"

uint32_t
kb_rte_version(void)
{
	return RTE_VERSION;
}

/* Checks what the app wrote into the control block before kbridge relies on
 * it: an error in info->why (returns -1), or what is turned off in
 * info->warn. */
static int
kb_port_check(const struct kbridge_ctl *c, struct kb_port_info *info)
{
	uint64_t hz = c->tsc_hz;
	int32_t off = c->tsc_offset;

	if (c->nb_queues < 1 || c->nb_queues > KBRIDGE_MAX_QUEUES) {
		snprintf(info->why, sizeof(info->why),
			 "the control block says %u queues; 1 to %d are possible",
			 c->nb_queues, KBRIDGE_MAX_QUEUES);
		return -1;
	}
	if (c->ring_size < 2 || !rte_is_power_of_2(c->ring_size)) {
		snprintf(info->why, sizeof(info->why),
			 "the control block says rings of %u slots, not a power of two",
			 c->ring_size);
		return -1;
	}
	info->nb_queues = c->nb_queues;
	/* 1 MHz to 100 GHz: the residence arithmetic divides by hz/1e6. */
	info->tsc_hz = hz;
	if (hz < 1000000ull || hz > 100000000000ull) {
		info->tsc_hz = 0;
		snprintf(info->warn, sizeof(info->warn),
			 "the control block says a TSC of %" PRIu64 " Hz: residence times are off",
			 hz);
	}
	info->tsc_offset = off;
	if (off != -1 && (off < (int32_t)offsetof(struct rte_mbuf, dynfield1) ||
			  off > (int32_t)(sizeof(struct rte_mbuf) - sizeof(uint64_t)) ||
			  off % (int32_t)sizeof(uint64_t) != 0)) {
		info->tsc_offset = -1;
		snprintf(info->warn, sizeof(info->warn),
			 "the control block says the enqueue TSC is at mbuf offset %d, outside the dynamic fields: residence times are off",
			 off);
	}
	if (info->tsc_hz == 0)
		info->tsc_offset = -1;
	return 0;
}

/* kb_pool_check refuses an app pool kbridge cannot fill safely: one that is
 * no pktmbuf pool (rte_pktmbuf_data_room_size reads its private data), or
 * whose mbufs hold less than KB_MIN_DATA_ROOM after the headroom (under the
 * headroom the room arithmetic underflows and frames are copied over the
 * neighbouring objects; at the headroom every chunk is 0 bytes and a copy
 * loops until the pool is empty). */
static int
kb_pool_check(struct rte_mempool *mp, struct kb_port_info *info)
{
	unsigned int room;

	if (mp->private_data_size < sizeof(struct rte_pktmbuf_pool_private)) {
		snprintf(info->why, sizeof(info->why),
			 "mempool %s is not a pktmbuf pool (%u bytes of private data, a pktmbuf pool has %zu): "
			 "create it with rte_pktmbuf_pool_create()",
			 mp->name, mp->private_data_size, sizeof(struct rte_pktmbuf_pool_private));
		return -1;
	}
	room = rte_pktmbuf_data_room_size(mp);
	if (room < RTE_PKTMBUF_HEADROOM + KB_MIN_DATA_ROOM) {
		snprintf(info->why, sizeof(info->why),
			 "mempool %s has a data room of %u bytes: after the %u-byte headroom that leaves %d, "
			 "kbridge needs at least %u (RTE_MBUF_DEFAULT_BUF_SIZE is %u)",
			 mp->name, room, (unsigned int)RTE_PKTMBUF_HEADROOM,
			 (int)room - (int)RTE_PKTMBUF_HEADROOM, (unsigned int)KB_MIN_DATA_ROOM,
			 (unsigned int)RTE_MBUF_DEFAULT_BUF_SIZE);
		return -1;
	}
	return 0;
}

/* ---- What the two processes must agree on ---- */

#define KB_LAYOUT_NAME_(name, expr) #expr,
static const char *const kb_layout_names[] = { KBRIDGE_LAYOUT_ITEMS_(KB_LAYOUT_NAME_) };

const char *
kb_layout_name(unsigned int i)
{
	return i < RTE_DIM(kb_layout_names) ? kb_layout_names[i] : "?";
}

void
kb_layout_mine(struct kbridge_layout *l)
{
	kbridge_layout_fill_(l);
}

int
kb_layout_check(const struct kbridge_layout *l, char *why, size_t len)
{
	struct kbridge_layout mine;
	unsigned int i;

	kb_layout_mine(&mine);
	if (l->n != mine.n) {
		snprintf(why, len, "the app's build records %u items of the mbuf's and the ring's layout, kbridge's %u",
			 l->n, mine.n);
		return -1;
	}
	for (i = 0; i < mine.n; i++)
		if (l->v[i] != mine.v[i]) {
			snprintf(why, len, "%s is %u in the app's build, %u in kbridge's",
				 kb_layout_name(i), l->v[i], mine.v[i]);
			return -1;
		}
	return 0;
}

/* The ring handlers of DPDK's mempool_ring driver and the sync modes of
 * the ring each makes (drivers/mempool/ring/rte_mempool_ring.c). */
static const struct {
	const char *name;
	enum rte_ring_sync_type prod, cons;
} kb_ring_handlers[] = {
	{ "ring_mp_mc", RTE_RING_SYNC_MT, RTE_RING_SYNC_MT },
	{ "ring_sp_sc", RTE_RING_SYNC_ST, RTE_RING_SYNC_ST },
	{ "ring_mp_sc", RTE_RING_SYNC_MT, RTE_RING_SYNC_ST },
	{ "ring_sp_mc", RTE_RING_SYNC_ST, RTE_RING_SYNC_MT },
	{ "ring_mt_rts", RTE_RING_SYNC_MT_RTS, RTE_RING_SYNC_MT_RTS },
	{ "ring_mt_hts", RTE_RING_SYNC_MT_HTS, RTE_RING_SYNC_MT_HTS },
};

static const char *
kb_sync_name(enum rte_ring_sync_type t)
{
	switch (t) {
	case RTE_RING_SYNC_MT:
		return "multi";
	case RTE_RING_SYNC_ST:
		return "single";
	case RTE_RING_SYNC_MT_RTS:
		return "RTS";
	case RTE_RING_SYNC_MT_HTS:
		return "HTS";
	}
	return "unknown";
}

/* Before version 7 kbridge allocates and frees the app's mbufs through the
 * pool's handler index (mp->ops_index), which names a handler in each
 * process's own table, ordered by link and constructor order: in a
 * statically linked app ring_mp_mc is not where a shared kbridge has it,
 * and the wrong handler corrupts the pool. kb_pool_handler_check refuses
 * unless kbridge's handler at that index is a ring handler made for the
 * sync modes the pool's ring (pool_data, the ring "MP_<pool>") has. What
 * to do about it the caller says. */
static int
kb_pool_handler_check(struct rte_mempool *mp, struct kb_port_info *info)
{
	char rname[RTE_RING_NAMESIZE];
	enum rte_ring_sync_type prod, cons;
	const char *fits = NULL;
	struct rte_ring *r;
	unsigned int i;
	int idx = mp->ops_index;

	if (idx < 0 || (unsigned int)idx >= rte_mempool_ops_table.num_ops) {
		snprintf(info->why, sizeof(info->why),
			 "mempool %s uses mempool handler %d, and kbridge has handlers 0 to %u only",
			 mp->name, idx, rte_mempool_ops_table.num_ops - 1);
		return -1;
	}
	rte_strlcpy(info->my_ops, rte_mempool_ops_table.ops[idx].name, sizeof(info->my_ops));
	snprintf(rname, sizeof(rname), RTE_MEMPOOL_MZ_FORMAT, mp->name);
	r = rte_ring_lookup(rname);
	if (r == NULL || (void *)r != mp->pool_data) {
		snprintf(info->why, sizeof(info->why),
			 "mempool %s uses mempool handler %d, %s in kbridge, and keeps its mbufs in no ring %s: kbridge can check ring handlers only",
			 mp->name, idx, info->my_ops, rname);
		return -1;
	}
	prod = rte_ring_get_prod_sync_type(r);
	cons = rte_ring_get_cons_sync_type(r);
	for (i = 0; i < RTE_DIM(kb_ring_handlers); i++) {
		if (kb_ring_handlers[i].prod != prod || kb_ring_handlers[i].cons != cons)
			continue;
		if (strcmp(kb_ring_handlers[i].name, info->my_ops) == 0)
			return 0;
		fits = kb_ring_handlers[i].name;
	}
	snprintf(info->why, sizeof(info->why),
		 "mempool %s uses mempool handler %d, which is %s in kbridge, but its ring %s is %s-producer, %s-consumer (%s's): the app's handler %d is another",
		 mp->name, idx, info->my_ops, rname, kb_sync_name(prod), kb_sync_name(cons),
		 fits != NULL ? fits : "no ring handler", idx);
	return -1;
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
	/* A version-1 block ends before the version-2 fields, a version-2
	 * block before the version-3 ones, and so on. */
	if (mz->len < (c->version >= 7 ? sizeof(*c) :
		       c->version >= 5 ? offsetof(struct kbridge_ctl, layout) :
		       c->version == 4 ? offsetof(struct kbridge_ctl, app_mac) :
		       c->version == 3 ? offsetof(struct kbridge_ctl, link) :
		       c->version == 2 ? offsetof(struct kbridge_ctl, dpdk_version) :
		       offsetof(struct kbridge_ctl, app_offloads)))
		return -EBADMSG;
	if (kb_port_check(c, info) < 0)
		return -EINVAL;
	info->version = c->version;
	if (c->version >= 3) {
		memcpy(info->dpdk_version, c->dpdk_version, sizeof(info->dpdk_version));
		info->dpdk_version[sizeof(info->dpdk_version) - 1] = '\0';
		info->dpdk_version_num = c->dpdk_version_num;
	}
	if (c->version >= 2) {
		info->app_offloads = __atomic_load_n(&c->app_offloads, __ATOMIC_ACQUIRE);
		info->app_max_segs = c->app_max_segs;
	}
	info->ctl = c;
	info->pool = rte_mempool_lookup(c->mempool);
	if (info->pool == NULL)
		return -ESRCH;
	if (kb_pool_check(info->pool, info) < 0)
		return -ENOBUFS;
	if (c->version >= 7) {
		memcpy(info->app_ops, c->layout.mempool_ops, sizeof(info->app_ops));
		info->app_ops[sizeof(info->app_ops) - 1] = '\0';
		if (kb_layout_check(&c->layout, info->why, sizeof(info->why)) < 0)
			return -ENOEXEC;
	} else if (kb_pool_handler_check(info->pool, info) < 0) {
		return -ELIBBAD;
	}
	for (q = 0; q < c->nb_queues && q < KBRIDGE_MAX_QUEUES; q++) {
		kbridge_ring_name(rname, sizeof(rname), name, "tk", q);
		info->to_kernel[q] = rte_ring_lookup(rname);
		kbridge_ring_name(rname, sizeof(rname), name, "fk", q);
		info->from_kernel[q] = rte_ring_lookup(rname);
		if (info->to_kernel[q] == NULL || info->from_kernel[q] == NULL)
			return -ENXIO;
		if (rte_ring_get_size(info->to_kernel[q]) != c->ring_size ||
		    rte_ring_get_size(info->from_kernel[q]) != c->ring_size) {
			snprintf(info->why, sizeof(info->why),
				 "queue %u's rings have %u and %u slots, the control block says %u",
				 q, rte_ring_get_size(info->to_kernel[q]),
				 rte_ring_get_size(info->from_kernel[q]), c->ring_size);
			return -EINVAL;
		}
		if (c->version < 7)
			continue;
		kbridge_ring_name(rname, sizeof(rname), name, "al", q);
		info->fresh[q] = rte_ring_lookup(rname);
		kbridge_ring_name(rname, sizeof(rname), name, "sp", q);
		info->spent[q] = rte_ring_lookup(rname);
		if (info->fresh[q] == NULL || info->spent[q] == NULL)
			return -ENXIO;
		if (rte_ring_get_size(info->fresh[q]) != c->ring_size ||
		    rte_ring_get_size(info->spent[q]) != KBRIDGE_SPENT_SLOTS(c->ring_size)) {
			snprintf(info->why, sizeof(info->why),
				 "queue %u's fresh and spent rings have %u and %u slots, the control block's ring size %u says %u and %u",
				 q, rte_ring_get_size(info->fresh[q]), rte_ring_get_size(info->spent[q]),
				 c->ring_size, c->ring_size, KBRIDGE_SPENT_SLOTS(c->ring_size));
			return -EINVAL;
		}
	}
	return 0;
}

struct kb_port_walk {
	char (*names)[KBRIDGE_NAME_MAX + 1];
	int max, n;
};

/* One memzone of the walk: a port's control block is memzone
 * "kbridge_<name>" holding its own name after a published magic. The
 * held record ("kbridge_<name>_held") and anything else fail that. */
static void
kb_port_walk_one(const struct rte_memzone *mz, void *arg)
{
	struct kb_port_walk *w = arg;
	const struct kbridge_ctl *c = mz->addr;
	const char *name = mz->name + sizeof(KBRIDGE_MZ_PREFIX) - 1;
	size_t len;

	if (strncmp(mz->name, KBRIDGE_MZ_PREFIX, sizeof(KBRIDGE_MZ_PREFIX) - 1) != 0 ||
	    mz->len < offsetof(struct kbridge_ctl, app_offloads))
		return;
	len = strnlen(name, KBRIDGE_NAME_MAX + 1);
	if (len == 0 || len > KBRIDGE_NAME_MAX ||
	    __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != KBRIDGE_MAGIC ||
	    strncmp(c->name, name, KBRIDGE_NAME_MAX + 1) != 0)
		return;
	if (c->version >= 2 && mz->len >= offsetof(struct kbridge_ctl, dpdk_version) &&
	    __atomic_load_n(&c->closing, __ATOMIC_ACQUIRE) != 0)
		return;
	if (w->n < w->max)
		memcpy(w->names[w->n], name, len + 1);
	w->n++;
}

int
kb_port_names(char (*names)[KBRIDGE_NAME_MAX + 1], int max)
{
	struct kb_port_walk w = { names, max, 0 };

	rte_memzone_walk(kb_port_walk_one, &w);
	return w.n;
}

void
kb_port_set_served(struct kbridge_ctl *c, uint32_t version, uint32_t state, const char *why)
{
	if (version < 7)
		return;
	if (why != NULL)
		rte_strlcpy(c->served_why, why, sizeof(c->served_why));
	__atomic_store_n(&c->served, state, __ATOMIC_RELEASE);
}

int
kb_port_refuse(const char *name, const char *why)
{
	char mzname[RTE_MEMZONE_NAMESIZE];
	const struct rte_memzone *mz;
	struct kbridge_ctl *c;

	if (snprintf(mzname, sizeof(mzname), KBRIDGE_MZ_PREFIX "%s", name) >= (int)sizeof(mzname))
		return -ENAMETOOLONG;
	mz = rte_memzone_lookup(mzname);
	if (mz == NULL)
		return -ENOENT;
	c = mz->addr;
	if (__atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != KBRIDGE_MAGIC || c->version < 7 ||
	    c->version > KBRIDGE_VERSION || mz->len < sizeof(*c))
		return -EPROTO;
	if (__atomic_load_n(&c->closing, __ATOMIC_ACQUIRE) != 0)
		return -ESHUTDOWN;
	if (kb_owner_alive(__atomic_load_n(&c->owner, __ATOMIC_SEQ_CST)))
		return -EBUSY;
	kb_port_set_served(c, c->version, KBRIDGE_SERVED_REFUSED, why);
	return 0;
}

/* Sends msg to the app and returns its answer: the status its handler
 * replied, or -errno. */
static int
kb_mp_ask(struct rte_mp_msg *msg)
{
	struct rte_mp_reply reply;
	struct timespec ts = { .tv_sec = 2, .tv_nsec = 0 };
	int32_t status = -EIO;

	memset(&reply, 0, sizeof(reply));
	if (rte_mp_request_sync(msg, &reply, &ts) < 0)
		return -rte_errno;
	if (reply.nb_received == 1 && reply.msgs[0].len_param >= (int)sizeof(status))
		memcpy(&status, reply.msgs[0].param, sizeof(status));
	else
		status = -ETIMEDOUT;
	free(reply.msgs);
	return status;
}

int
kb_send_doorbell(int fd)
{
	struct rte_mp_msg msg;

	memset(&msg, 0, sizeof(msg));
	rte_strlcpy(msg.name, KBRIDGE_MP_DOORBELL, sizeof(msg.name));
	msg.num_fds = 1;
	msg.fds[0] = fd;
	return kb_mp_ask(&msg);
}

int
kb_send_eventfd(const char *name, uint16_t queue, int fd)
{
	struct kbridge_mp_wakeup req;
	struct rte_mp_msg msg;

	memset(&req, 0, sizeof(req));
	rte_strlcpy(req.name, name, sizeof(req.name));
	req.queue = queue;
	memset(&msg, 0, sizeof(msg));
	rte_strlcpy(msg.name, KBRIDGE_MP_WAKEUP, sizeof(msg.name));
	msg.len_param = sizeof(req);
	memcpy(msg.param, &req, sizeof(req));
	msg.num_fds = 1;
	msg.fds[0] = fd;
	return kb_mp_ask(&msg);
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

unsigned int
kb_ring_count(const struct rte_ring *r)
{
	return rte_ring_count(r);
}

static uint16_t
kb_ring_dequeue(void *ring, struct rte_mbuf **m, uint16_t n)
{
	return (uint16_t)rte_ring_dequeue_burst(ring, (void **)m, n, NULL);
}

/* What the ring has no room for stays the burst core's. */
static uint16_t
kb_ring_enqueue(void *ring, struct rte_mbuf **m, uint16_t n)
{
	return (uint16_t)rte_ring_enqueue_burst(ring, (void **)m, n, NULL);
}

static unsigned int
kb_ring_room(void *ring, unsigned int *reserve)
{
	*reserve = KBRIDGE_RESERVE(rte_ring_get_capacity(ring));
	return rte_ring_free_count(ring);
}

/* No takes_tso: the app declared TSO once (KBRIDGE_APP_TSO), and the core
 * keeps a chain within its app_max_segs. */
const struct kb_burst_ops kb_ring_burst_ops = {
	.dequeue = kb_ring_dequeue,
	.enqueue = kb_ring_enqueue,
	.dequeue_held = kb_ring_dequeue_held,
	.enqueue_held = kb_ring_enqueue_held,
	.room = kb_ring_room,
};

/* ---- Ownership and what a worker holds (kbridge.h version 2) ---- */

uint64_t
kb_pid_start(int pid)
{
	unsigned long long start = 0;
	long threads = 0;
	char state = '?';

	/* One parser of /proc/<pid>/stat for kbridge and the app: kbridge.h's. */
	if (pid <= 0 || kbridge_proc_stat_((pid_t)pid, &state, &threads, &start) < 0)
		return 0;
	return start;
}

uint64_t
kb_self_owner(void)
{
	return (uint64_t)(uint32_t)getpid() |
	       (kb_pid_start((int)getpid()) & 0xffffffffull) << 32;
}

/* The app's header decides whether it may free the port by the same rule
 * (kbridge_owner_state_): a zombie and a reused pid are no owner. */
int
kb_owner_state(uint64_t v)
{
	return (int)kbridge_owner_state_(v);
}

int
kb_owner_alive(uint64_t v)
{
	return kbridge_owner_alive_(v);
}

int
kb_port_claim(struct kbridge_ctl *c, uint32_t version, uint64_t me, uint64_t *prev)
{
	uint64_t old;

	*prev = 0;
	if (version < 2)
		return -ENOTSUP;
	for (;;) {
		old = __atomic_load_n(&c->owner, __ATOMIC_SEQ_CST);
		if (old == me)
			break;
		if (old != 0 && kb_owner_alive(old)) {
			*prev = old;
			return -EBUSY;
		}
		if (__atomic_compare_exchange_n(&c->owner, &old, me, 0,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			*prev = old;
			break;
		}
	}
	/* CAS owner, full fence, load closing: paired with the app's store of
	 * closing, fence, load of owner in kbridge_port_free(). */
	if (__atomic_load_n(&c->closing, __ATOMIC_SEQ_CST) != 0) {
		kb_port_release(c, me);
		return -ESHUTDOWN;
	}
	return 0;
}

void
kb_port_release(struct kbridge_ctl *c, uint64_t me)
{
	uint64_t v = me;

	__atomic_compare_exchange_n(&c->owner, &v, 0, 0, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
}

uint32_t
kb_port_closing(const struct kbridge_ctl *c)
{
	return __atomic_load_n(&c->closing, __ATOMIC_ACQUIRE);
}

uint64_t
kb_port_link(const struct kbridge_ctl *c, uint32_t version)
{
	if (version < 4)
		return 0;
	return __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
}

int
kb_port_app_mac(const struct kbridge_ctl *c, uint32_t version, uint8_t mac[6])
{
	if (version < 5 || __atomic_load_n(&c->app_mac_set, __ATOMIC_ACQUIRE) == 0)
		return 0;
	memcpy(mac, c->app_mac, sizeof(c->app_mac));
	return 1;
}

uint32_t
kb_port_requests(const struct kbridge_ctl *c, uint32_t version, uint32_t *max_mtu)
{
	uint32_t types;

	*max_mtu = 0;
	if (version < 5)
		return 0;
	types = __atomic_load_n(&c->app_requests, __ATOMIC_ACQUIRE);
	*max_mtu = c->app_max_mtu;
	return types & KBRIDGE_REQ_ALL;
}

uint32_t
kb_port_post(struct kbridge_ctl *c, uint32_t type, uint32_t value, const uint8_t mac[6])
{
	return kbridge_req_post_(c, type, value, mac);
}

int
kb_port_answer(const struct kbridge_ctl *c, uint32_t seq, int32_t *result)
{
	return kbridge_req_answer_(c, seq, result);
}

uint32_t
kb_port_takeover_request(struct kbridge_ctl *c, uint32_t version)
{
	uint32_t seq;

	if (version < 5)
		return 0;
	seq = __atomic_load_n(&c->req_seq, __ATOMIC_ACQUIRE);
	if ((seq & 1u) == 0 && seq != (uint32_t)__atomic_load_n(&c->req_answer, __ATOMIC_ACQUIRE) &&
	    seq == (uint32_t)__atomic_load_n(&c->undo, __ATOMIC_ACQUIRE))
		return seq;
	kbridge_req_withdraw_(c);
	return 0;
}

uint32_t
kb_port_post_undo(struct kbridge_ctl *c, uint32_t type, uint32_t value, const uint8_t mac[6])
{
	uint32_t seq = kbridge_req_post_(c, type, value, mac);

	__atomic_store_n(&c->undo, seq, __ATOMIC_RELEASE);
	return seq;
}

uint64_t
kb_port_accepted(const struct kbridge_ctl *c, uint32_t version)
{
	return version < 5 ? 0 : __atomic_load_n(&c->accepted, __ATOMIC_ACQUIRE);
}

void
kb_port_set_accepted(struct kbridge_ctl *c, uint32_t version, uint64_t v)
{
	if (version >= 5)
		__atomic_store_n(&c->accepted, v, __ATOMIC_RELEASE);
}

struct kbridge_held *
kb_held_open(const char *name, int *created)
{
	char mzname[RTE_MEMZONE_NAMESIZE];
	const struct rte_memzone *mz;
	struct kbridge_held *h;

	*created = 0;
	snprintf(mzname, sizeof(mzname), KBRIDGE_MZ_PREFIX "%s" KBRIDGE_HELD_SUFFIX, name);
	mz = rte_memzone_lookup(mzname);
	if (mz != NULL && mz->len >= sizeof(*h) &&
	    ((struct kbridge_held *)mz->addr)->magic == KBRIDGE_HELD_MAGIC &&
	    ((struct kbridge_held *)mz->addr)->version <= KBRIDGE_HELD_VERSION) {
		/* An earlier kbridge's record (version 0) has this layout. */
		h = mz->addr;
		if (h->version < KBRIDGE_HELD_VERSION)
			__atomic_store_n(&h->version, KBRIDGE_HELD_VERSION, __ATOMIC_RELEASE);
		return h;
	}
	if (mz != NULL) {
		/* Not ours to trust (no record, or a later kbridge's layout):
		 * start it afresh; a leak rather than a misread. */
		memset(mz->addr, 0, sizeof(*h) <= mz->len ? sizeof(*h) : mz->len);
		if (mz->len < sizeof(*h))
			return NULL;
	} else {
		mz = rte_memzone_reserve(mzname, sizeof(*h), SOCKET_ID_ANY, 0);
		if (mz == NULL)
			return NULL;
		memset(mz->addr, 0, sizeof(*h));
		*created = 1;
	}
	h = mz->addr;
	h->version = KBRIDGE_HELD_VERSION;
	__atomic_store_n(&h->magic, KBRIDGE_HELD_MAGIC, __ATOMIC_RELEASE);
	return h;
}

unsigned int
kb_held_give(struct kbridge_held_q *rec, struct rte_ring *spent)
{
	struct kb_held h = { &rec->n, rec->m, &rec->pend, 0 };
	uint32_t n = __atomic_load_n(&rec->n, __ATOMIC_ACQUIRE);

	if (n > KBRIDGE_HELD_MAX) {
		/* torn or foreign: naming nothing is the safe reading */
		__atomic_store_n(&rec->n, 0, __ATOMIC_RELEASE);
		return 0;
	}
	return kb_spent_put_held(spent, &h) ? n : 0;
}

unsigned int
kb_held_free(struct kbridge_held_q *rec)
{
	uint32_t n = __atomic_load_n(&rec->n, __ATOMIC_ACQUIRE);

	if (n > KBRIDGE_HELD_MAX)
		n = 0; /* torn or foreign: naming nothing is the safe reading */
	__atomic_store_n(&rec->n, 0, __ATOMIC_RELEASE);
	if (n > 0)
		rte_pktmbuf_free_bulk(rec->m, n);
	return n;
}

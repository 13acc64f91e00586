/* SPDX-License-Identifier: BSD-3-Clause */
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>

#include "kbridge.h" /* the app's header, as an app includes it */
#include "primary.h"

int
kbt_init(int argc, char **argv)
{
	return rte_eal_init(argc, argv) < 0 ? -rte_errno : 0;
}

struct rte_mempool *
kbt_pool(const char *name, unsigned int n)
{
	/* No per-lcore cache: the test's count of free mbufs must be exact. */
	return rte_pktmbuf_pool_create(name, n, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
}

/* A pktmbuf pool whose mbufs have data_room bytes (headroom included). */
struct rte_mempool *
kbt_pool_room(const char *name, unsigned int n, uint16_t data_room)
{
	return rte_pktmbuf_pool_create(name, n, 0, 0, data_room, SOCKET_ID_ANY);
}

/* A mempool that is no pktmbuf pool: no private data. */
struct rte_mempool *
kbt_plain_pool(const char *name, unsigned int n)
{
	return rte_mempool_create(name, n, 2048, 0, 0, NULL, NULL, NULL, NULL, SOCKET_ID_ANY, 0);
}

struct kbridge_port *
kbt_port(const char *name, uint16_t queues, unsigned int ring_size, struct rte_mempool *mp)
{
	return kbridge_port_create(name, queues, ring_size, mp, SOCKET_ID_ANY);
}

/* Builds each frame as a chain of seg_size-byte segments (0: one segment)
 * with pkt_len off by len_delta, and hands the burst to kbridge_to_kernel(). */
int
kbt_inject(struct kbridge_port *p, uint16_t q, struct rte_mempool *mp, const uint8_t *buf,
	   const uint32_t *lens, uint16_t n, uint16_t seg_size, int32_t len_delta, int raw)
{
	struct rte_mbuf *pkts[512];
	uint32_t off = 0;
	uint16_t i;

	if (n > RTE_DIM(pkts))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		struct rte_mbuf *head = NULL, *tail = NULL;
		uint32_t done = 0, len = lens[i];

		do {
			struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
			uint32_t chunk = len - done;

			if (m == NULL) {
				rte_pktmbuf_free(head);
				rte_pktmbuf_free_bulk(pkts, i);
				return -ENOMEM;
			}
			if (seg_size != 0 && chunk > seg_size)
				chunk = seg_size;
			if (chunk > rte_pktmbuf_tailroom(m))
				chunk = rte_pktmbuf_tailroom(m);
			memcpy(rte_pktmbuf_mtod(m, void *), buf + off + done, chunk);
			m->data_len = (uint16_t)chunk;
			done += chunk;
			if (head == NULL) {
				head = m;
			} else {
				tail->next = m;
				head->nb_segs++;
			}
			tail = m;
		} while (done < len);
		head->pkt_len = (uint32_t)((int32_t)len + len_delta);
		pkts[i] = head;
		off += len;
	}
	if (raw) {
		/* An app that frees nothing off the spent ring. */
		unsigned int sent = rte_ring_enqueue_burst(p->to_kernel[q], (void **)pkts, n, NULL);

		rte_pktmbuf_free_bulk(pkts + sent, n - sent);
		return (int)sent;
	}
	return kbridge_to_kernel(p, q, pkts, n);
}

/* Dequeues what the kernel sent, copies each packet out whole, frees it. */
int
kbt_collect(struct kbridge_port *p, uint16_t q, uint8_t *out, uint32_t cap, uint32_t *lens,
	    uint16_t max)
{
	struct rte_mbuf *pkts[64];
	uint32_t off = 0;
	int total = 0;

	while (total < max) {
		uint16_t want = RTE_MIN((uint16_t)RTE_DIM(pkts), (uint16_t)(max - total));
		uint16_t n = kbridge_from_kernel(p, q, pkts, want), i;

		if (n == 0)
			break;
		for (i = 0; i < n; i++) {
			uint32_t len = rte_pktmbuf_pkt_len(pkts[i]);

			if (off + len <= cap) {
				const void *d = rte_pktmbuf_read(pkts[i], 0, len, out + off);

				if (d != out + off)
					memcpy(out + off, d, len);
				off += len;
				lens[total] = len;
			} else {
				lens[total] = 0;
			}
			total++;
		}
		rte_pktmbuf_free_bulk(pkts, n);
	}
	return total;
}

int
kbt_port_free(struct kbridge_port *p)
{
	return kbridge_port_free(p);
}

/* Writes the control block's owner as a kbridge's claim would: tests
 * record a dead, reused or zombie owner. */
void
kbt_set_owner(struct kbridge_port *p, uint64_t v)
{
	__atomic_store_n(&p->ctl->owner, v, __ATOMIC_SEQ_CST);
}

void
kbt_set_link(struct kbridge_port *p, int up, uint32_t speed, int full)
{
	kbridge_port_set_link(p, up, speed, full);
}

int
kbt_port_owner_pid(struct kbridge_port *p)
{
	return (int)kbridge_port_owner_pid(p);
}

int
kbt_memzone_exists(const char *name)
{
	return rte_memzone_lookup(name) != NULL;
}

int
kbt_counters(struct kbridge_port *p, uint16_t q, uint64_t out[8])
{
	const struct kbridge_queue_ctl *c = &p->ctl->q[q];

	out[0] = c->to_kernel_pkts;
	out[1] = c->to_kernel_dropped;
	out[2] = c->from_kernel_pkts;
	out[3] = c->kicks;
	out[4] = c->have_eventfd;
	out[5] = c->to_kernel_reserved;
	out[6] = c->to_kernel_dropped_control;
	out[7] = c->to_kernel_dropped_neighbor;
	return 0;
}

int
kbt_to_kernel_cost(struct kbridge_port *p, uint16_t q, struct rte_mempool *mp,
		   const uint8_t *frame, uint32_t len, uint16_t n, uint32_t rounds,
		   uint32_t room, uint64_t out[2])
{
	struct rte_mbuf *pkts[64], *burst[64], *got[64];
	struct rte_ring *r = p->to_kernel[q];
	unsigned int fill = rte_ring_get_capacity(r) - room, k;
	uint64_t t0;
	uint32_t i;
	int pass, rc = 0;

	if (n > RTE_DIM(pkts) || room < n || fill > rte_ring_get_capacity(r) ||
	    rte_ring_count(r) != 0 || rte_pktmbuf_alloc_bulk(mp, pkts, n) != 0)
		return -EINVAL;
	for (k = 0; k < n; k++) {
		memcpy(rte_pktmbuf_append(pkts[k], (uint16_t)len), frame, len);
	}
	/* The filler: pointers to the first mbuf, dequeued again, never freed. */
	for (k = 0; k < fill; k++)
		rte_ring_enqueue(r, pkts[0]);
	for (pass = 0; pass < 2 && rc == 0; pass++) {
		p->to_kernel_room[q] = 0;
		t0 = rte_rdtsc();
		for (i = 0; i < rounds; i++) {
			memcpy(burst, pkts, n * sizeof(*burst));
			if ((pass == 0 ? kbridge_to_kernel(p, q, burst, n) :
					 rte_ring_enqueue_burst(r, (void **)burst, n, NULL)) != n ||
			    rte_ring_dequeue_burst(r, (void **)got, n, NULL) != n) {
				rc = -ENOSPC;
				break;
			}
		}
		out[pass] = (rte_rdtsc() - t0) * 1000 / (rte_get_tsc_hz() / 1000000);
	}
	while (rte_ring_dequeue_burst(r, (void **)got, RTE_DIM(got), NULL) > 0)
		;
	rte_pktmbuf_free_bulk(pkts, n);
	return rc;
}

unsigned int
kbt_in_use(const struct rte_mempool *mp)
{
	return rte_mempool_in_use_count(mp);
}

unsigned int
kbt_hold(struct rte_mempool *mp, struct rte_mbuf **held, unsigned int max)
{
	unsigned int n = 0;

	while (n < max && (held[n] = rte_pktmbuf_alloc(mp)) != NULL)
		n++;
	return n;
}

void
kbt_release(struct rte_mbuf **held, unsigned int n)
{
	rte_pktmbuf_free_bulk(held, n);
}

/* A frame kept in C memory, so tests can inject it without Go allocating. */
static uint8_t kbt_pre[2048];
static uint32_t kbt_pre_len;

void
kbt_preload(const uint8_t *f, uint32_t len)
{
	kbt_pre_len = len < sizeof(kbt_pre) ? len : sizeof(kbt_pre);
	memcpy(kbt_pre, f, kbt_pre_len);
}

int
kbt_inject_preloaded(struct kbridge_port *p, uint16_t q, struct rte_mempool *mp, uint16_t n)
{
	static uint32_t lens[512];
	static uint8_t buf[512 * 2048];
	uint16_t i;

	if (n > 512)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		lens[i] = kbt_pre_len;
		memcpy(buf + (size_t)i * kbt_pre_len, kbt_pre, kbt_pre_len);
	}
	return kbt_inject(p, q, mp, buf, lens, n, 0, 0, 0);
}

/* Frees what the kernel sent without copying it out; returns the count. */
int
kbt_drain(struct kbridge_port *p, uint16_t q)
{
	struct rte_mbuf *pkts[64];
	int total = 0;
	uint16_t n;

	while ((n = kbridge_from_kernel(p, q, pkts, RTE_DIM(pkts))) > 0) {
		rte_pktmbuf_free_bulk(pkts, n);
		total += n;
	}
	return total;
}

int
kbt_collect_one(struct kbridge_port *p, uint16_t q, uint8_t *out, uint32_t cap,
		struct kbt_meta *meta)
{
	struct rte_mbuf *m;
	uint32_t len;
	const void *d;

	if (kbridge_from_kernel(p, q, &m, 1) != 1)
		return 0;
	len = rte_pktmbuf_pkt_len(m);
	meta->ol_flags = m->ol_flags;
	meta->pkt_len = len;
	meta->nb_segs = m->nb_segs;
	meta->l2 = m->l2_len;
	meta->l3 = m->l3_len;
	meta->l4 = m->l4_len;
	meta->tso_segsz = m->tso_segsz;
	if (len > cap)
		len = cap;
	d = rte_pktmbuf_read(m, 0, len, out);
	if (d != NULL && d != out)
		memcpy(out, d, len);
	rte_pktmbuf_free(m);
	return 1;
}

void
kbt_declare_tso(struct kbridge_port *p, uint16_t max_segs)
{
	kbridge_port_set_offloads(p, KBRIDGE_APP_TSO, max_segs);
}

/* rte_mempool_audit() panics when the pool is inconsistent. */
void
kbt_audit(struct rte_mempool *mp)
{
	rte_mempool_audit(mp);
}

/* The port's kbridge_ctl.owner (version 2): the serving kbridge's pid in
 * the low 32 bits, 0 when none. */
uint64_t
kbt_owner(struct kbridge_port *p)
{
	return __atomic_load_n(&p->ctl->owner, __ATOMIC_SEQ_CST);
}

int
kbt_wait_served(struct kbridge_port *p, unsigned int timeout_ms, char *why, size_t len)
{
	return kbridge_port_wait_served(p, timeout_ms, why, len);
}

/* Queue q's ring `which`: KBT_FROM_KERNEL, KBT_TO_KERNEL, KBT_FRESH, KBT_SPENT. */
static struct rte_ring *
kbt_ring(struct kbridge_port *p, uint16_t q, int which)
{
	switch (which) {
	case KBT_TO_KERNEL:
		return p->to_kernel[q];
	case KBT_FRESH:
		return p->fresh[q];
	case KBT_SPENT:
		return p->spent[q];
	}
	return p->from_kernel[q];
}

unsigned int
kbt_ring_count(struct kbridge_port *p, uint16_t q, int which)
{
	return rte_ring_count(kbt_ring(p, q, which));
}

/* A ring's producer and consumer heads and tails, as this DPDK's rte_ring
 * lays them out: prod.head, prod.tail, cons.head, cons.tail. */
void
kbt_ring_state(struct kbridge_port *p, uint16_t q, int which, uint32_t out[4])
{
	const struct rte_ring *r = kbt_ring(p, q, which);

	out[0] = __atomic_load_n(&r->prod.head, __ATOMIC_ACQUIRE);
	out[1] = __atomic_load_n(&r->prod.tail, __ATOMIC_ACQUIRE);
	out[2] = __atomic_load_n(&r->cons.head, __ATOMIC_ACQUIRE);
	out[3] = __atomic_load_n(&r->cons.tail, __ATOMIC_ACQUIRE);
}

/* Overwrites control block fields, to play an older or a broken app: a
 * negative value leaves the field as it is. */
void
kbt_set_ctl(struct kbridge_port *p, int64_t version, int64_t tsc_hz, int64_t nb_queues)
{
	if (version >= 0)
		p->ctl->version = (uint32_t)version;
	if (tsc_hz >= 0)
		p->ctl->tsc_hz = (uint64_t)tsc_hz;
	if (nb_queues >= 0)
		p->ctl->nb_queues = (uint16_t)nb_queues;
}

/* The app's eventfd for queue q (the worker's, received over IPC), -1 when
 * none: tests compare it with the eventfds a kbridge process holds. */
int
kbt_app_eventfd(struct kbridge_port *p, uint16_t q)
{
	return __atomic_load_n(&p->eventfd[q], __ATOMIC_ACQUIRE);
}

/* Clears have_eventfd, so that a test sees the next kbridge set it again. */
void
kbt_clear_have_eventfd(struct kbridge_port *p, uint16_t q)
{
	p->ctl->q[q].have_eventfd = 0;
}

struct kbridge_port *
kbt_mailbox_new(void)
{
	struct kbridge_port *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	p->ctl = calloc(1, sizeof(*p->ctl));
	if (p->ctl == NULL) {
		free(p);
		return NULL;
	}
	p->ctl->version = KBRIDGE_VERSION;
	return p;
}

void
kbt_mailbox_free(struct kbridge_port *p)
{
	free(p->ctl);
	free(p);
}

void
kbt_mailbox_serve(struct kbridge_port *p, uint32_t types, uint32_t max_mtu)
{
	kbridge_port_serve_requests(p, types, max_mtu);
}

uint32_t
kbt_mailbox_post(struct kbridge_port *p, uint32_t type, uint32_t value, const uint8_t *mac)
{
	return kbridge_req_post_(p->ctl, type, value, mac);
}

int
kbt_mailbox_answer(struct kbridge_port *p, uint32_t seq, int32_t *result)
{
	return kbridge_req_answer_(p->ctl, seq, result);
}

int
kbt_mailbox_poll(struct kbridge_port *p, uint32_t *seq, uint32_t *type, uint32_t *value, uint8_t *mac)
{
	struct kbridge_request r;

	if (!kbridge_port_poll_request(p, &r))
		return 0;
	*seq = r.seq;
	*type = r.type;
	*value = r.value;
	memcpy(mac, r.mac, sizeof(r.mac));
	return 1;
}

void
kbt_mailbox_reply(struct kbridge_port *p, uint32_t seq, int result)
{
	struct kbridge_request r = { .seq = seq };

	kbridge_port_reply(p, &r, result);
}

void
kbt_mailbox_tear(struct kbridge_port *p)
{
	__atomic_store_n(&p->ctl->req_seq, p->ctl->req_seq | 1u, __ATOMIC_RELEASE);
}

void
kbt_mailbox_withdraw(struct kbridge_port *p)
{
	kbridge_req_withdraw_(p->ctl);
}

/* ---- kbridge.h version 7: the fresh and spent rings ---- */

unsigned int
kbt_port_parked(struct kbridge_port *p)
{
	unsigned int n = 0;
	uint16_t q;

	for (q = 0; q < p->ctl->nb_queues; q++)
		n += rte_ring_count(p->fresh[q]) + rte_ring_count(p->spent[q]);
	return n;
}

/* Takes up to max mbufs off queue q's fresh ring into held, as kbridge
 * would: no kbridge may run (the ring has one consumer). */
unsigned int
kbt_fresh_take(struct kbridge_port *p, uint16_t q, struct rte_mbuf **held, unsigned int max)
{
	return rte_ring_dequeue_burst(p->fresh[q], (void **)held, max, NULL);
}

/* Puts mbufs of mp on queue q's spent ring until leave slots are left, as
 * kbridge would: no kbridge may run (the ring has one producer). */
unsigned int
kbt_spent_fill(struct kbridge_port *p, uint16_t q, struct rte_mempool *mp, unsigned int leave)
{
	struct rte_ring *r = p->spent[q];
	unsigned int n = 0;
	struct rte_mbuf *m;

	while (rte_ring_free_count(r) > leave && (m = rte_pktmbuf_alloc(mp)) != NULL) {
		rte_ring_enqueue(r, m);
		n++;
	}
	return n;
}

/* Frees what waits on queue q's spent ring, as the burst calls do. */
unsigned int
kbt_reap(struct kbridge_port *p, uint16_t q)
{
	uint64_t before = p->ctl->qm[q].spent_freed_rx;

	kbridge_reap_(p, q, &p->ctl->qm[q].spent_freed_rx);
	return (unsigned int)(p->ctl->qm[q].spent_freed_rx - before);
}

void
kbt_mbuf_counters(struct kbridge_port *p, uint16_t q, uint64_t out[5])
{
	const struct kbridge_queue_mbufs *c = &p->ctl->qm[q];

	out[0] = c->fresh_put;
	out[1] = c->fresh_short;
	out[2] = c->spent_freed_rx + c->spent_freed_tx;
	out[3] = c->spent_waits;
	out[4] = p->ctl->fresh_target;
}

void
kbt_set_fresh_target(struct kbridge_port *p, unsigned int target)
{
	kbridge_port_set_fresh_target(p, target);
}

/* Overwrites item i of the layout the app recorded. */
void
kbt_set_layout(struct kbridge_port *p, unsigned int i, uint32_t v)
{
	p->ctl->layout.v[i] = v;
}

uint32_t
kbt_layout(struct kbridge_port *p, unsigned int i)
{
	return p->ctl->layout.v[i];
}

int
kbt_layout_next(void)
{
	return KBRIDGE_LAYOUT_next;
}

/* The index of mempool handler name in this process's table, -1 if none. */
int
kbt_ops_index(const char *name)
{
	unsigned int i;

	for (i = 0; i < rte_mempool_ops_table.num_ops; i++)
		if (strcmp(rte_mempool_ops_table.ops[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Sets mp's handler index (a primary whose index kbridge reads otherwise,
 * as a statically linked app's); returns the old one. */
int
kbt_set_ops_index(struct rte_mempool *mp, int idx)
{
	int old = mp->ops_index;

	mp->ops_index = idx;
	return old;
}

/* A handler of this process only, registered after EAL started: ring_mp_mc's
 * functions under another name, at an index a secondary's table does not
 * have. A secondary that called it through the pool's index would call
 * nothing (a crash), or another handler. */
struct rte_mempool *
kbt_foreign_pool(const char *name, unsigned int n)
{
	static struct rte_mempool_ops ops;
	static int registered = -1;
	int i;

	if (registered < 0) {
		i = kbt_ops_index("ring_mp_mc");
		if (i < 0)
			return NULL;
		ops = rte_mempool_ops_table.ops[i];
		snprintf(ops.name, sizeof(ops.name), "kbt_primary_only");
		registered = rte_mempool_register_ops(&ops);
		if (registered < 0)
			return NULL;
	}
	return rte_pktmbuf_pool_create_by_ops(name, n, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY,
					      "kbt_primary_only");
}

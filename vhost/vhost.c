/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_pause.h>
#include <rte_vhost.h>
#include <linux/virtio_config.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include "vhost.h"

struct kb_vh_backend kb_vh = { .vid = -1, .notify_fd = -1 };
volatile int kb_vh_stopping;

/* What kbridge offers on top of librte_vhost's defaults, and what it takes
 * away: no packed ring and no event index (kb_vh_prepare_park reads the
 * split ring's avail index, and suppresses kicks with VRING_USED_F_NO_NOTIFY),
 * no UFO or ECN (the kernel side has no use for them). */
#define KB_VH_WANT                                                          \
	((1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_NET_F_MRG_RXBUF) |   \
	 (1ULL << VIRTIO_NET_F_CSUM) | (1ULL << VIRTIO_NET_F_GUEST_CSUM) |   \
	 (1ULL << VIRTIO_NET_F_HOST_TSO4) | (1ULL << VIRTIO_NET_F_HOST_TSO6) | \
	 (1ULL << VIRTIO_NET_F_GUEST_TSO4) |                                 \
	 (1ULL << VIRTIO_NET_F_GUEST_TSO6) | (1ULL << VIRTIO_NET_F_MQ))
#define KB_VH_DROP                                                          \
	((1ULL << VIRTIO_F_RING_PACKED) | (1ULL << VIRTIO_RING_F_EVENT_IDX) | \
	 (1ULL << VIRTIO_NET_F_HOST_UFO) | (1ULL << VIRTIO_NET_F_GUEST_UFO) | \
	 (1ULL << VIRTIO_NET_F_HOST_ECN) | (1ULL << VIRTIO_NET_F_GUEST_ECN))

int
kb_vh_pool_create(unsigned int n, uint16_t data_room)
{
	kb_vh.pool = rte_pktmbuf_pool_create("kbridge_vhost", n, 256, 0,
					     RTE_PKTMBUF_HEADROOM + data_room,
					     SOCKET_ID_ANY);
	return kb_vh.pool == NULL ? -rte_errno : 0;
}

unsigned int
kb_vh_pool_in_use(void)
{
	return kb_vh.pool ? rte_mempool_in_use_count(kb_vh.pool) : 0;
}

unsigned int
kb_vh_pool_size(void)
{
	return kb_vh.pool ? kb_vh.pool->size : 0;
}

static void
kb_vh_notify(void)
{
	uint64_t one = 1;

	if (kb_vh.notify_fd >= 0 && write(kb_vh.notify_fd, &one, sizeof(one)) < 0) {
		/* An eventfd only fails when its count would overflow. */
	}
}

/* Bumps every queue's generation and wakes its worker, so that it re-reads
 * its kick eventfd. */
static void
kb_vh_changed(void)
{
	uint64_t one = 1;
	int i;

	for (i = 0; i < kb_vh.nb_queues; i++) {
		struct kb_vq *q = &kb_vh.q[i];
		int fd;

		__atomic_add_fetch(&q->gen, 1, __ATOMIC_SEQ_CST);
		fd = __atomic_load_n(&q->evfd, __ATOMIC_SEQ_CST);
		if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
			/* as above */
		}
	}
	kb_vh_notify();
}

/* Refusals, for Go's event loop to log: the vhost-user thread (memory
 * tables) and the workers (chains) add, Go takes. Slow path only. */
static struct {
	pthread_mutex_t mu;
	uint64_t head, tail;
	int kind[KB_VH_FAULTS];
	char what[KB_VH_FAULTS][KB_VH_FAULT_LEN];
} kb_vh_faults = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void __attribute__((format(printf, 2, 3)))
kb_vh_fault(int kind, const char *fmt, ...)
{
	va_list ap;
	int i;

	pthread_mutex_lock(&kb_vh_faults.mu);
	if (kb_vh_faults.head - kb_vh_faults.tail == KB_VH_FAULTS)
		kb_vh_faults.tail++; /* nobody reads: keep the newest */
	i = kb_vh_faults.head++ % KB_VH_FAULTS;
	kb_vh_faults.kind[i] = kind;
	va_start(ap, fmt);
	vsnprintf(kb_vh_faults.what[i], KB_VH_FAULT_LEN, fmt, ap);
	va_end(ap);
	if (kind == KB_VH_FAULT_MEM_TABLE)
		kb_vh.refused_mem_tables++;
	else
		kb_vh.refused_chains++;
	pthread_mutex_unlock(&kb_vh_faults.mu);
	kb_vh_notify();
}

int
kb_vh_fault_take(char *what)
{
	int kind = 0, i;

	pthread_mutex_lock(&kb_vh_faults.mu);
	if (kb_vh_faults.tail != kb_vh_faults.head) {
		i = kb_vh_faults.tail++ % KB_VH_FAULTS;
		kind = kb_vh_faults.kind[i];
		memcpy(what, kb_vh_faults.what[i], KB_VH_FAULT_LEN);
	}
	pthread_mutex_unlock(&kb_vh_faults.mu);
	return kind;
}

/* The vhost-user header as on the wire: librte_vhost hands the external
 * handlers its message context, which starts with it. */
struct kb_vh_msg_hdr {
	uint32_t request;
	uint32_t flags;
	uint32_t size;
};
#define KB_VH_REQ_SET_MEM_TABLE 5
#define KB_VH_NEED_REPLY (1u << 3)

/* Before librte_vhost handles a message. DPDK 22.11 honours NEED_REPLY
 * whether or not REPLY_ACK was negotiated, and a refusal it acks leaves
 * the connection and what the refused message half-set (a ring size that
 * is not a power of two, with no shadow ring allocated) in place for the
 * next message to build on. kbridge does not offer REPLY_ACK, so no
 * frontend may ask for an ack: every refusal then hangs up. */
static enum rte_vhost_msg_result
kb_vh_pre_msg(int vid, void *msg)
{
	struct kb_vh_msg_hdr *h = msg;

	(void)vid;
	h->flags &= ~KB_VH_NEED_REPLY;
	return RTE_VHOST_MSG_RESULT_NOT_HANDLED;
}

/* After librte_vhost mapped a memory table, while it still holds every
 * vring's lock: a region must lie within its file. mmap maps past the end
 * of a file without complaint, and the first touch there (a ring, a
 * descriptor's buffer) raises SIGBUS, which would kill kbridge. Only
 * regular files (memfd, hugetlbfs) have a size to check against. */
static enum rte_vhost_msg_result
kb_vh_post_msg(int vid, void *msg)
{
	struct kb_vh_msg_hdr *h = msg;
	struct rte_vhost_memory *mem = NULL;
	enum rte_vhost_msg_result res = RTE_VHOST_MSG_RESULT_NOT_HANDLED;
	uint32_t i;

	if (h->request != KB_VH_REQ_SET_MEM_TABLE)
		return res;
	if (rte_vhost_get_mem_table(vid, &mem) != 0)
		return res;
	for (i = 0; i < mem->nregions; i++) {
		struct rte_vhost_mem_region *r = &mem->regions[i];
		uint64_t off = r->host_user_addr - (uint64_t)(uintptr_t)r->mmap_addr;
		struct stat st;

		if (fstat(r->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
			kb_vh_fault(KB_VH_FAULT_MEM_TABLE,
				    "region %u (guest 0x%" PRIx64 ", 0x%" PRIx64 " bytes): its fd is not a regular file or memfd",
				    i, r->guest_phys_addr, r->size);
			res = RTE_VHOST_MSG_RESULT_ERR;
			break;
		}
		if (off > (uint64_t)st.st_size || r->size > (uint64_t)st.st_size - off) {
			kb_vh_fault(KB_VH_FAULT_MEM_TABLE,
				    "region %u (guest 0x%" PRIx64 ", 0x%" PRIx64 " bytes at file offset 0x%" PRIx64 ") reaches past the end of its file (0x%" PRIx64 " bytes)",
				    i, r->guest_phys_addr, r->size, off, (uint64_t)st.st_size);
			res = RTE_VHOST_MSG_RESULT_ERR;
			break;
		}
	}
	free(mem);
	return res;
}

static const struct rte_vhost_user_extern_ops kb_vh_extern = {
	.pre_msg_handle = kb_vh_pre_msg,
	.post_msg_handle = kb_vh_post_msg,
};

/* A connection, before its first message. */
static int
kb_vh_new_connection(int vid)
{
	return rte_vhost_extern_callback_register(vid, &kb_vh_extern, NULL);
}

/* Why librte_vhost cannot take the chain at the TX vring's next avail
 * index: what fill_vec_buf_split (lib/vhost/virtio_net.c) refuses, checked
 * the same way and read-only. DPDK 22.11 refuses such a chain silently and
 * leaves it at the head of the ring, so every dequeue after it returns 0
 * while the ring shows work. Returns 1 and says why in why, or 0 when the
 * chain is one librte_vhost takes (the dequeue came back empty for another
 * reason: no mbuf). The caller holds the queue (kb_vq_enter). */
#define KB_VH_MAX_VECS 256 /* BUF_VECTOR_MAX */
static int
kb_vh_chain_fault(int vid, uint16_t vring, char *why, size_t n)
{
	struct rte_vhost_vring vr;
	struct rte_vhost_memory *mem = NULL;
	struct vring_desc *descs, *table = NULL;
	uint16_t last_avail, last_used, head, idx;
	uint32_t nr, cnt = 0, vecs = 0;
	int bad = 1;

	if (rte_vhost_get_vhost_vring(vid, vring, &vr) != 0 || vr.desc == NULL ||
	    vr.avail == NULL || vr.size == 0 ||
	    rte_vhost_get_vring_base(vid, vring, &last_avail, &last_used) != 0 ||
	    rte_vhost_get_mem_table(vid, &mem) != 0)
		return 0;
	head = vr.avail->ring[last_avail & (vr.size - 1)];
	if (head >= vr.size) {
		snprintf(why, n, "avail index %u names descriptor %u of a %u-entry table",
			 last_avail, head, vr.size);
		goto out;
	}
	descs = vr.desc;
	nr = vr.size;
	idx = head;
	if (descs[head].flags & VRING_DESC_F_INDIRECT) {
		uint64_t gpa = descs[head].addr, len = descs[head].len, done = 0;

		nr = len / sizeof(struct vring_desc);
		if (nr == 0 || nr > vr.size) {
			snprintf(why, n, "head %u: indirect table of %" PRIu64 " bytes (%u entries, ring %u)",
				 head, len, nr, vr.size);
			goto out;
		}
		/* Copied piecewise: librte_vhost also takes a table that
		 * spans regions. */
		table = malloc(len);
		if (table == NULL) {
			bad = 0;
			goto out;
		}
		while (done < len) {
			uint64_t l = len - done;
			uint64_t va = rte_vhost_va_from_guest_pa(mem, gpa + done, &l);

			if (va == 0 || l == 0) {
				snprintf(why, n, "head %u: indirect table at guest 0x%" PRIx64 " (%" PRIu64 " bytes) lies outside guest memory",
					 head, gpa, len);
				goto out;
			}
			memcpy((uint8_t *)table + done, (void *)(uintptr_t)va, l);
			done += l;
		}
		descs = table;
		idx = 0;
	}
	for (;;) {
		uint64_t gpa, left;

		if (idx >= nr || cnt++ >= nr) {
			snprintf(why, n, "head %u%s: the chain does not end within %u descriptors (a loop, or next %u out of range)",
				 head, table ? " (indirect)" : "", nr, idx);
			goto out;
		}
		gpa = descs[idx].addr;
		left = descs[idx].len;
		while (left > 0) {
			uint64_t l = left;

			if (rte_vhost_va_from_guest_pa(mem, gpa, &l) == 0 || l == 0) {
				snprintf(why, n, "head %u%s: descriptor %u (guest 0x%" PRIx64 ", %u bytes) lies outside guest memory at 0x%" PRIx64,
					 head, table ? " (indirect)" : "", idx, (uint64_t)descs[idx].addr, descs[idx].len, gpa);
				goto out;
			}
			if (++vecs > KB_VH_MAX_VECS) {
				snprintf(why, n, "head %u: the chain maps to more than %d pieces of guest memory",
					 head, KB_VH_MAX_VECS);
				goto out;
			}
			gpa += l;
			left -= l;
		}
		if (!(descs[idx].flags & VRING_DESC_F_NEXT))
			break;
		idx = descs[idx].next;
	}
	bad = 0;
out:
	free(table);
	free(mem);
	return bad;
}

static int
kb_vh_new_device(int vid)
{
	uint64_t features = 0;
	uint16_t vrings = rte_vhost_get_vring_num(vid);
	int i;

	if (kb_vh.vid >= 0) {
		/* One frontend at a time: a second one gets refused. */
		return -1;
	}
	rte_vhost_get_negotiated_features(vid, &features);
	kb_vh.features = features;
	for (i = 0; i < kb_vh.nb_queues; i++) {
		struct kb_vq *q = &kb_vh.q[i];

		q->vid = vid;
		if (2 * i + 1 < vrings) {
			/* Polled from now on: no kicks until a worker parks. */
			rte_vhost_enable_guest_notification(vid, 2 * i + 1, 0);
			rte_vhost_enable_guest_notification(vid, 2 * i, 0);
			__atomic_store_n(&q->refused, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&q->allow, 1, __ATOMIC_SEQ_CST);
		}
	}
	kb_vh.vid = vid;
	kb_vh.connects++;
	kb_vh_changed();
	return 0;
}

static void
kb_vh_destroy_device(int vid)
{
	int i;

	if (vid != kb_vh.vid)
		return;
	for (i = 0; i < kb_vh.nb_queues; i++) {
		struct kb_vq *q = &kb_vh.q[i];

		__atomic_store_n(&q->allow, 0, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(&q->busy, __ATOMIC_SEQ_CST))
			rte_pause();
		q->vid = -1;
	}
	kb_vh.vid = -1;
	kb_vh.features = 0;
	kb_vh.disconnects++;
	kb_vh_changed();
}

static int
kb_vh_vring_state_changed(int vid, uint16_t queue_id, int enable)
{
	(void)queue_id;
	(void)enable;
	if (vid == kb_vh.vid)
		kb_vh_changed();
	return 0;
}

static const struct rte_vhost_device_ops kb_vh_ops = {
	.new_connection = kb_vh_new_connection,
	.new_device = kb_vh_new_device,
	.destroy_device = kb_vh_destroy_device,
	.vring_state_changed = kb_vh_vring_state_changed,
};

/* See kb_vh_pre_msg. Frontends ask for acks only when REPLY_ACK was
 * negotiated (virtio-user and QEMU both do without). */
static int
kb_vh_no_reply_ack(const char *path)
{
	uint64_t pf;

	if (rte_vhost_driver_get_protocol_features(path, &pf) != 0)
		return -1;
	return rte_vhost_driver_set_protocol_features(path,
		pf & ~(1ULL << VHOST_USER_PROTOCOL_F_REPLY_ACK));
}

int
kb_vh_start(const char *path, int client, int nb_queues, int notify_fd)
{
	uint64_t flags = RTE_VHOST_USER_NET_COMPLIANT_OL_FLAGS;
	int i;

	if (nb_queues < 1 || nb_queues > KB_VH_MAX_QUEUES)
		return -EINVAL;
	kb_vh.nb_queues = nb_queues;
	kb_vh.notify_fd = notify_fd;
	for (i = 0; i < KB_VH_MAX_QUEUES; i++) {
		kb_vh.q[i].id = (uint16_t)i;
		kb_vh.q[i].vid = -1;
		kb_vh.q[i].evfd = -1;
	}
	/* A client without RTE_VHOST_USER_NO_RECONNECT: librte_vhost retries a
	 * refused or lost connection once a second, so an app (server=1) that
	 * restarts is found again with no help from kbridge. */
	if (client)
		flags |= RTE_VHOST_USER_CLIENT;
	if (rte_vhost_driver_register(path, flags) != 0)
		return -EIO;
	if (rte_vhost_driver_enable_features(path, KB_VH_WANT) != 0 ||
	    rte_vhost_driver_disable_features(path, KB_VH_DROP) != 0 ||
	    kb_vh_no_reply_ack(path) != 0 ||
	    rte_vhost_driver_callback_register(path, &kb_vh_ops) != 0 ||
	    rte_vhost_driver_start(path) != 0) {
		rte_vhost_driver_unregister(path);
		return -EIO;
	}
	return 0;
}

int
kb_vh_stop(const char *path)
{
	return rte_vhost_driver_unregister(path) == 0 ? 0 : -EIO;
}

uint64_t
kb_vh_offered(const char *path)
{
	uint64_t f = 0;

	rte_vhost_driver_get_features(path, &f);
	return f;
}

/* The destroy_device handshake, worker side. */
static inline int
kb_vq_enter(struct kb_vq *q)
{
	__atomic_store_n(&q->busy, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&q->allow, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&q->busy, 0, __ATOMIC_RELEASE);
		return 0;
	}
	return 1;
}

static inline void
kb_vq_leave(struct kb_vq *q)
{
	__atomic_store_n(&q->busy, 0, __ATOMIC_RELEASE);
}

/* The TX vring shows work and librte_vhost dequeued nothing: if the chain
 * at its head is one librte_vhost refuses, the vring is stuck on it for
 * good. Stop serving it (the worker parks instead of polling a ring that
 * never moves) and say why; the next device starts clean. */
static void
kb_vh_check_head(struct kb_vq *q)
{
	char why[KB_VH_FAULT_LEN - 32];

	if (!kb_vh_chain_fault(q->vid, 2 * q->id + 1, why, sizeof(why)))
		return;
	__atomic_store_n(&q->refused, 1, __ATOMIC_RELAXED);
	kb_vh_fault(KB_VH_FAULT_CHAIN, "queue %u, TX vring %u: %s", q->id, 2 * q->id + 1, why);
}

/* The burst core's dequeue: the app's TX vring of queue pair ctx. */
static uint16_t
kb_vh_dequeue(void *ctx, struct rte_mbuf **m, uint16_t n)
{
	struct kb_vq *q = ctx;
	uint16_t got;

	if (__atomic_load_n(&q->refused, __ATOMIC_RELAXED) || !kb_vq_enter(q))
		return 0;
	got = rte_vhost_dequeue_burst(q->vid, 2 * q->id + 1, kb_vh.pool, m, n);
	if (got == 0 && rte_vhost_avail_entries(q->vid, 2 * q->id + 1) > 0)
		kb_vh_check_head(q);
	kb_vq_leave(q);
	return got;
}

/* The burst core's enqueue: the app's RX vring. librte_vhost copies the
 * mbufs into the guest's buffers: every one is freed here, sent or not. */
static uint16_t
kb_vh_enqueue(void *ctx, struct rte_mbuf **m, uint16_t n)
{
	struct kb_vq *q = ctx;
	uint16_t sent = 0;

	if (kb_vq_enter(q)) {
		sent = rte_vhost_enqueue_burst(q->vid, 2 * q->id, m, n);
		kb_vq_leave(q);
	}
	rte_pktmbuf_free_bulk(m, n);
	return sent;
}

int
kb_vh_takes_tso(void)
{
	uint64_t f = __atomic_load_n(&kb_vh.features, __ATOMIC_RELAXED);

	return (f & ((1ULL << VIRTIO_NET_F_GUEST_TSO4) |
		     (1ULL << VIRTIO_NET_F_GUEST_TSO6))) != 0;
}

/* A super-frame goes whole only where the guest negotiated TSO for its IP
 * version; librte_vhost turns the TSO mbuf into a GSO virtio-net header. */
static int
kb_vh_takes_tso_v(void *ctx, int ipv6)
{
	uint64_t f = __atomic_load_n(&kb_vh.features, __ATOMIC_RELAXED);

	(void)ctx;
	return (f & (1ULL << (ipv6 ? VIRTIO_NET_F_GUEST_TSO6 : VIRTIO_NET_F_GUEST_TSO4))) != 0;
}

const struct kb_burst_ops kb_vh_burst_ops = {
	.dequeue = kb_vh_dequeue,
	.enqueue = kb_vh_enqueue,
	.takes_tso = kb_vh_takes_tso_v,
};

int
kb_vh_sync(int qi, uint64_t *gen)
{
	struct kb_vq *q = &kb_vh.q[qi];
	uint64_t g = __atomic_load_n(&q->gen, __ATOMIC_SEQ_CST);
	struct rte_vhost_vring vr;
	int fd = -1;

	if (g == *gen)
		return -2;
	*gen = g;
	if (!kb_vq_enter(q))
		return -1;
	if (rte_vhost_get_vhost_vring(q->vid, 2 * q->id + 1, &vr) == 0 &&
	    vr.kickfd >= 0) {
		fd = fcntl(vr.kickfd, F_DUPFD_CLOEXEC, 0);
		/* Drained in kb_vh_unpark: it must never block. The frontend
		 * creates it non-blocking anyway. */
		if (fd >= 0)
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	}
	kb_vq_leave(q);
	return fd;
}

int
kb_vh_prepare_park(int qi)
{
	struct kb_vq *q = &kb_vh.q[qi];
	int n = 0;

	if (__atomic_load_n(&q->refused, __ATOMIC_RELAXED) || !kb_vq_enter(q))
		return 0;
	rte_vhost_enable_guest_notification(q->vid, 2 * q->id + 1, 1);
	/* The frontend publishes its avail index, fences, then reads
	 * VRING_USED_F_NO_NOTIFY; kbridge clears the flag, fences, then reads
	 * the avail index: one of the two sees the other. */
	rte_atomic_thread_fence(__ATOMIC_SEQ_CST);
	n = rte_vhost_avail_entries(q->vid, 2 * q->id + 1);
	q->kicks_enabled++;
	kb_vq_leave(q);
	return n;
}

void
kb_vh_unpark(int qi, int kickfd)
{
	struct kb_vq *q = &kb_vh.q[qi];
	uint64_t v;

	if (kb_vq_enter(q)) {
		rte_vhost_enable_guest_notification(q->vid, 2 * q->id + 1, 0);
		kb_vq_leave(q);
	}
	if (kickfd >= 0 && read(kickfd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing to drain */
	}
}

int
kb_vh_pending(int qi)
{
	struct kb_vq *q = &kb_vh.q[qi];
	int n = 0;

	if (!__atomic_load_n(&q->refused, __ATOMIC_RELAXED) && kb_vq_enter(q)) {
		n = rte_vhost_avail_entries(q->vid, 2 * q->id + 1);
		kb_vq_leave(q);
	}
	return n;
}

void
kb_vh_set_evfd(int qi, int fd)
{
	__atomic_store_n(&kb_vh.q[qi].evfd, fd, __ATOMIC_SEQ_CST);
}

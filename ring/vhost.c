/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct ucred */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_pause.h>
#include <rte_vhost.h>
#include <linux/virtio_config.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include "vhost_guestmem.h"
#include "vhost.h"
#include "vhost_msg.h"

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
	 (1ULL << VIRTIO_NET_F_HOST_ECN) | (1ULL << VIRTIO_NET_F_GUEST_ECN) | \
	 (1ULL << VHOST_F_LOG_ALL))

/* The protocol features kbridge offers: MQ only (virtio-user's queues=N).
 * The others name requests kbridge refuses (kb_vh_allowed): the dirty log
 * (live migration), the backend-request channel, inflight tracking,
 * postcopy, config space, crypto, status; REPLY_ACK: see kb_vh_pre_msg. */
#define KB_VH_PROTOCOL_WANT (1ULL << VHOST_USER_PROTOCOL_F_MQ)

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
		/* Counted in before the load: kb_vh_set_evfd stores the new fd,
		 * then waits for the count to drop, so the fd loaded here stays
		 * open (not closed, its number not reused) until the write. */
		__atomic_add_fetch(&q->evfd_users, 1, __ATOMIC_SEQ_CST);
		fd = __atomic_load_n(&q->evfd, __ATOMIC_SEQ_CST);
		if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
			/* as above */
		}
		__atomic_sub_fetch(&q->evfd_users, 1, __ATOMIC_SEQ_CST);
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
	else if (kind == KB_VH_FAULT_REQUEST)
		kb_vh.refused_requests++;
	else if (kind == KB_VH_FAULT_PEER)
		kb_vh.refused_peers++;
	else if (kind == KB_VH_FAULT_VRING)
		kb_vh.refused_vrings++;
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

#define KB_VH_REQ_SET_MEM_TABLE 5
#define KB_VH_REQ_SET_VRING_NUM 8
#define KB_VH_REQ_SET_VRING_ADDR 9
#define KB_VH_REQ_SET_VRING_BASE 10
#define KB_VH_REQ_SET_VRING_KICK 12
#define KB_VH_REQ_SET_PROTOCOL_FEATURES 16
#define KB_VH_VRING_IDX_MASK 0xffu /* of SET_VRING_KICK's payload */
#define KB_VH_NEED_REPLY (1u << 3)

/* The requests librte_vhost handles, by number, for the log. */
static const char *const kb_vh_req_names[] = {
	[1] = "GET_FEATURES", [2] = "SET_FEATURES", [3] = "SET_OWNER",
	[4] = "RESET_OWNER", [5] = "SET_MEM_TABLE", [6] = "SET_LOG_BASE",
	[7] = "SET_LOG_FD", [8] = "SET_VRING_NUM", [9] = "SET_VRING_ADDR",
	[10] = "SET_VRING_BASE", [11] = "GET_VRING_BASE", [12] = "SET_VRING_KICK",
	[13] = "SET_VRING_CALL", [14] = "SET_VRING_ERR",
	[15] = "GET_PROTOCOL_FEATURES", [16] = "SET_PROTOCOL_FEATURES",
	[17] = "GET_QUEUE_NUM", [18] = "SET_VRING_ENABLE", [19] = "SEND_RARP",
	[20] = "NET_SET_MTU", [21] = "SET_BACKEND_REQ_FD", [22] = "IOTLB_MSG",
	[24] = "GET_CONFIG", [25] = "SET_CONFIG", [26] = "CRYPTO_CREATE_SESS",
	[27] = "CRYPTO_CLOSE_SESS", [28] = "POSTCOPY_ADVISE",
	[29] = "POSTCOPY_LISTEN", [30] = "POSTCOPY_END", [31] = "GET_INFLIGHT_FD",
	[32] = "SET_INFLIGHT_FD", [36] = "GET_MAX_MEM_SLOTS", [37] = "ADD_MEM_REG",
	[38] = "REM_MEM_REG", [39] = "SET_STATUS", [40] = "GET_STATUS",
};

/* The requests a virtio-user port sends (DPDK 22.11 and 24.11,
 * drivers/net/virtio/virtio_user/vhost_user.c, with only the protocol
 * features kbridge offers) and QEMU's RESET_OWNER, which librte_vhost
 * handles by destroying the device first. Every other request is refused
 * before librte_vhost sees it: the dirty log (SET_LOG_BASE maps the
 * frontend's fd at the size it gives), inflight tracking (SET_INFLIGHT_FD
 * likewise, then writes to it), postcopy, IOTLB, the backend channel,
 * config space, crypto, status, the memory-slot requests. */
static int
kb_vh_allowed(uint32_t req)
{
	switch (req) {
	case 1: case 2: case 3: case 4: case 5:
	case 8: case 9: case 10: case 11: case 12: case 13:
	case 15: case 16: case 17: case 18:
		return 1;
	}
	return 0;
}

static void
kb_vh_close_fds(struct kb_vh_msg_ctx *c)
{
	int i;

	/* librte_vhost closes a message's fds only when it handles it. */
	for (i = 0; i < c->fd_num && i < KB_VH_MAX_FDS; i++)
		if (c->fds[i] >= 0) {
			close(c->fds[i]);
			c->fds[i] = -1;
		}
	c->fd_num = 0;
}

/* Whether the memory table of c lies within its files, before librte_vhost
 * maps it: mmap maps past the end of a file without complaint, and the
 * first touch there (librte_vhost's own, translating a ring that is already
 * set; a worker's) is a SIGBUS that kills kbridge. Only regular files
 * (memfd, hugetlbfs) have a size to check against. A table whose fd count
 * disagrees is left to librte_vhost, which refuses it before mapping. */
static int
kb_vh_table_fault(struct kb_vh_msg_ctx *c)
{
	uint32_t i, n = c->p.mem.nregions;

	if (c->h.size < 8 || n > KB_VH_MAX_FDS || c->h.size < 8 + n * sizeof(c->p.mem.r[0]) ||
	    c->fd_num != (int)n)
		return 0;
	for (i = 0; i < n; i++) {
		struct kb_vh_mem_region reg, *r = &reg;
		struct stat st;

		memcpy(&reg, (uint8_t *)c->p.mem.r + i * sizeof(reg), sizeof(reg)); /* unaligned */

		if (fstat(c->fds[i], &st) != 0 || !S_ISREG(st.st_mode)) {
			kb_vh_fault(KB_VH_FAULT_MEM_TABLE,
				    "region %u (guest 0x%" PRIx64 ", 0x%" PRIx64 " bytes): its fd is not a regular file or memfd",
				    i, r->gpa, r->size);
			return 1;
		}
		if (r->mmap_offset > (uint64_t)st.st_size || r->size > (uint64_t)st.st_size - r->mmap_offset) {
			kb_vh_fault(KB_VH_FAULT_MEM_TABLE,
				    "region %u (guest 0x%" PRIx64 ", 0x%" PRIx64 " bytes at file offset 0x%" PRIx64 ") reaches past the end of its file (0x%" PRIx64 " bytes)",
				    i, r->gpa, r->size, r->mmap_offset, (uint64_t)st.st_size);
			return 1;
		}
	}
	return 0;
}

/* Whether a vring request would change a vring under whoever uses it.
 * librte_vhost translates a vring's rings once, for the size it has then
 * (translate_ring_addresses returns early while desc, avail and used are
 * set), and SET_VRING_NUM changes the size without translating again
 * (vhost_user_set_vring_num, DPDK 22.11 and 24.11): the data path and
 * kb_vh_chain_fault then index rings of the old length with the new size,
 * past the end of guest memory. So a vring whose rings are translated
 * takes no new size, base or address, running or not: virtio-user sends
 * them only after GET_VRING_BASE, which clears the rings
 * (vhost_user_get_vring_base: vring_invalidate), or to vrings not set yet
 * (queue pairs past the first, whose vrings it sets after the device
 * started when no protocol features were negotiated). A running device's
 * vring that has a kick fd takes no second one: librte_vhost closes the
 * old one right after telling the workers to take the new one
 * (vhost_user_set_vring_kick), so kb_vh_sync could dup a number already
 * reused. Nor does a running device take new protocol features
 * (virtio-user sets them once, before its first SET_MEM_TABLE). SET_FEATURES
 * needs no check: librte_vhost refuses a change of features while the
 * device runs (vhost_user_set_features). librte_vhost allocated the vring
 * a request names (vhost_user_check_and_alloc_queue_pair) and holds its
 * lock before this runs. */
static int
kb_vh_vring_fault(int vid, struct kb_vh_msg_ctx *c)
{
	uint32_t req = c->h.request, idx;
	struct rte_vhost_vring vr;
	int running = vid == kb_vh.vid;

	switch (req) {
	case KB_VH_REQ_SET_VRING_NUM:
	case KB_VH_REQ_SET_VRING_ADDR:
	case KB_VH_REQ_SET_VRING_BASE:
		memcpy(&idx, &c->p, sizeof(idx)); /* state.index, addr.index */
		break;
	case KB_VH_REQ_SET_VRING_KICK:
		idx = (uint32_t)(c->p.u64 & KB_VH_VRING_IDX_MASK);
		break;
	case KB_VH_REQ_SET_PROTOCOL_FEATURES:
		if (!running)
			return 0;
		kb_vh_fault(KB_VH_FAULT_VRING, "VHOST_USER_SET_PROTOCOL_FEATURES (0x%" PRIx64 ") for the running device",
			    c->p.u64);
		return 1;
	default:
		return 0;
	}
	if (idx > UINT16_MAX || rte_vhost_get_vhost_vring(vid, (uint16_t)idx, &vr) != 0)
		return 0; /* no such vring: librte_vhost's to refuse */
	if (req == KB_VH_REQ_SET_VRING_KICK) {
		if (!running || vr.kickfd < 0)
			return 0;
		kb_vh_fault(KB_VH_FAULT_VRING, "VHOST_USER_SET_VRING_KICK for vring %u of the running device, which has a kick fd (%d fds): kbridge takes one per vring until the frontend stops it (GET_VRING_BASE)",
			    idx, c->fd_num);
		return 1;
	}
	if (vr.desc == NULL)
		return 0;
	kb_vh_fault(KB_VH_FAULT_VRING, "VHOST_USER_%s for vring %u, whose rings are in use (%u entries%s): kbridge takes a new size, base or address only after the frontend stops the vring (GET_VRING_BASE)",
		    kb_vh_req_names[req], idx, vr.size, running ? ", the device running" : "");
	return 1;
}

/* Before librte_vhost handles a message. DPDK 22.11 honours NEED_REPLY
 * whether or not REPLY_ACK was negotiated, and a refusal it acks leaves
 * the connection and what the refused message half-set (a ring size that
 * is not a power of two, with no shadow ring allocated) in place for the
 * next message to build on. kbridge does not offer REPLY_ACK, so no
 * frontend may ask for an ack: every refusal then hangs up (RESULT_ERR
 * without NEED_REPLY: librte_vhost closes the connection and destroys the
 * device). */
static enum rte_vhost_msg_result
kb_vh_pre_msg(int vid, void *msg)
{
	struct kb_vh_msg_ctx *c = msg;
	uint32_t req = c->h.request;

	c->h.flags &= ~KB_VH_NEED_REPLY;
	if (c->fd_num < 0 || c->fd_num > KB_VH_MAX_FDS) {
		/* Not the layout kbridge was built for: fail closed. */
		kb_vh_fault(KB_VH_FAULT_REQUEST, "request %u: %d fds: librte_vhost's message layout is not the one kbridge knows",
			    req, c->fd_num);
		return RTE_VHOST_MSG_RESULT_ERR;
	}
	if (!kb_vh_allowed(req)) {
		const char *name = req < sizeof(kb_vh_req_names) / sizeof(kb_vh_req_names[0]) &&
					   kb_vh_req_names[req] ? kb_vh_req_names[req] : "unknown";

		kb_vh_fault(KB_VH_FAULT_REQUEST, "VHOST_USER_%s (%u, %u payload bytes, %d fds): kbridge does not use it",
			    name, req, c->h.size, c->fd_num);
		kb_vh_close_fds(c);
		return RTE_VHOST_MSG_RESULT_ERR;
	}
	if (kb_vh_vring_fault(vid, c)) {
		kb_vh_close_fds(c);
		return RTE_VHOST_MSG_RESULT_ERR;
	}
	kb_gm_window(req == KB_VH_REQ_SET_MEM_TABLE);
	if (req == KB_VH_REQ_SET_MEM_TABLE) {
		if (kb_vh_table_fault(c)) {
			kb_vh_close_fds(c);
			return RTE_VHOST_MSG_RESULT_ERR;
		}
		/* A running device's table: librte_vhost would unmap the old
		 * regions under the workers (the chain check reads the vrings
		 * without its locks). Holding the workers out here cannot be
		 * done safely: librte_vhost holds every vring's lock during
		 * this handler, and a worker inside the device may be waiting
		 * for one (rte_vhost_enqueue_burst, enable_guest_notification),
		 * so refuse; the frontend's next connection starts afresh.
		 * virtio-user re-sends its table only when the app's memory
		 * grows (a mem event): the app must not grow it. */
		if (vid == kb_vh.vid) {
			kb_vh_fault(KB_VH_FAULT_MEM_TABLE,
				    "a new memory table for the running device (%u regions): kbridge does not take one while the workers run",
				    c->p.mem.nregions);
			kb_vh_close_fds(c);
			return RTE_VHOST_MSG_RESULT_ERR;
		}
	}
	return RTE_VHOST_MSG_RESULT_NOT_HANDLED;
}

/* After librte_vhost mapped a memory table (of a device not yet running),
 * while it still holds every vring's lock: the pre-handler's check, again
 * against what was mapped (a second line: the files cannot have been
 * swapped, but an unsealed memfd can have shrunk). */
static enum rte_vhost_msg_result
kb_vh_post_msg(int vid, void *msg)
{
	struct kb_vh_msg_hdr *h = msg;
	struct rte_vhost_memory *mem = NULL;
	enum rte_vhost_msg_result res = RTE_VHOST_MSG_RESULT_NOT_HANDLED;
	uint64_t shrank = kb_gm_window(0);
	uint32_t i;

	if (h->request != KB_VH_REQ_SET_MEM_TABLE)
		return res;
	if (rte_vhost_get_mem_table(vid, &mem) != 0)
		return res;
	/* The regions the SIGBUS handler knows as this device's (vhost_guestmem.c),
	 * from here until the next table or connection of this vid. */
	kb_gm_set(vid, mem);
	if (shrank > 0) {
		kb_vh_fault(KB_VH_FAULT_MEM_TABLE,
			    "a file of the table shrank while librte_vhost mapped it (%" PRIu64 " pages read as zeros)", shrank);
		free(mem);
		return RTE_VHOST_MSG_RESULT_ERR;
	}
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

/* The peer check. librte_vhost has no accessor for a connection's socket,
 * so kbridge finds it: every AF_UNIX socket of the process bound to the
 * vhost-user path (server: getsockname, not the listener) or connected to
 * it (client: getpeername), told apart from those already checked by its
 * inode (unique among open sockets). new_connection runs after accept() or
 * connect() and before librte_vhost polls the fd (socket.c,
 * vhost_user_add_connection), and connections are added one at a time, in
 * the fdset thread (server) or the reconnect thread (client, one
 * connection): the one new socket is this vid's. A refused peer makes
 * new_connection fail, and librte_vhost closes the fd before reading one
 * message. */
static struct {
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int client;
	uint32_t uids[KB_VH_MAX_UIDS + 2];
	int nuids;
	int64_t gid;
	ino_t known[64];
	int nknown;
} kb_vh_acl = { .gid = -1 };

int
kb_vh_allow(const uint32_t *uids, int n, int64_t gid)
{
	int i;

	if (n < 0 || n > KB_VH_MAX_UIDS)
		return -EINVAL;
	kb_vh_acl.uids[0] = 0;
	kb_vh_acl.uids[1] = (uint32_t)geteuid();
	for (i = 0; i < n; i++)
		kb_vh_acl.uids[2 + i] = uids[i];
	kb_vh_acl.nuids = 2 + n;
	kb_vh_acl.gid = gid;
	return 0;
}

static int
kb_vh_peer_allowed(const struct ucred *c)
{
	int i;

	for (i = 0; i < kb_vh_acl.nuids; i++)
		if (c->uid == kb_vh_acl.uids[i])
			return 1;
	return kb_vh_acl.gid >= 0 && (int64_t)c->gid == kb_vh_acl.gid;
}

/* Whether fd is a connection on the vhost-user path. */
static int
kb_vh_on_path(int fd)
{
	struct sockaddr_un a;
	socklen_t l = sizeof(a);
	int listening = 0;
	socklen_t ll = sizeof(listening);

	memset(&a, 0, sizeof(a));
	if (kb_vh_acl.client) {
		if (getpeername(fd, (struct sockaddr *)&a, &l) != 0)
			return 0;
	} else {
		if (getsockname(fd, (struct sockaddr *)&a, &l) != 0 ||
		    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) != 0 || listening)
			return 0;
	}
	return a.sun_family == AF_UNIX && l > offsetof(struct sockaddr_un, sun_path) &&
	       strncmp(a.sun_path, kb_vh_acl.path, sizeof(a.sun_path)) == 0;
}

/* A frontend that sends a header and stops: librte_vhost reads the
 * payload with a blocking read() (read_vhost_message) on the one thread
 * that serves every connection, and rte_vhost_driver_unregister spins
 * until that read returns. With a timeout the read fails, and librte_vhost
 * closes the connection as for any bad message. */
static void
kb_vh_bound_reads(int fd)
{
	struct timeval tv = {
		.tv_sec = KB_VH_MSG_TIMEOUT_MS / 1000,
		.tv_usec = (KB_VH_MSG_TIMEOUT_MS % 1000) * 1000,
	};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Each vid's connection, for kb_vh_guest_fault to hang up: its fd, and the
 * socket's inode, checked before the fd is used (librte_vhost may have
 * closed it, and the number been reused). */
#define KB_VH_CONNS 64
static struct {
	int fd;
	ino_t ino;
} kb_vh_conns[KB_VH_CONNS];

/* Checks the peers of the connections not seen before (and bounds their
 * reads); returns how many were refused (each logged and counted) or -1
 * when the scan failed. *fd and *ino: the last new connection allowed. */
static int
kb_vh_check_peers(int *cfd, ino_t *cino)
{
	ino_t seen[64];
	int nseen = 0, refused = 0, fresh = 0, i;
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name), known = 0;
		struct stat st;
		struct ucred cred;
		socklen_t cl = sizeof(cred);

		if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) ||
		    fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || !kb_vh_on_path(fd))
			continue;
		if (nseen < (int)(sizeof(seen) / sizeof(seen[0])))
			seen[nseen++] = st.st_ino;
		for (i = 0; i < kb_vh_acl.nknown; i++)
			known |= kb_vh_acl.known[i] == st.st_ino;
		if (known)
			continue;
		fresh++;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
			kb_vh_fault(KB_VH_FAULT_PEER, "a connection whose peer credentials are unreadable: %s", strerror(errno));
			refused++;
		} else if (!kb_vh_peer_allowed(&cred)) {
			kb_vh_fault(KB_VH_FAULT_PEER, "%s uid %u gid %u pid %d is not allowed (vhost.allow_uids, vhost.socket_group)",
				    kb_vh_acl.client ? "the listener," : "peer", cred.uid, cred.gid, (int)cred.pid);
			refused++;
		} else {
			kb_vh_bound_reads(fd);
			*cfd = fd;
			*cino = st.st_ino;
		}
	}
	closedir(d);
	memcpy(kb_vh_acl.known, seen, nseen * sizeof(seen[0]));
	kb_vh_acl.nknown = nseen;
	if (fresh == 0) {
		/* Not found: fail closed. */
		kb_vh_fault(KB_VH_FAULT_PEER, "a new connection not found among the process's sockets on %s", kb_vh_acl.path);
		return 1;
	}
	return refused;
}

/* A connection, before its first message. */
static int
kb_vh_new_connection(int vid)
{
	int fd = -1;
	ino_t ino = 0;

	kb_gm_forget(vid); /* a vid is reused once its connection is gone */
	if (kb_vh_check_peers(&fd, &ino) != 0)
		return -1;
	__atomic_store_n(&kb_vh_conns[vid % KB_VH_CONNS].ino, ino, __ATOMIC_RELAXED);
	__atomic_store_n(&kb_vh_conns[vid % KB_VH_CONNS].fd, fd, __ATOMIC_RELEASE);
	return rte_vhost_extern_callback_register(vid, &kb_vh_extern, NULL);
}

/* vhost_guestmem.c's hook, in its SIGBUS handler, after it mapped zeros over the
 * page of vid's memory that vanished: async-signal-safe. The device's
 * vrings are served no more, its connection is shut down (librte_vhost
 * then sees the frontend hang up, destroys the device and unmaps its
 * memory), Go's event loop logs it. */
static void
kb_vh_guest_fault(int vid)
{
	int i, fd;
	struct stat st;

	if (vid >= 0 && vid == __atomic_load_n(&kb_vh.vid, __ATOMIC_ACQUIRE)) {
		for (i = 0; i < kb_vh.nb_queues; i++)
			__atomic_store_n(&kb_vh.q[i].refused, 1, __ATOMIC_RELAXED);
	}
	if (vid >= 0) {
		fd = __atomic_load_n(&kb_vh_conns[vid % KB_VH_CONNS].fd, __ATOMIC_ACQUIRE);
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
		    st.st_ino == __atomic_load_n(&kb_vh_conns[vid % KB_VH_CONNS].ino, __ATOMIC_RELAXED))
			shutdown(fd, SHUT_RDWR);
	}
	kb_vh_notify();
}

/* Why librte_vhost cannot take the chain at the TX vring's next avail
 * index: what fill_vec_buf_split (lib/vhost/virtio_net.c) refuses, checked
 * the same way and read-only. DPDK 22.11 refuses such a chain silently and
 * leaves it at the head of the ring, so every dequeue after it returns 0
 * while the ring shows work. Returns 1 and says why in why, or 0 when the
 * chain is one librte_vhost takes (the dequeue came back empty for another
 * reason: no mbuf). The caller holds the queue (kb_vq_enter). Every index
 * is bounded by vr.size, read without librte_vhost's lock: the size the
 * rings were translated for, since kb_vh_vring_fault refuses a new one
 * while they are. */
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
	/* Go reads vid, features and the counts with atomic loads
	 * (Backend.Connected, Connects, In.TakesTSO). */
	__atomic_store_n(&kb_vh.features, features, __ATOMIC_RELAXED);
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
	__atomic_store_n(&kb_vh.vid, vid, __ATOMIC_RELEASE);
	__atomic_fetch_add(&kb_vh.connects, 1, __ATOMIC_RELAXED);
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
	__atomic_store_n(&kb_vh.vid, -1, __ATOMIC_RELEASE);
	__atomic_store_n(&kb_vh.features, 0, __ATOMIC_RELAXED);
	__atomic_fetch_add(&kb_vh.disconnects, 1, __ATOMIC_RELAXED);
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

/* KB_VH_PROTOCOL_WANT of librte_vhost's protocol features. Without
 * REPLY_ACK (see kb_vh_pre_msg): frontends ask for acks only when it was
 * negotiated (virtio-user and QEMU both do without). */
static int
kb_vh_protocol_features(const char *path)
{
	uint64_t pf;

	if (rte_vhost_driver_get_protocol_features(path, &pf) != 0)
		return -1;
	return rte_vhost_driver_set_protocol_features(path, pf & KB_VH_PROTOCOL_WANT);
}

int
kb_vh_start(const char *path, int client, int nb_queues, int notify_fd)
{
	uint64_t flags = RTE_VHOST_USER_NET_COMPLIANT_OL_FLAGS;
	int i;

	if (nb_queues < 1 || nb_queues > KB_VH_MAX_QUEUES || strlen(path) >= sizeof(kb_vh_acl.path))
		return -EINVAL;
	if (kb_gm_install(kb_vh_guest_fault) != 0)
		return -errno;
	if (kb_vh_acl.nuids == 0)
		kb_vh_allow(NULL, 0, -1);
	snprintf(kb_vh_acl.path, sizeof(kb_vh_acl.path), "%s", path);
	kb_vh_acl.client = client;
	kb_vh.nb_queues = nb_queues;
	kb_vh.notify_fd = notify_fd;
	for (i = 0; i < KB_VH_MAX_QUEUES; i++) {
		kb_vh.q[i].id = (uint16_t)i;
		kb_vh.q[i].vid = -1;
		kb_vh.q[i].evfd = -1;
	}
	for (i = 0; i < KB_VH_CONNS; i++)
		kb_vh_conns[i].fd = -1;
	/* A client without RTE_VHOST_USER_NO_RECONNECT: librte_vhost retries a
	 * refused or lost connection once a second, so an app (server=1) that
	 * restarts is found again with no help from kbridge. */
	if (client)
		flags |= RTE_VHOST_USER_CLIENT;
	if (rte_vhost_driver_register(path, flags) != 0)
		return -EIO;
	if (rte_vhost_driver_enable_features(path, KB_VH_WANT) != 0 ||
	    rte_vhost_driver_disable_features(path, KB_VH_DROP) != 0 ||
	    kb_vh_protocol_features(path) != 0 ||
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
 * mbufs into the guest's buffers: every one stays the core's, sent or not
 * (kb_vh_burst_ops.copies), which gives it back to kbridge's pool. */
static uint16_t
kb_vh_enqueue(void *ctx, struct rte_mbuf **m, uint16_t n)
{
	struct kb_vq *q = ctx;
	uint16_t sent = 0;

	if (kb_vq_enter(q)) {
		sent = rte_vhost_enqueue_burst(q->vid, 2 * q->id, m, n);
		kb_vq_leave(q);
	}
	return sent;
}

/* The guest's RX buffers free now, and the reserve of its vring's size
 * (a frame takes one buffer with mergeable buffers of an MTU's size). */
static unsigned int
kb_vh_room(void *ctx, unsigned int *reserve)
{
	struct kb_vq *q = ctx;
	struct rte_vhost_vring vr;
	unsigned int room = 0;

	*reserve = 0;
	if (!kb_vq_enter(q))
		return 0;
	if (rte_vhost_get_vhost_vring(q->vid, 2 * q->id, &vr) == 0) {
		*reserve = KBRIDGE_RESERVE(vr.size);
		room = rte_vhost_avail_entries(q->vid, 2 * q->id);
	}
	kb_vq_leave(q);
	return room;
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
	.room = kb_vh_room,
	.copies = 1,
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

void
kb_vh_set_evfd(int qi, int fd)
{
	struct kb_vq *q = &kb_vh.q[qi];

	__atomic_store_n(&q->evfd, fd, __ATOMIC_SEQ_CST);
	/* A callback that loaded the old fd counted itself in first (see
	 * kb_vh_changed): once the count is 0, none still holds it. */
	while (__atomic_load_n(&q->evfd_users, __ATOMIC_SEQ_CST))
		rte_pause();
}

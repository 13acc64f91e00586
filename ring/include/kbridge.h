/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge.h: the DPDK application's side of the kbridge exception path.
 *
 * Header-only. A DPDK application (the primary process) creates a named
 * exception port, hands the packets the kernel must see to
 * kbridge_to_kernel() and sends what kbridge_from_kernel() returns out of its
 * NIC. The kbridge daemon (a DPDK secondary process started with the same
 * --file-prefix) finds the port by name and moves the packets to and from a
 * kernel TAP interface.
 *
 * Contract:
 *  - One port = one memzone "kbridge_<name>" holding struct kbridge_ctl, plus
 *    per queue two rings: "kb_<name>_tk<q>" (app -> kernel) and
 *    "kb_<name>_fk<q>" (kernel -> app).
 *  - Each queue has one producer and one consumer on each ring: one app lcore
 *    calls kbridge_to_kernel()/kbridge_from_kernel() for a given queue, one
 *    kbridge worker serves it. The rings are created single-producer /
 *    single-consumer for that reason.
 *  - Every mbuf handed to kbridge_to_kernel() is owned by kbridge from then on:
 *    what does not fit in the ring is freed and counted here. Every mbuf
 *    returned by kbridge_from_kernel() is owned by the caller.
 *  - Wakeups: a parked kbridge worker sets need_wakeup, issues a full fence and
 *    re-checks its ring before it sleeps. kbridge_to_kernel() enqueues, fences
 *    and writes the worker's eventfd only when need_wakeup was set, so a busy
 *    worker costs the app no syscall. The eventfd reaches the app through DPDK
 *    multi-process IPC (action KBRIDGE_MP_WAKEUP). An app that never receives
 *    one still works: the worker bounds each park with a precise timer.
 */
#ifndef KBRIDGE_H
#define KBRIDGE_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_malloc.h>
#include <rte_memzone.h>
#include <rte_ring.h>
#include <rte_string_fns.h>
#include <rte_version.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KBRIDGE_MAGIC 0x4b425247u /* "KBRG" */
/* Versions 2 and 3 append fields to the control block (see struct
 * kbridge_ctl); kbridge still serves version-1 and 2 apps, which lack them. */
#define KBRIDGE_VERSION 3u
#define KBRIDGE_VERSION_MIN 1u
#define KBRIDGE_MAX_QUEUES 16
/* Port names fit an interface name (IFNAMSIZ - 1) and keep ring names short. */
#define KBRIDGE_NAME_MAX 15
#define KBRIDGE_MZ_PREFIX "kbridge_"
/* Dynamic mbuf field with the TSC at enqueue: residence-time statistics. */
#define KBRIDGE_DYNFIELD_TSC "kbridge_enqueue_tsc"
/* IPC action by which a kbridge worker hands its eventfd to the app. */
#define KBRIDGE_MP_WAKEUP "kbridge_wakeup"

/* What the app's port can take from kbridge (kbridge_ctl.app_offloads). */
/* TCP super-frames as one mbuf chain with RTE_MBUF_F_TX_TCP_SEG, l2/l3/l4
 * lengths, tso_segsz and the pseudo-header checksum: the port segments them.
 * Without it kbridge hands over MTU-sized frames with finished checksums. */
#define KBRIDGE_APP_TSO 0x1u

/* Per-queue shared state. Each field has one writer, named in its comment. */
struct kbridge_queue_ctl {
	/* Written by the worker: non-zero while it is parked or about to park. */
	volatile uint32_t need_wakeup;
	/* Written by the app: 1 once an eventfd for this queue was received. */
	volatile uint32_t have_eventfd;
	/* Counters written by the app lcore serving this queue. */
	volatile uint64_t to_kernel_pkts;    /* enqueued to the to_kernel ring */
	volatile uint64_t to_kernel_dropped; /* ring full: freed by the app */
	volatile uint64_t from_kernel_pkts;  /* dequeued by the app */
	volatile uint64_t kicks;             /* eventfd writes */
} __rte_cache_aligned;

/* The control block at the start of memzone "kbridge_<name>". */
struct kbridge_ctl {
	uint32_t magic;
	uint32_t version;
	char name[KBRIDGE_NAME_MAX + 1];
	char mempool[RTE_MEMPOOL_NAMESIZE];
	uint16_t nb_queues;
	uint16_t reserved;
	uint32_t ring_size;
	int32_t app_pid;
	/* Offset of KBRIDGE_DYNFIELD_TSC in struct rte_mbuf, or -1. */
	int32_t tsc_offset;
	uint64_t tsc_hz;
	struct kbridge_queue_ctl q[KBRIDGE_MAX_QUEUES];
	/* ---- version 2 ---- */
	/* Written by the app before it publishes the block, or through
	 * kbridge_port_set_offloads() before kbridge starts: KBRIDGE_APP_*. */
	uint32_t app_offloads;
	/* The most segments one mbuf chain may have on the app's port
	 * (rte_eth_desc_lim.nb_seg_max); kbridge splits what would need more. */
	uint16_t app_max_segs;
	uint16_t reserved2;
	/* ---- version 2: lifecycle (in what was reserved3[0..1]) ---- */
	/* The kbridge serving the port, claimed and released by kbridge with
	 * compare-and-swap: its pid in the low 32 bits, the low 32 bits of its
	 * start time (field 22 of /proc/<pid>/stat, clock ticks since boot) in
	 * the high 32 bits, so a reused pid is told apart. 0: none. */
	volatile uint64_t owner;
	/* Written by the app: non-zero once kbridge_port_free() began. kbridge
	 * then stops touching the rings and clears owner: its acknowledgement. */
	volatile uint32_t closing;
	uint32_t reserved4;
	/* Room for more lifecycle state; zero until used. */
	uint64_t reserved3[6];
	/* ---- version 3 ---- */
	/* The DPDK the app runs, rte_version() ("DPDK 24.11.8"), and the
	 * RTE_VERSION of the headers it was built with. kbridge (a DPDK
	 * secondary) must run exactly the app's DPDK; it reports both. */
	char dpdk_version[32];
	uint32_t dpdk_version_num;
	uint32_t reserved5;
} __rte_cache_aligned;

/* Parameters of the IPC message KBRIDGE_MP_WAKEUP (fds[0] is the eventfd). */
struct kbridge_mp_wakeup {
	char name[KBRIDGE_NAME_MAX + 1];
	uint16_t queue;
};

/* The app's process-local handle of a port. */
struct kbridge_port {
	const struct rte_memzone *mz;
	struct kbridge_ctl *ctl;
	struct rte_ring *to_kernel[KBRIDGE_MAX_QUEUES];
	struct rte_ring *from_kernel[KBRIDGE_MAX_QUEUES];
	/* The worker's eventfd per queue in this process, -1 when none. */
	volatile int eventfd[KBRIDGE_MAX_QUEUES];
};

static inline int
kbridge_ring_name(char *buf, size_t len, const char *port, const char *dir,
		  uint16_t q)
{
	int n = snprintf(buf, len, "kb_%s_%s%u", port, dir, (unsigned int)q);
	return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

/* Registry for the IPC handler, which gets no user data. Weak, not static:
 * every translation unit that includes this header shares one registry, so
 * a port created in one file and freed in another is never left stale. */
#define KBRIDGE_MAX_PORTS 8
__attribute__((weak)) struct kbridge_port *kbridge_ports_[KBRIDGE_MAX_PORTS];

static inline int
kbridge_mp_wakeup_(const struct rte_mp_msg *msg, const void *peer)
{
	struct rte_mp_msg reply;
	const struct kbridge_mp_wakeup *req =
		(const struct kbridge_mp_wakeup *)msg->param;
	int32_t status = -ENOENT;
	int i;

	if (msg->len_param < (int)sizeof(*req) || msg->num_fds != 1) {
		status = -EINVAL;
	} else {
		for (i = 0; i < KBRIDGE_MAX_PORTS; i++) {
			struct kbridge_port *p = kbridge_ports_[i];
			int old;

			if (p == NULL ||
			    strncmp(p->ctl->name, req->name, KBRIDGE_NAME_MAX) != 0)
				continue;
			if (req->queue >= p->ctl->nb_queues) {
				status = -ERANGE;
				break;
			}
			/* The lcore reads eventfd[] concurrently: swap atomically
			 * and close the previous worker's fd (a restarted kbridge). */
			old = __atomic_exchange_n(&p->eventfd[req->queue],
						  msg->fds[0], __ATOMIC_SEQ_CST);
			if (old >= 0)
				close(old);
			p->ctl->q[req->queue].have_eventfd = 1;
			status = 0;
			break;
		}
	}
	if (status != 0 && msg->num_fds > 0)
		close(msg->fds[0]);

	memset(&reply, 0, sizeof(reply));
	rte_strlcpy(reply.name, msg->name, sizeof(reply.name));
	reply.len_param = sizeof(status);
	memcpy(reply.param, &status, sizeof(status));
	return rte_mp_reply(&reply, (const char *)peer);
}

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
 * What kbridge holds (version 2). kbridge records, per queue, the mbufs its
 * worker holds between two ring operations, in memzone
 * "kbridge_<name>_held", which kbridge creates: the burst it dequeued from
 * to_kernel and has not freed yet, and the mbufs it allocated for
 * from_kernel and has not enqueued yet. A kbridge that takes over from a
 * killed one frees them; kbridge_port_free() frees them when no live kbridge
 * holds the port, then frees the memzone. A record never names an mbuf that
 * was freed or handed over: n is cleared before its mbufs are freed or
 * enqueued, and set only after they were dequeued or allocated.
 */
#define KBRIDGE_HELD_SUFFIX "_held"
#define KBRIDGE_HELD_MAGIC 0x4b42484cu /* "KBHL" */
#define KBRIDGE_HELD_MAX 1024          /* the largest burst kbridge takes */
/* How long kbridge_port_free() waits for a live kbridge to let go. */
#define KBRIDGE_FREE_WAIT_MS 2000

struct kbridge_held_q {
	volatile uint32_t n; /* m[0..n) are held */
	/* kbridge's own (it was padding): the ring operation under way, so
	 * that a kbridge taking over from a killed one can tell what it had
	 * claimed or published. The app never reads or writes it. */
	volatile uint32_t pend;
	struct rte_mbuf *m[KBRIDGE_HELD_MAX];
};

struct kbridge_held {
	uint32_t magic;
	uint32_t pad;
	struct kbridge_held_q out[KBRIDGE_MAX_QUEUES]; /* dequeued from to_kernel */
	struct kbridge_held_q in[KBRIDGE_MAX_QUEUES];  /* allocated for from_kernel */
};

/* Whether the kbridge named by a kbridge_ctl.owner value still runs. */
/* Reads /proc/PID/stat into buf and returns what follows the command name
 * (field 2, which may hold spaces and parentheses: it ends at the last ')'):
 * " S ppid ...", field 3 first; NULL when unreadable. */
static inline const char *
kbridge_proc_stat_(pid_t pid, char *buf, size_t size)
{
	char path[64];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (f == NULL)
		return NULL;
	n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strrchr(buf, ')');
}

/* Whether pid is a zombie (state Z or X): it has exited, only its pid waits
 * for a parent that reaps late. */
static inline int
kbridge_pid_exited_(pid_t pid)
{
	char buf[512];
	const char *p = kbridge_proc_stat_(pid, buf, sizeof(buf));

	return p != NULL && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

static inline int
kbridge_owner_alive_(uint64_t owner)
{
	pid_t pid = (pid_t)(uint32_t)owner;

	if (owner == 0 || pid <= 0)
		return 0;
	if (kill(pid, 0) < 0 && errno != EPERM)
		return 0;
	return !kbridge_pid_exited_(pid);
}

/*
 * Tells kbridge that the port goes away (kbridge_ctl.closing) and waits, at
 * most KBRIDGE_FREE_WAIT_MS, until no live kbridge owns it: kbridge stops
 * touching the rings, frees what it holds and clears owner. Returns 1 when
 * no live kbridge owns the port, 0 when the wait timed out.
 */
static inline int
kbridge_port_detach_(struct kbridge_port *p)
{
	struct kbridge_ctl *c = p->ctl;
	uint64_t owner;
	int waited;

	/* Store closing, full fence, load owner: paired with kbridge's claim
	 * (CAS owner, then load closing), one of the two sees the other. */
	__atomic_store_n(&c->closing, 1, __ATOMIC_SEQ_CST);
	for (waited = 0;; waited += 10) {
		owner = __atomic_load_n(&c->owner, __ATOMIC_SEQ_CST);
		if (!kbridge_owner_alive_(owner))
			return 1;
		if (waited >= KBRIDGE_FREE_WAIT_MS) {
			fprintf(stderr,
				"kbridge.h: port %s: kbridge pid %u did not let go within %d ms; freeing the port anyway\n",
				c->name, (unsigned int)(uint32_t)owner, KBRIDGE_FREE_WAIT_MS);
			return 0;
		}
		rte_delay_us_sleep(10000);
	}
}

/* Frees what a dead (or departed) kbridge held, when free_mbufs says no
 * live kbridge owns the port, and the record's memzone. */
static inline void
kbridge_held_free_(struct kbridge_port *p, int free_mbufs)
{
	char mzname[RTE_MEMZONE_NAMESIZE];
	const struct rte_memzone *mz;
	struct kbridge_held *h;
	int q;

	snprintf(mzname, sizeof(mzname), KBRIDGE_MZ_PREFIX "%s" KBRIDGE_HELD_SUFFIX,
		 p->ctl->name);
	mz = rte_memzone_lookup(mzname);
	if (mz == NULL)
		return;
	if (!free_mbufs)
		return; /* a live kbridge may still write it: leave it */
	h = (struct kbridge_held *)mz->addr;
	if (mz->len >= sizeof(*h) && h->magic == KBRIDGE_HELD_MAGIC) {
		for (q = 0; q < KBRIDGE_MAX_QUEUES; q++) {
			uint32_t n = h->out[q].n;

			if (n > 0 && n <= KBRIDGE_HELD_MAX)
				rte_pktmbuf_free_bulk(h->out[q].m, n);
			h->out[q].n = 0;
			n = h->in[q].n;
			if (n > 0 && n <= KBRIDGE_HELD_MAX)
				rte_pktmbuf_free_bulk(h->in[q].m, n);
			h->in[q].n = 0;
		}
	}
	rte_memzone_free(mz);
}

/*
 * Free a port: kbridge is told and given KBRIDGE_FREE_WAIT_MS to let go (it
 * then exits, saying why), then the rings are drained (their mbufs freed), and
 * the rings, the memzones and the handle freed. Better: stop kbridge first.
 */
static inline void
kbridge_port_free(struct kbridge_port *p)
{
	int i;

	if (p == NULL)
		return;
	for (i = 0; i < KBRIDGE_MAX_PORTS; i++)
		if (kbridge_ports_[i] == p)
			kbridge_ports_[i] = NULL;
	if (p->ctl != NULL)
		kbridge_held_free_(p, kbridge_port_detach_(p));
	for (i = 0; i < KBRIDGE_MAX_QUEUES; i++) {
		kbridge_drain_ring_(p->to_kernel[i]);
		kbridge_drain_ring_(p->from_kernel[i]);
		rte_ring_free(p->to_kernel[i]);
		rte_ring_free(p->from_kernel[i]);
		if (p->eventfd[i] >= 0)
			close(p->eventfd[i]);
	}
	if (p->mz != NULL)
		rte_memzone_free(p->mz);
	rte_free(p);
}

/*
 * Create exception port `name` with `nb_queues` queue pairs of `ring_size`
 * entries (a power of two), whose kernel-to-app mbufs kbridge allocates from
 * `mp`: a pktmbuf pool (rte_pktmbuf_pool_create) whose mbufs hold at least
 * 128 bytes after RTE_PKTMBUF_HEADROOM, else kbridge refuses to attach
 * (frames longer than one mbuf arrive as chains). Returns NULL and sets
 * rte_errno on failure.
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
	}

	if (rte_mp_action_register(KBRIDGE_MP_WAKEUP, kbridge_mp_wakeup_) < 0 &&
	    rte_errno != EEXIST && rte_errno != ENOTSUP)
		goto fail;
	kbridge_ports_[slot] = p;

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

static inline void
kbridge_kick_(struct kbridge_port *p, uint16_t q)
{
	struct kbridge_queue_ctl *qc = &p->ctl->q[q];
	int fd;
	uint64_t one = 1;

	/* Only the first producer to see the flag kicks; the worker clears
	 * it itself when it wakes, whatever woke it. */
	if (__atomic_exchange_n(&qc->need_wakeup, 0, __ATOMIC_ACQ_REL) == 0)
		return;
	fd = __atomic_load_n(&p->eventfd[q], __ATOMIC_ACQUIRE);
	if (fd < 0)
		return;
	if (write(fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		qc->kicks++;
}

/*
 * Hand `n` packets to the kernel through queue `q`. Returns how many were
 * queued; the rest were freed and counted as to_kernel_dropped. Either way
 * the caller no longer owns any of the n mbufs.
 */
static inline uint16_t
kbridge_to_kernel(struct kbridge_port *p, uint16_t q, struct rte_mbuf **pkts,
		  uint16_t n)
{
	struct kbridge_queue_ctl *qc = &p->ctl->q[q];
	int32_t off = p->ctl->tsc_offset;
	unsigned int sent;
	uint16_t i;

	if (n == 0)
		return 0;
	if (off >= 0) {
		uint64_t now = rte_rdtsc();

		for (i = 0; i < n; i++)
			*RTE_MBUF_DYNFIELD(pkts[i], off, uint64_t *) = now;
	}
	sent = rte_ring_enqueue_burst(p->to_kernel[q], (void **)pkts, n, NULL);
	qc->to_kernel_pkts += sent;
	if (sent < n) {
		qc->to_kernel_dropped += n - sent;
		rte_pktmbuf_free_bulk(pkts + sent, n - sent);
	}
	if (sent > 0) {
		/* Pairs with the worker's fence between setting need_wakeup
		 * and re-checking the ring: one of the two sees the other. */
		rte_atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (qc->need_wakeup)
			kbridge_kick_(p, q);
	}
	return (uint16_t)sent;
}

/*
 * Declare what the app's port can take from kbridge (KBRIDGE_APP_TSO) and
 * the most segments per mbuf chain it takes. Call it before kbridge starts:
 * kbridge reads it once, when it opens the port.
 */
static inline void
kbridge_port_set_offloads(struct kbridge_port *p, uint32_t offloads,
			  uint16_t max_segs)
{
	p->ctl->app_max_segs = max_segs;
	__atomic_store_n(&p->ctl->app_offloads, offloads, __ATOMIC_RELEASE);
}

/* Take up to `n` packets the kernel sent, from queue `q`. The caller owns them. */
static inline uint16_t
kbridge_from_kernel(struct kbridge_port *p, uint16_t q, struct rte_mbuf **pkts,
		    uint16_t n)
{
	unsigned int got;

	got = rte_ring_dequeue_burst(p->from_kernel[q], (void **)pkts, n, NULL);
	p->ctl->q[q].from_kernel_pkts += got;
	return (uint16_t)got;
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_H */

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
 *    multi-process IPC (action KBRIDGE_MP_WAKEUP), taken only from the
 *    kbridge that owns the port. An app that never receives one still
 *    works: the worker bounds each park with a precise timer.
 *  - Freeing: kbridge_port_free() never touches the rings while the kbridge
 *    that owns the port (pid and start time) runs; it returns -EBUSY instead
 *    and lets the app decide.
 */
#ifndef KBRIDGE_H
#define KBRIDGE_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
#include <rte_spinlock.h>
#include <rte_string_fns.h>
#include <rte_version.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KBRIDGE_MAGIC 0x4b425247u /* "KBRG" */
/* Versions 2 to 5 append fields to the control block (see struct
 * kbridge_ctl); kbridge still serves apps of older versions, which lack them. */
#define KBRIDGE_VERSION 5u
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

/* kbridge_ctl.link (version 4), written by kbridge_port_set_link(): the
 * speed in Mb/s in the low 32 bits and these flags. 0: never reported, and
 * kbridge leaves the kernel interface's carrier on. */
#define KBRIDGE_LINK_REPORTED (1ull << 32)
#define KBRIDGE_LINK_UP (1ull << 33)
#define KBRIDGE_LINK_FULL_DUPLEX (1ull << 34)

/*
 * Requests (version 5): what an administrator does to the kernel interface
 * (ip link set kb0 mtu|up|down|address|promisc|allmulticast) reaches the app
 * as a request, as KNI's rte_kni_ops callbacks did, but without a kernel
 * thread or rtnl held anywhere: kbridge posts one request at a time in the
 * control block; the app takes it off its control path with
 * kbridge_port_poll_request(), applies it to its ethdev and answers with
 * kbridge_port_reply(). kbridge keeps an accepted change and sets a refused
 * or unanswered one back. Request types, and their bits in the mask the app
 * passes to kbridge_port_serve_requests():
 */
#define KBRIDGE_REQ_MTU 1u      /* value: the new MTU (rte_eth_dev_set_mtu) */
#define KBRIDGE_REQ_LINK 2u     /* value: 1 up, 0 down (rte_eth_dev_set_link_up/down) */
#define KBRIDGE_REQ_MAC 3u      /* mac: the new address (rte_eth_dev_default_mac_addr_set) */
#define KBRIDGE_REQ_PROMISC 4u  /* value: 1 on, 0 off (rte_eth_promiscuous_enable/disable) */
#define KBRIDGE_REQ_ALLMULTI 5u /* value: 1 on, 0 off (rte_eth_allmulticast_enable/disable) */
#define KBRIDGE_REQ_BIT(t) (1u << (t))
#define KBRIDGE_REQ_ALL                                                             \
	(KBRIDGE_REQ_BIT(KBRIDGE_REQ_MTU) | KBRIDGE_REQ_BIT(KBRIDGE_REQ_LINK) |     \
	 KBRIDGE_REQ_BIT(KBRIDGE_REQ_MAC) | KBRIDGE_REQ_BIT(KBRIDGE_REQ_PROMISC) | \
	 KBRIDGE_REQ_BIT(KBRIDGE_REQ_ALLMULTI))

/* kbridge_ctl.accepted: which values it records, and the values. */
#define KBRIDGE_ACCEPTED_MAC (1ull << 48)      /* the MAC in bits 0-47, first byte highest */
#define KBRIDGE_ACCEPTED_LINK (1ull << 49)     /* admin state recorded: ..._UP */
#define KBRIDGE_ACCEPTED_UP (1ull << 50)
#define KBRIDGE_ACCEPTED_PROMISC (1ull << 51)  /* promiscuous recorded: ..._PROMISC_ON */
#define KBRIDGE_ACCEPTED_PROMISC_ON (1ull << 52)
#define KBRIDGE_ACCEPTED_ALLMULTI (1ull << 53) /* all-multicast recorded: ..._ALLMULTI_ON */
#define KBRIDGE_ACCEPTED_ALLMULTI_ON (1ull << 54)

/* One request, as kbridge_port_poll_request() hands it to the app. */
struct kbridge_request {
	uint32_t seq;   /* kbridge's number of it: kbridge_port_reply() answers this one */
	uint32_t type;  /* KBRIDGE_REQ_* */
	uint32_t value; /* MTU, or 1/0 for LINK, PROMISC, ALLMULTI */
	uint8_t mac[6]; /* KBRIDGE_REQ_MAC */
	uint16_t pad;
};

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
	/* ---- version 4 ---- */
	/* The app port's link (KBRIDGE_LINK_*), written by the app through
	 * kbridge_port_set_link(), read by kbridge, which sets the kernel
	 * interface's carrier from it. One 64-bit store: never torn. */
	volatile uint64_t link;
	uint64_t reserved6;
	/* ---- version 5: the port's MAC and the kernel interface's requests ---- */
	/* The app port's MAC, written by kbridge_port_set_mac() before kbridge
	 * starts; mac_set is non-zero once it was. kbridge gives it to the
	 * kernel interface unless its configuration names one. */
	uint8_t app_mac[6];
	uint16_t app_mac_set;
	/* KBRIDGE_REQ_BIT()s of the requests the app serves, and the largest
	 * MTU its port takes (0: kbridge's own limit, its mbufs' room, alone),
	 * written by kbridge_port_serve_requests(). 0: none; kbridge then sets
	 * every change back, as before version 5. */
	volatile uint32_t app_requests;
	uint32_t app_max_mtu;
	/* The mailbox. kbridge makes req_seq odd while it writes req, then
	 * even: a new request whenever it is even and differs from the seq in
	 * req_answer. The app copies req, checks req_seq did not move
	 * meanwhile (a seqlock: kbridge may post the next one after a
	 * timeout), then stores req_answer: the request's seq in the low 32
	 * bits, its result (0: applied; -errno: refused) in the high 32, one
	 * 64-bit store, so that a result is never read with another's seq.
	 * An odd req_seq with nothing being written is a withdrawn request. */
	volatile uint32_t req_seq;
	uint32_t reserved7;
	volatile uint64_t req_answer;
	struct kbridge_request req;
	/* kbridge's own (it was reserved8[0]; the app never reads or writes
	 * it): what the app's port accepted of kbridge's requests, so that the
	 * next kbridge makes the kernel interface as the port now is (MAC,
	 * admin state, promiscuous, all-multicast). KBRIDGE_ACCEPTED_* flags
	 * with the MAC in the low 48 bits; one 64-bit store. 0: nothing
	 * accepted since the app created the port. */
	volatile uint64_t accepted;
	/* kbridge's own (it was reserved8[1]): the seq of the last request
	 * kbridge posted in place of an unanswered one (the value it set the
	 * kernel interface back to). A kbridge that takes the port over leaves
	 * that request for the app while it is unanswered, and withdraws any
	 * other. */
	volatile uint64_t undo;
	uint64_t reserved8[2];
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

/*
 * Who owns the port: kbridge_ctl.owner names the kbridge that serves it by
 * its pid and the low 32 bits of its start time (field 22 of
 * /proc/<pid>/stat), so a pid the kernel gave to another process since is
 * told apart. kbridge decides with these same functions whether it may take
 * a port over (ring/port.c), and kbridge_port_free() whether it may touch
 * the rings: one rule on both sides.
 */
enum kbridge_owner_state {
	KBRIDGE_OWNER_NONE = 0, /* owner is 0: no kbridge serves the port */
	/* It runs, or may: stopped (SIGSTOP), in a frozen cgroup, starved of
	 * CPU, or its /proc entry unreadable (hidepid) while the pid exists.
	 * It may still dequeue from the rings and free what it holds. */
	KBRIDGE_OWNER_ALIVE,
	KBRIDGE_OWNER_GONE,   /* exited and reaped: the pid does not exist */
	/* Exited, not yet reaped by its parent: state Z and no thread left,
	 * so none of its code runs or will run again. */
	KBRIDGE_OWNER_ZOMBIE,
	KBRIDGE_OWNER_REUSED, /* the pid is another process's: another start time */
};

/* Reads what /proc/<pid>/stat says of a process: its state (field 3), its
 * number of threads (field 20) and its start time (field 22, clock ticks
 * since boot). Returns 0, or -errno (-ENOENT: not in this /proc). */
static inline int
kbridge_proc_stat_(pid_t pid, char *state, long *threads, unsigned long long *start)
{
	char path[32], buf[1024];
	const char *s;
	size_t n;
	FILE *f;
	int field, ok = 1;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (f == NULL)
		return errno > 0 ? -errno : -ENOENT;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Field 2, the command name, may hold spaces and parentheses: count
	 * the fields from its last ')'. */
	s = strrchr(buf, ')');
	for (field = 3; ok && s != NULL && field <= 22; field++) {
		s = strchr(s + 1, ' '); /* the space before field `field` */
		if (s == NULL)
			break;
		if (field == 3)
			ok = sscanf(s + 1, "%c", state) == 1;
		else if (field == 20)
			ok = sscanf(s + 1, "%ld", threads) == 1;
		else if (field == 22)
			ok = sscanf(s + 1, "%llu", start) == 1;
	}
	return ok && s != NULL && field > 22 ? 0 : -EINVAL;
}

/* What became of the kbridge a kbridge_ctl.owner value names. */
static inline enum kbridge_owner_state
kbridge_owner_state_(uint64_t owner)
{
	pid_t pid = (pid_t)(uint32_t)owner;
	uint32_t start = (uint32_t)(owner >> 32);
	unsigned long long st = 0;
	long threads = 0;
	char state = '?';

	if (owner == 0)
		return KBRIDGE_OWNER_NONE;
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH))
		return KBRIDGE_OWNER_GONE;
	if (kbridge_proc_stat_(pid, &state, &threads, &st) < 0)
		/* Unreadable (hidepid, no /proc): trust kill(), asked again in
		 * case it exited in between. */
		return kill(pid, 0) < 0 && errno == ESRCH ? KBRIDGE_OWNER_GONE :
							     KBRIDGE_OWNER_ALIVE;
	/* A start time of 0 is one kbridge could not read of itself: the pid
	 * alone must do. */
	if (start != 0 && (uint32_t)st != start)
		return KBRIDGE_OWNER_REUSED;
	/* A thread-group leader shows Z as soon as it exits, while other
	 * threads may still run; the group is dead once it alone is left. */
	if ((state == 'Z' || state == 'X') && threads <= 1)
		return KBRIDGE_OWNER_ZOMBIE;
	return KBRIDGE_OWNER_ALIVE;
}

/* Whether the kbridge named by a kbridge_ctl.owner value still runs. */
static inline int
kbridge_owner_alive_(uint64_t owner)
{
	return kbridge_owner_state_(owner) == KBRIDGE_OWNER_ALIVE;
}

/* The pid of the kbridge that serves the port and still runs, 0 when none
 * does: after kbridge_port_free() returned -EBUSY, the one to name. */
static inline pid_t
kbridge_port_owner_pid(const struct kbridge_port *p)
{
	uint64_t owner;

	if (p == NULL || p->ctl == NULL)
		return 0;
	owner = __atomic_load_n(&p->ctl->owner, __ATOMIC_SEQ_CST);
	return kbridge_owner_alive_(owner) ? (pid_t)(uint32_t)owner : 0;
}

/* Registry for the IPC handler, which gets no user data. Weak, not static:
 * every translation unit that includes this header shares one registry, so
 * a port created in one file and freed in another is never left stale. The
 * lock keeps the handler (on DPDK's IPC thread) and kbridge_port_free()
 * apart: the handler never uses a port that is being freed. */
#define KBRIDGE_MAX_PORTS 8
__attribute__((weak)) struct kbridge_port *kbridge_ports_[KBRIDGE_MAX_PORTS];
__attribute__((weak)) rte_spinlock_t kbridge_ports_lock_ = RTE_SPINLOCK_INITIALIZER;

/* The pid in a DPDK IPC peer name: a secondary process binds its socket at
 * "<runtime dir>/mp_socket_<pid>_<tsc>" (DPDK 17.11 to 24.11). -1 when the
 * name holds none (the primary's own socket, another naming). */
static inline long
kbridge_mp_peer_pid_(const char *peer)
{
	static const char pre[] = "mp_socket_";
	const char *s;
	char *end;
	long pid;

	if (peer == NULL)
		return -1;
	s = strrchr(peer, '/');
	s = s == NULL ? peer : s + 1;
	if (strncmp(s, pre, sizeof(pre) - 1) != 0 || s[sizeof(pre) - 1] < '0' ||
	    s[sizeof(pre) - 1] > '9')
		return -1;
	pid = strtol(s + sizeof(pre) - 1, &end, 10);
	return *end == '_' && pid > 0 ? pid : -1;
}

/*
 * Takes the eventfd fd for queue q of p from IPC peer `peer`, or refuses it
 * (-errno; fd is then the caller's to close).
 *
 * Only the kbridge that owns the port may hand one over: an eventfd from any
 * other secondary (a tool, a kbridge that was refused the port or is still
 * starting, a stale one) would take the kicks away from the worker. The
 * sender is identified by the pid in its IPC socket's name, which DPDK forms
 * from getpid() of the process that bound it, and it must be the pid of
 * kbridge_ctl.owner, whose start time must still match (kbridge claims the
 * owner before it sends an eventfd). A token in the message would prove no
 * more: whatever the header could check it against lies in the shared
 * memory every secondary maps, and such a process is trusted as root anyway
 * (it can write the rings). The check stops mistakes, not an attacker with
 * access to the app's /run/dpdk.
 *
 * An lcore may have loaded the current fd and be about to write it, so the
 * number is never closed while the port lives: a later eventfd is dup2()ed
 * onto it, which swaps the file behind the number atomically. The lcore
 * writes the old eventfd or the new one, never a descriptor that took the
 * number meanwhile.
 */
static inline int
kbridge_mp_wakeup_take_(struct kbridge_port *p, uint16_t q, int fd, const char *peer)
{
	struct kbridge_ctl *c = p->ctl;
	uint64_t owner = __atomic_load_n(&c->owner, __ATOMIC_SEQ_CST);
	long peer_pid = kbridge_mp_peer_pid_(peer);
	int cur;

	if (q >= c->nb_queues)
		return -ERANGE;
	if (__atomic_load_n(&c->closing, __ATOMIC_SEQ_CST) != 0)
		return -ESHUTDOWN;
	if (peer_pid <= 0 || owner == 0 || (uint32_t)owner != (uint32_t)peer_pid ||
	    !kbridge_owner_alive_(owner)) {
		fprintf(stderr,
			"kbridge.h: port %s: refused the eventfd of queue %u from %s (pid %ld): the port is served by kbridge pid %u\n",
			c->name, (unsigned int)q, peer != NULL ? peer : "?", peer_pid,
			(unsigned int)(uint32_t)owner);
		return -EPERM;
	}
	cur = __atomic_load_n(&p->eventfd[q], __ATOMIC_ACQUIRE);
	if (cur < 0) {
		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		__atomic_store_n(&p->eventfd[q], fd, __ATOMIC_RELEASE);
	} else {
		if (dup2(fd, cur) < 0)
			return errno > 0 ? -errno : -EBADF;
		(void)fcntl(cur, F_SETFD, FD_CLOEXEC);
		close(fd);
	}
	c->q[q].have_eventfd = 1;
	return 0;
}

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
		rte_spinlock_lock(&kbridge_ports_lock_);
		for (i = 0; i < KBRIDGE_MAX_PORTS; i++) {
			struct kbridge_port *p = kbridge_ports_[i];

			if (p == NULL ||
			    strncmp(p->ctl->name, req->name, KBRIDGE_NAME_MAX) != 0)
				continue;
			status = kbridge_mp_wakeup_take_(p, req->queue, msg->fds[0],
							 (const char *)peer);
			break;
		}
		rte_spinlock_unlock(&kbridge_ports_lock_);
	}
	if (status != 0)
		for (i = 0; i < msg->num_fds && i < RTE_MP_MAX_FD_NUM; i++)
			close(msg->fds[i]);

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
/* How long one kbridge_port_free() waits for a live kbridge to let go. */
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

/*
 * Tells kbridge that the port goes away (kbridge_ctl.closing) and waits, at
 * most KBRIDGE_FREE_WAIT_MS, until no live kbridge owns it: kbridge stops
 * touching the rings, frees what it holds and clears owner; or it is gone
 * (exited, a zombie, its pid reused). Returns 0 then, -EBUSY when the owner
 * still lives after the wait.
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
			return 0;
		if (waited >= KBRIDGE_FREE_WAIT_MS) {
			fprintf(stderr,
				"kbridge.h: port %s: kbridge pid %u still serves it after %d ms (stopped, frozen or starved?): the port is left as it is, kbridge_port_free() returns -EBUSY\n",
				c->name, (unsigned int)(uint32_t)owner, KBRIDGE_FREE_WAIT_MS);
			return -EBUSY;
		}
		rte_delay_us_sleep(10000);
	}
}

/* Frees what a dead (or departed) kbridge held, and the record's memzone:
 * only once no live kbridge owns the port. */
static inline void
kbridge_held_free_(struct kbridge_port *p)
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
 * Frees a port; call it once no lcore uses the port. kbridge is told
 * (kbridge_ctl.closing) and given KBRIDGE_FREE_WAIT_MS to let go: it stops
 * touching the rings, frees what it holds, clears owner and exits, saying
 * why. Then what a dead kbridge held is freed, the rings are drained (their
 * mbufs freed), and the rings, the memzones, the eventfds and the handle
 * are freed. Better: stop kbridge first.
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
		rte_ring_free(p->to_kernel[i]);
		rte_ring_free(p->from_kernel[i]);
		if (p->eventfd[i] >= 0)
			close(p->eventfd[i]);
	}
	if (p->mz != NULL)
		rte_memzone_free(p->mz);
	rte_free(p);
	return 0;
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

/*
 * Report the app port's link: up or down, its speed in Mb/s (a
 * RTE_ETH_SPEED_NUM_* value; 0 if unknown) and duplex. kbridge sets the
 * kernel interface's carrier from it within milliseconds, as a NIC's driver
 * does: down, the interface shows NO-CARRIER and its routes linkdown. Call
 * it once the port is started and whenever its link changes: from an LSC
 * callback or the app's control path (rte_eth_link_get_nowait), never from
 * the lcore loop. An app that never calls it keeps the carrier on.
 */
static inline void
kbridge_port_set_link(struct kbridge_port *p, int up, uint32_t speed_mbps,
		      int full_duplex)
{
	uint64_t v;

	if (speed_mbps == UINT32_MAX) /* RTE_ETH_SPEED_NUM_UNKNOWN */
		speed_mbps = 0;
	v = KBRIDGE_LINK_REPORTED | speed_mbps;

	if (up)
		v |= KBRIDGE_LINK_UP;
	if (full_duplex)
		v |= KBRIDGE_LINK_FULL_DUPLEX;
	__atomic_store_n(&p->ctl->link, v, __ATOMIC_RELEASE);
}

/*
 * Record the app port's MAC (rte_eth_macaddr_get): kbridge gives it to the
 * kernel interface, as a NIC's driver gives its own, unless kbridge's
 * configuration names one (interface.mac). Call it before kbridge starts.
 */
static inline void
kbridge_port_set_mac(struct kbridge_port *p, const uint8_t mac[6])
{
	memcpy(p->ctl->app_mac, mac, sizeof(p->ctl->app_mac));
	__atomic_store_n(&p->ctl->app_mac_set, 1, __ATOMIC_RELEASE);
}

/*
 * Declare which requests the app serves (KBRIDGE_REQ_BIT(KBRIDGE_REQ_MTU) |
 * ..., or KBRIDGE_REQ_ALL) and the largest MTU its port takes (0: no limit
 * of its own; kbridge still holds the MTU to what its mbufs hold). Call it
 * before kbridge starts, then call kbridge_port_poll_request() from the
 * control path. An app that never calls it keeps the kernel interface as
 * kbridge's configuration says: kbridge sets every change back.
 */
static inline void
kbridge_port_serve_requests(struct kbridge_port *p, uint32_t types, uint32_t max_mtu)
{
	p->ctl->app_max_mtu = max_mtu;
	__atomic_store_n(&p->ctl->app_requests, types & KBRIDGE_REQ_ALL, __ATOMIC_RELEASE);
}

/*
 * kbridge's side of the mailbox, here so that both sides of the protocol
 * have one home (kbridge calls these; an app never does). Posts a request
 * and returns its seq: req_seq odd while req is written, then even. A
 * kbridge killed while posting left it odd: the next post starts past it.
 */
static inline uint32_t
kbridge_req_post_(struct kbridge_ctl *c, uint32_t type, uint32_t value, const uint8_t mac[6])
{
	uint32_t seq = __atomic_load_n(&c->req_seq, __ATOMIC_RELAXED);

	seq = (seq & 1u) ? seq + 2u : seq + 1u; /* odd: being written */
	__atomic_store_n(&c->req_seq, seq, __ATOMIC_RELAXED);
	rte_atomic_thread_fence(__ATOMIC_RELEASE);
	c->req.type = type;
	c->req.value = value;
	memcpy(c->req.mac, mac, sizeof(c->req.mac));
	c->req.seq = seq + 1u;
	__atomic_store_n(&c->req_seq, seq + 1u, __ATOMIC_RELEASE);
	return seq + 1u;
}

/* 1 and *result once the app answered request seq, else 0. */
static inline int
kbridge_req_answer_(const struct kbridge_ctl *c, uint32_t seq, int32_t *result)
{
	uint64_t a = __atomic_load_n(&c->req_answer, __ATOMIC_ACQUIRE);

	if ((uint32_t)a != seq)
		return 0;
	*result = (int32_t)(uint32_t)(a >> 32);
	return 1;
}

/* Withdraws a request no one answered (a kbridge that took the port over
 * from a killed one, whose kb0 went with it): req_seq odd, so the app
 * never takes it. The next post starts past it. */
static inline void
kbridge_req_withdraw_(struct kbridge_ctl *c)
{
	uint32_t seq = __atomic_load_n(&c->req_seq, __ATOMIC_ACQUIRE);

	if ((seq & 1u) == 0 && seq != (uint32_t)__atomic_load_n(&c->req_answer, __ATOMIC_ACQUIRE))
		__atomic_store_n(&c->req_seq, seq + 1u, __ATOMIC_RELEASE);
}

/*
 * Answers the request kbridge_port_poll_request() returned: 0 when it was
 * applied, -errno when the port refused it (rte_eth_dev_set_mtu's answer,
 * say). kbridge logs a refusal with the errno and sets the kernel interface
 * back. An answer to a request kbridge no longer waits for is ignored.
 */
static inline void
kbridge_port_reply(struct kbridge_port *p, const struct kbridge_request *req, int result)
{
	struct kbridge_ctl *c = p->ctl;

	if (__atomic_load_n(&c->req_seq, __ATOMIC_ACQUIRE) != req->seq)
		return; /* kbridge gave up on it and may be posting another */
	__atomic_store_n(&c->req_answer, (uint64_t)(uint32_t)result << 32 | req->seq, __ATOMIC_RELEASE);
}

/*
 * Takes the request kbridge posted, if one waits: returns 1 and fills *req,
 * else 0. Lock-free and without a system call: call it from the app's
 * control path (a timer, a control thread, its main loop between bursts),
 * say every few milliseconds, never holding a lock the lcores need. Apply
 * the request to the port, then answer it with kbridge_port_reply(). A
 * request stays posted until it is answered or kbridge replaces it: when
 * no answer came in time kbridge sets the kernel interface back and posts
 * the old value in its place, so an app that polls late applies that one;
 * kbridge, and a kbridge that takes the port over, posts nothing else until
 * that one is answered.
 * Many PMDs want the port stopped for an MTU change: stop the lcores'
 * use of the port first, as for any ethdev reconfiguration.
 */
static inline int
kbridge_port_poll_request(struct kbridge_port *p, struct kbridge_request *req)
{
	struct kbridge_ctl *c = p->ctl;
	uint32_t s1, s2;

	s1 = __atomic_load_n(&c->req_seq, __ATOMIC_ACQUIRE);
	if ((s1 & 1) != 0 || s1 == (uint32_t)__atomic_load_n(&c->req_answer, __ATOMIC_ACQUIRE))
		return 0;
	memcpy(req, (const void *)&c->req, sizeof(*req));
	rte_atomic_thread_fence(__ATOMIC_ACQUIRE);
	s2 = __atomic_load_n(&c->req_seq, __ATOMIC_RELAXED);
	if (s1 != s2)
		return 0; /* kbridge is posting the next one: take it next time */
	req->seq = s1;
	if (req->type < KBRIDGE_REQ_MTU || req->type > KBRIDGE_REQ_ALLMULTI) {
		/* A type this header does not know (a newer kbridge's): refused
		 * here, so that an app never sees what it cannot apply. */
		kbridge_port_reply(p, req, -ENOTSUP);
		return 0;
	}
	return 1;
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

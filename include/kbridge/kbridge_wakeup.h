/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge_wakeup.h: how a kbridge worker's eventfd reaches the app, so that
 * kbridge_to_kernel() can wake the parked worker (kbridge_ring.h). Part of
 * kbridge.h, which applications include.
 *
 * The eventfd reaches the app through DPDK multi-process IPC (action
 * KBRIDGE_MP_WAKEUP), taken only from the kbridge that owns the port. An app
 * that never receives one still works: the worker bounds each park with a
 * precise timer.
 */
#ifndef KBRIDGE_WAKEUP_H
#define KBRIDGE_WAKEUP_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_spinlock.h>
#include <rte_string_fns.h>

#include "kbridge_ring.h"
#include "kbridge_owner.h"

#ifdef __cplusplus
extern "C" {
#endif

/* IPC action by which a kbridge worker hands its eventfd to the app. */
#define KBRIDGE_MP_WAKEUP "kbridge_wakeup"

/* Parameters of the IPC message KBRIDGE_MP_WAKEUP (fds[0] is the eventfd). */
struct kbridge_mp_wakeup {
	char name[KBRIDGE_NAME_MAX + 1];
	uint16_t queue;
};

KBRIDGE_LAYOUT_ASSERT_(sizeof(struct kbridge_mp_wakeup) == 18);

/* Registry for the IPC handler, which gets no user data: every port of
 * this process, in slots that grow as ports are made (what memory allows,
 * no constant). Weak, not static: every translation unit that includes
 * this header shares one registry, so a port created in one file and freed
 * in another is never left stale. The lock keeps the handler (on DPDK's IPC
 * thread) and kbridge_port_free() apart: the handler never uses a port
 * that is being freed. The slots live as long as the process.
 *
 * One registry per process, across shared objects too: DPDK's IPC actions
 * are process-wide, so only the first copy of this header to register them
 * answers kbridge, and a port in another copy's registry would get no
 * eventfd (nor ring that copy's doorbell). librte_kni.so exports its copies
 * of the registry, its lock, the doorbell and the flags below
 * (KBRIDGE_REGISTRY_ is default visibility there; node
 * KBRIDGE_PRIVATE_<ABI> of librte_kni/rte_kni.map) and the dynamic linker
 * binds them to the app's, which an executable linked against the library
 * exports. The slots are realloc()ed under the lock by whichever copy adds
 * a port: one libc's heap for all. The link names carry the header's
 * version, since struct kbridge_port is laid out per version: copies of
 * two versions keep two registries (kbridge_port_create() then says so)
 * rather than read each other's ports. */
#ifndef KBRIDGE_REGISTRY_
#define KBRIDGE_REGISTRY_ __attribute__((weak))
#endif
#define KBRIDGE_REGISTRY_V_ 7 /* KBRIDGE_VERSION, as a token for the names */
KBRIDGE_LAYOUT_ASSERT_(KBRIDGE_REGISTRY_V_ == KBRIDGE_VERSION);
#define KBRIDGE_REGISTRY_PASTE2_(a, v) a##v##_
#define KBRIDGE_REGISTRY_PASTE_(a, v) KBRIDGE_REGISTRY_PASTE2_(a, v)
#define KBRIDGE_REGISTRY_NAME_(a) KBRIDGE_REGISTRY_PASTE_(a, KBRIDGE_REGISTRY_V_)
#define kbridge_registry_ KBRIDGE_REGISTRY_NAME_(kbridge_registry_v)
#define kbridge_registry_len_ KBRIDGE_REGISTRY_NAME_(kbridge_registry_len_v)
#define kbridge_ports_lock_ KBRIDGE_REGISTRY_NAME_(kbridge_ports_lock_v)
#define kbridge_doorbell_fd_ KBRIDGE_REGISTRY_NAME_(kbridge_doorbell_fd_v)
#define kbridge_mp_registered_ KBRIDGE_REGISTRY_NAME_(kbridge_mp_registered_v)
#define kbridge_mp_foreign_said_ KBRIDGE_REGISTRY_NAME_(kbridge_mp_foreign_said_v)
KBRIDGE_REGISTRY_ struct kbridge_port **kbridge_registry_;
KBRIDGE_REGISTRY_ unsigned int kbridge_registry_len_;
KBRIDGE_REGISTRY_ rte_spinlock_t kbridge_ports_lock_ = RTE_SPINLOCK_INITIALIZER;
/* This registry's handler is DPDK's KBRIDGE_MP_WAKEUP action; and whether
 * the warning that another copy's is was given. */
KBRIDGE_REGISTRY_ int kbridge_mp_registered_;
KBRIDGE_REGISTRY_ int kbridge_mp_foreign_said_;

/* Puts p in a free slot, growing the slots when none is: 0, or -ENOMEM. */
static inline int
kbridge_registry_add_(struct kbridge_port *p)
{
	struct kbridge_port **grown;
	unsigned int i, len;

	rte_spinlock_lock(&kbridge_ports_lock_);
	for (i = 0; i < kbridge_registry_len_; i++)
		if (kbridge_registry_[i] == NULL) {
			kbridge_registry_[i] = p;
			rte_spinlock_unlock(&kbridge_ports_lock_);
			return 0;
		}
	len = kbridge_registry_len_ == 0 ? 16 : 2 * kbridge_registry_len_;
	grown = (struct kbridge_port **)realloc(kbridge_registry_, len * sizeof(*grown));
	if (grown == NULL) {
		rte_spinlock_unlock(&kbridge_ports_lock_);
		return -ENOMEM;
	}
	memset(grown + kbridge_registry_len_, 0, (len - kbridge_registry_len_) * sizeof(*grown));
	grown[kbridge_registry_len_] = p;
	kbridge_registry_ = grown;
	kbridge_registry_len_ = len;
	rte_spinlock_unlock(&kbridge_ports_lock_);
	return 0;
}

/* Takes p out of the registry. */
static inline void
kbridge_registry_del_(const struct kbridge_port *p)
{
	unsigned int i;

	rte_spinlock_lock(&kbridge_ports_lock_);
	for (i = 0; i < kbridge_registry_len_; i++)
		if (kbridge_registry_[i] == p)
			kbridge_registry_[i] = NULL;
	rte_spinlock_unlock(&kbridge_ports_lock_);
}

/*
 * The doorbell: a kbridge that serves every port of the app (discover)
 * hands the app an eventfd over IPC (action KBRIDGE_MP_DOORBELL), which
 * kbridge_port_create(), kbridge_port_free() and kbridge_port_set_link()
 * write, so that it serves a new port, lets go of a freed one and follows a
 * link at once rather than at its next look (every second; every 20 ms
 * for freed ones and links without a doorbell). One write per create,
 * free or link; without a doorbell nothing is written. Any secondary
 * may ring it: the worst one can do is take the rings away from kbridge,
 * which then finds the ports by looking, as without one. The number is
 * never closed: a later doorbell is dup2()ed onto it, as the wakeup
 * eventfds are.
 */
#define KBRIDGE_MP_DOORBELL "kbridge_doorbell"
KBRIDGE_REGISTRY_ volatile int kbridge_doorbell_fd_ = -1;

/* Rings the doorbell, if a kbridge gave one. */
static inline void
kbridge_doorbell_ring_(void)
{
	int fd = __atomic_load_n(&kbridge_doorbell_fd_, __ATOMIC_ACQUIRE);
	uint64_t one = 1;

	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
		/* a full counter: kbridge wakes anyway */
	}
}

/* Puts fd in *slot: the first as it is, a later one dup2()ed onto the
 * number already there (an lcore may have loaded it and be about to write
 * it: the file behind the number is swapped atomically, the number never
 * closed) and closed. 0, or -errno (fd is then the caller's to close). */
static inline int
kbridge_fd_take_(volatile int *slot, int fd)
{
	int cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (cur < 0) {
		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		__atomic_store_n(slot, fd, __ATOMIC_RELEASE);
		return 0;
	}
	if (dup2(fd, cur) < 0)
		return errno > 0 ? -errno : -EBADF;
	(void)fcntl(cur, F_SETFD, FD_CLOEXEC);
	close(fd);
	return 0;
}

/* Answers an IPC request with status; on a refusal the fds it carried are
 * closed. */
static inline int
kbridge_mp_answer_(const struct rte_mp_msg *msg, const void *peer, int32_t status)
{
	struct rte_mp_msg reply;
	int i;

	if (status != 0)
		for (i = 0; i < msg->num_fds && i < RTE_MP_MAX_FD_NUM; i++)
			close(msg->fds[i]);
	memset(&reply, 0, sizeof(reply));
	rte_strlcpy(reply.name, msg->name, sizeof(reply.name));
	reply.len_param = sizeof(status);
	memcpy(reply.param, &status, sizeof(status));
	return rte_mp_reply(&reply, (const char *)peer);
}

static inline int
kbridge_mp_doorbell_(const struct rte_mp_msg *msg, const void *peer)
{
	int32_t status = -EINVAL;

	if (msg->num_fds == 1) {
		rte_spinlock_lock(&kbridge_ports_lock_);
		status = kbridge_fd_take_(&kbridge_doorbell_fd_, msg->fds[0]);
		rte_spinlock_unlock(&kbridge_ports_lock_);
	}
	return kbridge_mp_answer_(msg, peer, status);
}

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
	int ret;

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
	ret = kbridge_fd_take_(&p->eventfd[q], fd);
	if (ret < 0)
		return ret;
	c->q[q].have_eventfd = 1;
	return 0;
}

static inline int
kbridge_mp_wakeup_(const struct rte_mp_msg *msg, const void *peer)
{
	const struct kbridge_mp_wakeup *req =
		(const struct kbridge_mp_wakeup *)msg->param;
	int32_t status = -ENOENT;
	unsigned int i;

	if (msg->len_param < (int)sizeof(*req) || msg->num_fds != 1) {
		status = -EINVAL;
	} else {
		rte_spinlock_lock(&kbridge_ports_lock_);
		for (i = 0; i < kbridge_registry_len_; i++) {
			struct kbridge_port *p = kbridge_registry_[i];

			if (p == NULL ||
			    strncmp(p->ctl->name, req->name, KBRIDGE_NAME_MAX) != 0)
				continue;
			status = kbridge_mp_wakeup_take_(p, req->queue, msg->fds[0],
							 (const char *)peer);
			break;
		}
		rte_spinlock_unlock(&kbridge_ports_lock_);
	}
	return kbridge_mp_answer_(msg, peer, status);
}

/*
 * Registers kbridge_mp_wakeup_() as DPDK's KBRIDGE_MP_WAKEUP action. 0, or
 * -1 with rte_errno set. EEXIST is no failure: the action is this
 * registry's (an earlier port) or another copy's of this header, in a
 * shared object that keeps its own registry (an older or newer kbridge.h,
 * one built -fvisibility=hidden, a librte_kni.so loaded with dlopen by an
 * executable that exports nothing). Then that copy answers kbridge for
 * every port, finds none of this registry's, and their workers get no
 * eventfd: they fall back to bounded sleeps. A copy with a doorbell
 * (KBRIDGE_MP_DOORBELL, registered next) holds it as well: this copy's
 * ports then ring none, and a kbridge that discovers them finds them at
 * its next look. Said once, with the cause.
 */
static inline int
kbridge_mp_wakeup_register_(const char *port)
{
	if (rte_mp_action_register(KBRIDGE_MP_WAKEUP, kbridge_mp_wakeup_) == 0) {
		__atomic_store_n(&kbridge_mp_registered_, 1, __ATOMIC_RELEASE);
		return 0;
	}
	if (rte_errno == ENOTSUP)
		return 0;
	if (rte_errno != EEXIST)
		return -1;
	if (!__atomic_load_n(&kbridge_mp_registered_, __ATOMIC_ACQUIRE) &&
	    !__atomic_exchange_n(&kbridge_mp_foreign_said_, 1, __ATOMIC_ACQ_REL))
		fprintf(stderr,
			"kbridge.h: port %s: DPDK's IPC action " KBRIDGE_MP_WAKEUP " is another copy's of kbridge.h in this process, with a port registry of its own: this copy's ports get no wakeup eventfd and their kbridge workers sleep in bounded steps instead (two kbridge.h versions, or a shared object that keeps its copy hidden: docs/KNI.md, librte_kni)\n",
			port);
	return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_WAKEUP_H */

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

/* Registry for the IPC handler, which gets no user data. Weak, not static:
 * every translation unit that includes this header shares one registry, so
 * a port created in one file and freed in another is never left stale. The
 * lock keeps the handler (on DPDK's IPC thread) and kbridge_port_free()
 * apart: the handler never uses a port that is being freed.
 *
 * One registry per process, across shared objects too: DPDK's IPC action
 * is process-wide, so only the first copy of this header to register it
 * answers kbridge, and a port in another copy's registry would get no
 * eventfd. librte_kni.so exports its copies (KBRIDGE_REGISTRY_ is default
 * visibility there; node KBRIDGE_PRIVATE_<ABI> of librte_kni/rte_kni.map)
 * and the dynamic linker binds them to the app's, which an executable
 * linked against the library exports. The link names carry the header's
 * version, since struct kbridge_port is laid out per version: copies of
 * two versions keep two registries (kbridge_port_create() then says so)
 * rather than read each other's ports. */
#define KBRIDGE_MAX_PORTS 8
#ifndef KBRIDGE_REGISTRY_
#define KBRIDGE_REGISTRY_ __attribute__((weak))
#endif
#define KBRIDGE_REGISTRY_V_ 7 /* KBRIDGE_VERSION, as a token for the names */
KBRIDGE_LAYOUT_ASSERT_(KBRIDGE_REGISTRY_V_ == KBRIDGE_VERSION);
#define KBRIDGE_REGISTRY_PASTE2_(a, v) a##v##_
#define KBRIDGE_REGISTRY_PASTE_(a, v) KBRIDGE_REGISTRY_PASTE2_(a, v)
#define KBRIDGE_REGISTRY_NAME_(a) KBRIDGE_REGISTRY_PASTE_(a, KBRIDGE_REGISTRY_V_)
#define kbridge_ports_ KBRIDGE_REGISTRY_NAME_(kbridge_ports_v)
#define kbridge_ports_lock_ KBRIDGE_REGISTRY_NAME_(kbridge_ports_lock_v)
#define kbridge_mp_registered_ KBRIDGE_REGISTRY_NAME_(kbridge_mp_registered_v)
#define kbridge_mp_foreign_said_ KBRIDGE_REGISTRY_NAME_(kbridge_mp_foreign_said_v)
KBRIDGE_REGISTRY_ struct kbridge_port *kbridge_ports_[KBRIDGE_MAX_PORTS];
KBRIDGE_REGISTRY_ rte_spinlock_t kbridge_ports_lock_ = RTE_SPINLOCK_INITIALIZER;
/* This registry's handler is DPDK's KBRIDGE_MP_WAKEUP action; and whether
 * the warning that another copy's is was given. */
KBRIDGE_REGISTRY_ int kbridge_mp_registered_;
KBRIDGE_REGISTRY_ int kbridge_mp_foreign_said_;

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

/*
 * Registers kbridge_mp_wakeup_() as DPDK's KBRIDGE_MP_WAKEUP action. 0, or
 * -1 with rte_errno set. EEXIST is no failure: the action is this
 * registry's (an earlier port) or another copy's of this header, in a
 * shared object that keeps its own registry (an older or newer kbridge.h,
 * one built -fvisibility=hidden, a librte_kni.so loaded with dlopen by an
 * executable that exports nothing). Then that copy answers kbridge for
 * every port, finds none of this registry's, and their workers get no
 * eventfd: they fall back to bounded sleeps. Said once, with the cause.
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

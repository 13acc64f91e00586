/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge_owner.h: which kbridge owns a port, whether it still runs, and
 * the record of the mbufs a kbridge holds, which outlives a killed one.
 * Part of kbridge.h, which applications include.
 */
#ifndef KBRIDGE_OWNER_H
#define KBRIDGE_OWNER_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <rte_memzone.h>

#include "kbridge_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/*
 * What kbridge holds (version 2). kbridge records, per queue, the mbufs its
 * worker holds between two ring operations, in memzone
 * "kbridge_<name>_held", which kbridge creates: the burst it dequeued from
 * to_kernel and has not freed (version 7: not yet put on the spent ring),
 * and the mbufs it allocated (version 7: took off the fresh ring) for
 * from_kernel and has not enqueued yet. A kbridge that takes over from a
 * killed one frees them (version 7: puts them on the spent ring);
 * kbridge_port_free() frees them when no live kbridge holds the port, then
 * frees the memzone. A record never names an mbuf that was freed or handed
 * over: n is cleared before its mbufs are freed or enqueued, and set only
 * after they were dequeued or allocated.
 *
 * The record's layout is versioned (struct kbridge_held.version, 0 before
 * kbridge.h version 7): an app frees only what a layout it knows names.
 */
#define KBRIDGE_HELD_SUFFIX "_held"
#define KBRIDGE_HELD_MAGIC 0x4b42484cu /* "KBHL" */
#define KBRIDGE_HELD_VERSION 1u        /* the layout below */
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
	uint32_t version; /* KBRIDGE_HELD_VERSION (it was padding: 0 before) */
	struct kbridge_held_q out[KBRIDGE_MAX_QUEUES]; /* dequeued from to_kernel */
	struct kbridge_held_q in[KBRIDGE_MAX_QUEUES];  /* allocated for from_kernel */
};

KBRIDGE_LAYOUT_ASSERT_(sizeof(struct kbridge_held_q) ==
		       8 + KBRIDGE_HELD_MAX * sizeof(struct rte_mbuf *));
KBRIDGE_LAYOUT_ASSERT_(sizeof(struct kbridge_held) ==
		       8 + 2 * KBRIDGE_MAX_QUEUES * sizeof(struct kbridge_held_q));

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
	/* Looked at every millisecond: a kbridge told at once (the doorbell)
	 * lets go within about one. */
	for (waited = 0;; waited++) {
		owner = __atomic_load_n(&c->owner, __ATOMIC_SEQ_CST);
		if (!kbridge_owner_alive_(owner))
			return 0;
		if (waited >= KBRIDGE_FREE_WAIT_MS) {
			fprintf(stderr,
				"kbridge.h: port %s: kbridge pid %u still serves it after %d ms (stopped, frozen or starved?): the port is left as it is, kbridge_port_free() returns -EBUSY\n",
				c->name, (unsigned int)(uint32_t)owner, KBRIDGE_FREE_WAIT_MS);
			return -EBUSY;
		}
		rte_delay_us_sleep(1000);
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
	if (mz->len >= sizeof(*h) && h->magic == KBRIDGE_HELD_MAGIC &&
	    h->version > KBRIDGE_HELD_VERSION)
		/* A later kbridge's layout: better a leak than a misread. */
		fprintf(stderr, "kbridge.h: port %s: the record of what kbridge held has layout %u, this header knows %u: its mbufs are not freed\n",
			p->ctl->name, h->version, KBRIDGE_HELD_VERSION);
	else if (mz->len >= sizeof(*h) && h->magic == KBRIDGE_HELD_MAGIC) {
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

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_OWNER_H */

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * vhost_guestmem.c: the SIGBUS handler for guest memory that shrank (vhost_guestmem.h).
 *
 * Why a handler and not a check: no check at SET_MEM_TABLE can hold, since
 * the frontend keeps its files open and may truncate them at any time, and
 * the files legitimate frontends hand over cannot be sealed (DPDK's
 * virtio-user sends its EAL's hugetlbfs files, or with --in-memory memfds
 * made with MFD_HUGETLB and without MFD_ALLOW_SEALING: eal_memalloc.c).
 * Why zeros and not a jump out: the fault comes inside librte_vhost, which
 * holds the vring's access lock and half-built state (shadow used ring,
 * mbufs); a siglongjmp would leave the lock taken and the mbufs lost.
 * Mapping an anonymous page over the vanished one lets the access finish
 * on zeros (an avail index of 0, descriptors of length 0), so librte_vhost
 * unwinds normally; the hook then stops the device.
 *
 * Go's runtime owns SIGBUS: it forwards a synchronous signal raised in C
 * code to the handler that was installed before it started, and handles
 * one raised in Go code itself (os/signal, "Go programs that use cgo").
 * This handler is installed after Go's, with SA_ONSTACK as Go requires,
 * and passes on every SIGBUS that is not a guest page to Go's handler.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "vhost_guestmem.h"

#define KB_GM_MAX 64 /* regions of every connection (8 each at most) */

/* Written by librte_vhost's threads under mu, read by the handler without
 * it: end is cleared first and set last (release), so a reader that finds
 * an address below end (acquire) sees the start and vid that go with it. */
static struct {
	pthread_mutex_t mu;
	struct {
		int vid;
		uintptr_t start, end;
	} r[KB_GM_MAX];
} kb_gm = { .mu = PTHREAD_MUTEX_INITIALIZER };

static struct sigaction kb_gm_prev;
static void (*kb_gm_hook)(int vid);
static int kb_gm_installed;
static uint64_t kb_gm_count;
static uintptr_t kb_gm_addr;
static __thread int kb_gm_open;        /* kb_gm_window */
static __thread uint64_t kb_gm_opened; /* pages mapped over in it */

static void
kb_gm_clear(int vid)
{
	int i;

	for (i = 0; i < KB_GM_MAX; i++)
		if (__atomic_load_n(&kb_gm.r[i].end, __ATOMIC_RELAXED) != 0 && kb_gm.r[i].vid == vid)
			__atomic_store_n(&kb_gm.r[i].end, 0, __ATOMIC_RELEASE);
}

void
kb_gm_forget(int vid)
{
	pthread_mutex_lock(&kb_gm.mu);
	kb_gm_clear(vid);
	pthread_mutex_unlock(&kb_gm.mu);
}

void
kb_gm_set(int vid, const struct rte_vhost_memory *mem)
{
	uint32_t n = 0;
	int i;

	pthread_mutex_lock(&kb_gm.mu);
	kb_gm_clear(vid);
	for (i = 0; i < KB_GM_MAX && n < mem->nregions; i++) {
		const struct rte_vhost_mem_region *m = &mem->regions[n];

		if (__atomic_load_n(&kb_gm.r[i].end, __ATOMIC_RELAXED) != 0)
			continue;
		kb_gm.r[i].vid = vid;
		__atomic_store_n(&kb_gm.r[i].start, (uintptr_t)m->mmap_addr, __ATOMIC_RELAXED);
		__atomic_store_n(&kb_gm.r[i].end, (uintptr_t)m->mmap_addr + m->mmap_size, __ATOMIC_RELEASE);
		n++;
	}
	pthread_mutex_unlock(&kb_gm.mu);
}

uint64_t
kb_gm_window(int on)
{
	uint64_t n = kb_gm_opened;

	kb_gm_open = on;
	kb_gm_opened = 0;
	return n;
}

uint64_t
kb_gm_faults(void)
{
	return __atomic_load_n(&kb_gm_count, __ATOMIC_ACQUIRE);
}

uint64_t
kb_gm_last(void)
{
	return __atomic_load_n(&kb_gm_addr, __ATOMIC_RELAXED);
}

/* The vid whose region holds a, and the region's bounds; -1 for none. */
static int
kb_gm_owner(uintptr_t a, uintptr_t *lo, uintptr_t *hi)
{
	int i;

	for (i = 0; i < KB_GM_MAX; i++) {
		uintptr_t end = __atomic_load_n(&kb_gm.r[i].end, __ATOMIC_ACQUIRE);
		uintptr_t start = __atomic_load_n(&kb_gm.r[i].start, __ATOMIC_RELAXED);

		if (a < end && a >= start) {
			*lo = start;
			*hi = end;
			return kb_gm.r[i].vid;
		}
	}
	return -1;
}

/* Maps zeros over the page that holds a: a small page, else (a hugetlbfs
 * mapping splits only at its page size: EINVAL) a 2 MiB or 1 GiB one,
 * within [lo, hi). */
static int
kb_gm_zero(uintptr_t a, uintptr_t lo, uintptr_t hi)
{
	static const uintptr_t sizes[] = { 4096, 2u << 20, 1u << 30 };
	unsigned int i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uintptr_t p = a & ~(sizes[i] - 1);

		if (p < lo || p + sizes[i] > hi || p + sizes[i] < p)
			return -1;
		if (mmap((void *)p, sizes[i], PROT_READ | PROT_WRITE,
			 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) != MAP_FAILED)
			return 0;
		if (errno != EINVAL)
			return -1;
	}
	return -1;
}

static void
kb_gm_pass(int sig, siginfo_t *si, void *uc)
{
	if (kb_gm_prev.sa_flags & SA_SIGINFO) {
		kb_gm_prev.sa_sigaction(sig, si, uc);
	} else if (kb_gm_prev.sa_handler == SIG_DFL || kb_gm_prev.sa_handler == SIG_IGN) {
		/* Returning re-runs the access, which faults again and
		 * takes the default action. */
		signal(sig, SIG_DFL);
	} else {
		kb_gm_prev.sa_handler(sig);
	}
}

static void
kb_gm_sigbus(int sig, siginfo_t *si, void *uc)
{
	int saved = errno, vid;
	uintptr_t a = (uintptr_t)si->si_addr, lo = 0, hi = UINTPTR_MAX;

	vid = kb_gm_owner(a, &lo, &hi);
	if (si->si_code == BUS_ADRERR && (vid >= 0 || kb_gm_open) && kb_gm_zero(a, lo, hi) == 0) {
		if (vid < 0)
			kb_gm_opened++;
		__atomic_store_n(&kb_gm_addr, a, __ATOMIC_RELAXED);
		__atomic_add_fetch(&kb_gm_count, 1, __ATOMIC_RELEASE);
		if (kb_gm_hook)
			kb_gm_hook(vid);
		errno = saved;
		return;
	}
	errno = saved;
	kb_gm_pass(sig, si, uc);
}

int
kb_gm_install(void (*hook)(int vid))
{
	struct sigaction sa;

	kb_gm_hook = hook;
	if (kb_gm_installed)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = kb_gm_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &kb_gm_prev) != 0)
		return -1;
	kb_gm_installed = 1;
	return 0;
}

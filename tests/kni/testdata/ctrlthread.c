/* SPDX-License-Identifier: BSD-3-Clause */
/* TestCtrlThreadCreateErrorIsNegative's program: rte_ctrl_thread_create(),
 * as a KNI application calls it (through rte_kni.h: rte_kni_compat.h's on
 * DPDK 23.11 and later, DPDK's own on 22.11), when the new thread cannot
 * take the control threads' CPUs. This program defines
 * pthread_setaffinity_np itself, exported (-rdynamic) so that librte_eal's
 * call reaches it, and fails it while fail_affinity is set, as the kernel
 * does (EINVAL) when none of those CPUs is one the thread may use. The
 * caller must see a negative errno (ret < 0 is how KNI applications test
 * it) and the routine must not run; then a call that succeeds runs it and
 * pthread_join() gets its value. Exit 0 when all holds, 1 otherwise. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

#include <rte_eal.h>
#include <rte_version.h>
#include <rte_kni.h>

static int fail_affinity;
static int refused;
static int ran;

int
pthread_setaffinity_np(pthread_t thread, size_t size, const cpu_set_t *set)
{
	static int (*real)(pthread_t, size_t, const cpu_set_t *);

	if (__atomic_load_n(&fail_affinity, __ATOMIC_SEQ_CST)) {
		__atomic_add_fetch(&refused, 1, __ATOMIC_SEQ_CST);
		return EINVAL;
	}
	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "pthread_setaffinity_np");
	return real == NULL ? ENOSYS : real(thread, size, set);
}

static void *
routine(void *arg)
{
	__atomic_store_n(&ran, 1, __ATOMIC_SEQ_CST);
	return arg;
}

int
main(int argc, char **argv)
{
	pthread_t tid;
	void *res = NULL;
	int ret, ok = 1;

	if (rte_eal_init(argc, argv) < 0) {
		fprintf(stderr, "ctrlthread: rte_eal_init failed\n");
		return 2;
	}
	__atomic_store_n(&fail_affinity, 1, __ATOMIC_SEQ_CST);
	ret = rte_ctrl_thread_create(&tid, "kb-refused", NULL, routine, NULL);
	__atomic_store_n(&fail_affinity, 0, __ATOMIC_SEQ_CST);
	printf("ctrlthread: %s: affinity refused %d times, rte_ctrl_thread_create returned %d\n",
	       rte_version(), refused, ret);
	if (refused == 0) {
		printf("ctrlthread: FAIL: the thread never asked for its CPUs: nothing was forced\n");
		ok = 0;
	} else if (ret != -EINVAL) {
		printf("ctrlthread: FAIL: returned %d, want -EINVAL (%d): a caller testing ret < 0 takes it for success\n",
		       ret, -EINVAL);
		ok = 0;
	}
	if (__atomic_load_n(&ran, __ATOMIC_SEQ_CST)) {
		printf("ctrlthread: FAIL: the routine ran although the thread was refused\n");
		ok = 0;
	}
	ret = rte_ctrl_thread_create(&tid, "kb-ok", NULL, routine, &tid);
	if (ret != 0) {
		printf("ctrlthread: FAIL: with its CPUs, rte_ctrl_thread_create returned %d\n", ret);
		ok = 0;
	} else if (pthread_join(tid, &res) != 0 || res != &tid || !__atomic_load_n(&ran, __ATOMIC_SEQ_CST)) {
		printf("ctrlthread: FAIL: the routine did not run, or pthread_join did not get its value\n");
		ok = 0;
	}
	rte_eal_cleanup();
	printf("ctrlthread: %s\n", ok ? "ok" : "failed");
	return ok ? 0 : 1;
}

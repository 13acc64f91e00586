/* SPDX-License-Identifier: BSD-3-Clause
 *
 * rte_kni_compat.h: what DPDK itself removed beside KNI that KNI
 * applications call, for a DPDK that no longer has it; rte_kni.h includes
 * it. Not KNI's API but DPDK's own, given back so that a KNI application
 * moves to a newer DPDK without edits (docs/KNI.md). On a DPDK that still
 * has a call, this header defines nothing for it.
 *
 * rte_ctrl_thread_create() (DPDK 23.11 removed it for
 * rte_thread_create_control()): as 22.11's, a control thread with the
 * control threads' CPUs, whose pthread_t the caller joins with
 * pthread_join() and which gets start_routine's return value. attr must
 * be NULL (rte_thread_create_control() takes no attributes): -ENOTSUP
 * otherwise. An error is negative, as 22.11's was and as callers test it
 * (ret < 0): rte_thread_create_control() returns -errno when the thread
 * cannot be made but pthread_setaffinity_np()'s positive errno when the
 * thread cannot take the control threads' CPUs.
 */
#ifndef RTE_KNI_COMPAT_H
#define RTE_KNI_COMPAT_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <rte_version.h>

#if RTE_VERSION >= RTE_VERSION_NUM(23, 11, 0, 0)
#include <rte_thread.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The routine and argument the control thread runs. */
struct rte_kni_compat_ctrl_ {
	void *(*start_routine)(void *);
	void *arg;
};

/* In the control thread: runs the routine and ends the thread with its
 * return value, which rte_thread_func's uint32_t could not carry. */
static inline uint32_t
rte_kni_compat_ctrl_start_(void *p)
{
	struct rte_kni_compat_ctrl_ c = *(struct rte_kni_compat_ctrl_ *)p;

	free(p);
	pthread_exit(c.start_routine(c.arg));
	return 0;
}

static inline int
rte_ctrl_thread_create(pthread_t *thread, const char *name, const pthread_attr_t *attr,
		       void *(*start_routine)(void *), void *arg)
{
	struct rte_kni_compat_ctrl_ *c;
	rte_thread_t t;
	int ret;

	if (attr != NULL)
		return -ENOTSUP;
	c = (struct rte_kni_compat_ctrl_ *)malloc(sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->start_routine = start_routine;
	c->arg = arg;
	ret = rte_thread_create_control(&t, name, rte_kni_compat_ctrl_start_, c);
	if (ret != 0) {
		/* The routine did not run: nothing else frees c. */
		free(c);
		return ret < 0 ? ret : -ret;
	}
	/* A DPDK thread on Linux is a pthread, its id the pthread_t. */
	*thread = (pthread_t)t.opaque_id;
	return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* RTE_VERSION >= 23.11 */

#endif /* RTE_KNI_COMPAT_H */

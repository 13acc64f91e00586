/* SPDX-License-Identifier: BSD-3-Clause
 *
 * eal.h: starting DPDK's EAL, once per process, for either mode (eal.go
 * runs it on a throwaway thread).
 */
#ifndef KB_EAL_H
#define KB_EAL_H

/* rte_eal_init: its result, or -errno; never 0 on a failure. */
int kb_eal_init(int argc, char **argv);

#endif

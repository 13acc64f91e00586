/* SPDX-License-Identifier: BSD-3-Clause
 *
 * rte_kni_common.h: the constants of KNI's API that applications use, for
 * rte_kni.h on kbridge (docs/KNI.md). KNI's own header of this name also
 * held the structures its kernel module shared with the library; kbridge
 * has no kernel module, so only what an application names is here.
 */
#ifndef _RTE_KNI_COMMON_H_
#define _RTE_KNI_COMMON_H_

#include <rte_common.h>
#include <rte_config.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A KNI's name, with its terminating NUL: a kernel interface name. */
#define RTE_KNI_NAMESIZE 16

#ifdef __cplusplus
}
#endif

#endif /* _RTE_KNI_COMMON_H_ */

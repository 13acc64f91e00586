/* SPDX-License-Identifier: BSD-3-Clause
 *
 * librte_kni: KNI's API as a library, for what cannot include rte_kni.h:
 * an app built against DPDK 22.11's own rte_kni.h that links -lrte_kni,
 * LuaJIT's FFI (libmoon), Rust bindings, CMake probes (docs/KNI.md,
 * librte_kni). Nothing of its own: rte_kni.h's bodies, compiled here once
 * as exported functions (RTE_KNI_API). The version script (rte_kni.map)
 * exports exactly DPDK 22.11's names, in its symbol versions, and the
 * registries below in a node of kbridge's own; the rest, kbridge.h's
 * inline helpers included, stays inside.
 */
#define RTE_KNI_API __attribute__((visibility("default")))
/* The registries of ports and KNIs, exported in a private node so that the
 * dynamic linker binds them to an app's own kbridge.h copies: one registry,
 * and one wakeup handler that knows every port, per process
 * (kbridge_wakeup.h). */
#define KBRIDGE_REGISTRY_ __attribute__((weak, visibility("default")))

#include <rte_kni.h>

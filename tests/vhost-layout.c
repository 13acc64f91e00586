/* SPDX-License-Identifier: BSD-3-Clause */
/* make build DPDK_SRC=DIR: kbridge's copy of librte_vhost's message context
 * (ring/vhost_msg.h) against DPDK's own (DIR/lib/vhost/vhost_user.h, which
 * DPDK does not install), compiled with the installed DPDK's headers. A
 * difference in the payload's size or the fds' place stops the build here,
 * before a frontend's fds are read from the wrong bytes. Compiled only, never
 * run; the Makefile checks that DIR is the source of the DPDK pkg-config
 * finds. */
#include <stddef.h>

struct virtio_net; /* named in 22.11's prototypes, defined in its vhost.h */
#include <vhost_user.h> /* DIR/lib/vhost, first on the include path */

#include "vhost_msg.h"

#define KB_SAME(what, ours, dpdk) \
	_Static_assert((ours) == (dpdk), "ring/vhost_msg.h: " what " differs from DPDK's lib/vhost/vhost_user.h")

KB_SAME("the header's size", sizeof(struct kb_vh_msg_hdr), offsetof(VhostUserMsg, payload));
KB_SAME("the payload's size", sizeof(((struct kb_vh_msg_ctx *)0)->p), sizeof(((VhostUserMsg *)0)->payload));
KB_SAME("the fds' offset", offsetof(struct kb_vh_msg_ctx, fds), offsetof(struct vhu_msg_context, fds));
KB_SAME("fd_num's offset", offsetof(struct kb_vh_msg_ctx, fd_num), offsetof(struct vhu_msg_context, fd_num));
KB_SAME("the fds' count", KB_VH_MAX_FDS, VHOST_MEMORY_MAX_NREGIONS);
KB_SAME("the memory table's offset", offsetof(struct kb_vh_msg_ctx, p.mem.r), offsetof(struct vhu_msg_context, msg.payload.memory.regions));
KB_SAME("a memory region's size", sizeof(struct kb_vh_mem_region), sizeof(VhostUserMemoryRegion));
KB_SAME("the context's size", sizeof(struct kb_vh_msg_ctx), sizeof(struct vhu_msg_context));

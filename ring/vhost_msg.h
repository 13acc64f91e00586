/* SPDX-License-Identifier: BSD-3-Clause */
/* The vhost-user message as librte_vhost hands it to kbridge's external
 * handlers (vhost.c's pre_msg and post_msg): librte_vhost's private struct
 * vhu_msg_context (lib/vhost/vhost_user.h, not installed with DPDK), the
 * packed message and then the fds that came with it. librte_vhost fills fds
 * and fd_num from the socket's SCM_RIGHTS, never from the frontend's bytes,
 * so kbridge must read them at the very offset librte_vhost wrote them: a
 * copy of the wrong size reads fds from inside the payload, and fstats and
 * closes descriptors that are not the message's.
 *
 * The payload is a union whose largest member is the crypto session
 * parameter; kbridge uses none of it but needs its size, which changed:
 *
 *   DPDK             crypto session                     payload  fds at
 *   22.11 .. 25.02   one symmetric session              632      644
 *   25.03 .. 26.07   symmetric or asymmetric (RSA, a    1072     1084
 *                    1024-byte key) in a union; 25.03's
 *                    "vhost/crypto: update session parameters"
 *
 * (read in DPDK's lib/vhost/vhost_user.h of v22.11, v24.11, v25.03, v25.11,
 * v26.03 and v26.07). Each layout is asserted here against those figures;
 * make build DPDK_SRC=<DPDK's source of the DPDK it builds against>
 * compiles tests/vhost-layout.c, which asserts kbridge's copy against
 * DPDK's own struct (docs/DPDK.md). A DPDK past the last release read stops
 * the build, unless that check passed (the Makefile then defines
 * KB_VH_LAYOUT_PROBED): the next change of layout fails the build, not the
 * frontend. */
#ifndef KB_VHOST_MSG_H
#define KB_VHOST_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <rte_version.h>

struct kb_vh_msg_hdr {
	uint32_t request;
	uint32_t flags;
	uint32_t size;
};
struct kb_vh_mem_region {
	uint64_t gpa, size, uaddr, mmap_offset;
};
#define KB_VH_MAX_FDS 8 /* VHOST_MEMORY_MAX_NREGIONS */

/* The symmetric session (VhostUserCryptoSessionParam up to 25.02,
 * VhostUserCryptoSymSessionParam from 25.03): algorithms, lengths, two key
 * pointers and the keys' buffers (64 for the cipher, 512 for the HMAC). */
#define KB_VH_CRYPTO_SYM_FIELDS \
	uint32_t u32s[6];       \
	uint8_t u8s[4];         \
	uint8_t *keys[2];       \
	uint8_t key_bufs[64 + 512]

#if RTE_VERSION < RTE_VERSION_NUM(25, 3, 0, 0)
struct kb_vh_crypto_sess {
	int64_t session_id;
	uint32_t op_code;
	KB_VH_CRYPTO_SYM_FIELDS;
};
#define KB_VH_PAYLOAD_SIZE 632
#define KB_VH_FDS_OFFSET 644
#elif RTE_VERSION < RTE_VERSION_NUM(26, 11, 0, 0) || defined(KB_VH_LAYOUT_PROBED)
struct kb_vh_crypto_sess {
	uint32_t op_code;
	union {
		struct {
			KB_VH_CRYPTO_SYM_FIELDS;
		} sym;
		struct {
			uint32_t algo, key_type, key_len;
			uint8_t *key;
			uint32_t rsa[2]; /* padding and hash algorithms */
			uint8_t key_buf[1024];
		} asym;
	} u;
	int64_t session_id;
};
#define KB_VH_PAYLOAD_SIZE 1072
#define KB_VH_FDS_OFFSET 1084
#else
#error "DPDK is newer than the vhost-user message layouts kbridge knows (ring/vhost_msg.h): build with DPDK_SRC=<this DPDK's source tree> (make build DPDK_SRC=...), which checks kbridge's copy against DPDK's own lib/vhost/vhost_user.h"
#endif

struct kb_vh_msg_ctx {
	struct kb_vh_msg_hdr h;
	union {
		uint64_t u64;
		struct {
			uint32_t nregions, padding;
			struct kb_vh_mem_region r[KB_VH_MAX_FDS];
		} mem;
		uint8_t config[12 + 256];
		struct kb_vh_crypto_sess crypto;
	} p;
	int fds[KB_VH_MAX_FDS];
	int fd_num;
} __attribute__((packed));

_Static_assert(sizeof(((struct kb_vh_msg_ctx *)0)->p) == KB_VH_PAYLOAD_SIZE,
	       "the payload of this DPDK's VhostUserMsg (the table above)");
_Static_assert(offsetof(struct kb_vh_msg_ctx, fds) == KB_VH_FDS_OFFSET,
	       "the offset of vhu_msg_context.fds in this DPDK (the table above)");

#endif /* KB_VHOST_MSG_H */

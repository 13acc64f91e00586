/* SPDX-License-Identifier: BSD-3-Clause
 *
 * probe.c: every sizeof and offsetof of the structures the app and kbridge
 * share (the control block and what it holds, the held record, the wakeup
 * message), the constants that size them, and the order of the layout
 * items, as the app's headers give them to this compiler. The test beside
 * the headers (../abi_test.go) compares the table with the released
 * versions' (../testdata/abi-v<N>.txt). A field added to a shared
 * structure needs a line here.
 */
#include <stddef.h>

#include "kbridge.h"
#include "probe.h"

#define KB_ABI_SIZE(s) {"sizeof " #s, sizeof(struct s)},
#define KB_ABI_FIELD(s, f) {"offsetof " #s "." #f, offsetof(struct s, f)},
#define KB_ABI_CONST(c) {#c, (uint64_t)(c)},
#define KB_ABI_ITEM(name, expr) {"layout item " #name, KBRIDGE_LAYOUT_##name},

static const struct kb_abi_item kb_abi_items[] = {
	/* What the figures below depend on besides the headers. */
	{"pointer", sizeof(void *)},
	KB_ABI_CONST(RTE_CACHE_LINE_SIZE)
	KB_ABI_CONST(KBRIDGE_MAGIC)
	KB_ABI_CONST(KBRIDGE_MAX_QUEUES)
	KB_ABI_CONST(KBRIDGE_NAME_MAX)
	KB_ABI_CONST(KBRIDGE_LAYOUT_MAX)
	KB_ABI_CONST(KBRIDGE_HELD_MAGIC)
	KB_ABI_CONST(KBRIDGE_HELD_VERSION)
	KB_ABI_CONST(KBRIDGE_HELD_MAX)

	KB_ABI_SIZE(kbridge_ctl)
	KB_ABI_FIELD(kbridge_ctl, magic)
	KB_ABI_FIELD(kbridge_ctl, version)
	KB_ABI_FIELD(kbridge_ctl, name)
	KB_ABI_FIELD(kbridge_ctl, mempool)
	KB_ABI_FIELD(kbridge_ctl, nb_queues)
	KB_ABI_FIELD(kbridge_ctl, reserved)
	KB_ABI_FIELD(kbridge_ctl, ring_size)
	KB_ABI_FIELD(kbridge_ctl, app_pid)
	KB_ABI_FIELD(kbridge_ctl, tsc_offset)
	KB_ABI_FIELD(kbridge_ctl, tsc_hz)
	KB_ABI_FIELD(kbridge_ctl, q)
	/* version 2 */
	KB_ABI_FIELD(kbridge_ctl, app_offloads)
	KB_ABI_FIELD(kbridge_ctl, app_max_segs)
	KB_ABI_FIELD(kbridge_ctl, reserved2)
	KB_ABI_FIELD(kbridge_ctl, owner)
	KB_ABI_FIELD(kbridge_ctl, closing)
	KB_ABI_FIELD(kbridge_ctl, reserved4)
	KB_ABI_FIELD(kbridge_ctl, reserved3)
	/* version 3 */
	KB_ABI_FIELD(kbridge_ctl, dpdk_version)
	KB_ABI_FIELD(kbridge_ctl, dpdk_version_num)
	KB_ABI_FIELD(kbridge_ctl, reserved5)
	/* version 4 */
	KB_ABI_FIELD(kbridge_ctl, link)
	KB_ABI_FIELD(kbridge_ctl, reserved6)
	/* version 5 */
	KB_ABI_FIELD(kbridge_ctl, app_mac)
	KB_ABI_FIELD(kbridge_ctl, app_mac_set)
	KB_ABI_FIELD(kbridge_ctl, app_requests)
	KB_ABI_FIELD(kbridge_ctl, app_max_mtu)
	KB_ABI_FIELD(kbridge_ctl, req_seq)
	KB_ABI_FIELD(kbridge_ctl, reserved7)
	KB_ABI_FIELD(kbridge_ctl, req_answer)
	KB_ABI_FIELD(kbridge_ctl, req)
	KB_ABI_FIELD(kbridge_ctl, accepted)
	KB_ABI_FIELD(kbridge_ctl, undo)
	KB_ABI_FIELD(kbridge_ctl, reserved8)
	/* version 7 */
	KB_ABI_FIELD(kbridge_ctl, layout)
	KB_ABI_FIELD(kbridge_ctl, fresh_target)
	KB_ABI_FIELD(kbridge_ctl, reserved9)
	KB_ABI_FIELD(kbridge_ctl, qm)
	KB_ABI_FIELD(kbridge_ctl, if_mtu)
	KB_ABI_FIELD(kbridge_ctl, if_flags)
	KB_ABI_FIELD(kbridge_ctl, served)
	KB_ABI_FIELD(kbridge_ctl, reserved10)
	KB_ABI_FIELD(kbridge_ctl, served_why)

	KB_ABI_SIZE(kbridge_queue_ctl)
	KB_ABI_FIELD(kbridge_queue_ctl, need_wakeup)
	KB_ABI_FIELD(kbridge_queue_ctl, have_eventfd)
	KB_ABI_FIELD(kbridge_queue_ctl, to_kernel_pkts)
	KB_ABI_FIELD(kbridge_queue_ctl, to_kernel_dropped)
	KB_ABI_FIELD(kbridge_queue_ctl, from_kernel_pkts)
	KB_ABI_FIELD(kbridge_queue_ctl, kicks)
	/* version 6 */
	KB_ABI_FIELD(kbridge_queue_ctl, to_kernel_reserved)
	KB_ABI_FIELD(kbridge_queue_ctl, to_kernel_dropped_control)
	KB_ABI_FIELD(kbridge_queue_ctl, to_kernel_dropped_neighbor)

	KB_ABI_SIZE(kbridge_request)
	KB_ABI_FIELD(kbridge_request, seq)
	KB_ABI_FIELD(kbridge_request, type)
	KB_ABI_FIELD(kbridge_request, value)
	KB_ABI_FIELD(kbridge_request, mac)
	KB_ABI_FIELD(kbridge_request, pad)

	KB_ABI_SIZE(kbridge_queue_mbufs)
	KB_ABI_FIELD(kbridge_queue_mbufs, fresh_put)
	KB_ABI_FIELD(kbridge_queue_mbufs, fresh_short)
	KB_ABI_FIELD(kbridge_queue_mbufs, spent_freed_rx)
	KB_ABI_FIELD(kbridge_queue_mbufs, spent_freed_tx)
	KB_ABI_FIELD(kbridge_queue_mbufs, spent_waits)
	KB_ABI_FIELD(kbridge_queue_mbufs, reserved)

	KB_ABI_SIZE(kbridge_layout)
	KB_ABI_FIELD(kbridge_layout, n)
	KB_ABI_FIELD(kbridge_layout, v)
	KB_ABI_FIELD(kbridge_layout, mempool_ops)
	KB_ABI_FIELD(kbridge_layout, reserved)
	/* The index of each item in kbridge_layout.v. */
	KBRIDGE_LAYOUT_ITEMS_(KB_ABI_ITEM)

	KB_ABI_SIZE(kbridge_held)
	KB_ABI_FIELD(kbridge_held, magic)
	KB_ABI_FIELD(kbridge_held, version)
	KB_ABI_FIELD(kbridge_held, out)
	KB_ABI_FIELD(kbridge_held, in)
	KB_ABI_SIZE(kbridge_held_q)
	KB_ABI_FIELD(kbridge_held_q, n)
	KB_ABI_FIELD(kbridge_held_q, pend)
	KB_ABI_FIELD(kbridge_held_q, m)

	KB_ABI_SIZE(kbridge_mp_wakeup)
	KB_ABI_FIELD(kbridge_mp_wakeup, name)
	KB_ABI_FIELD(kbridge_mp_wakeup, queue)
};

const struct kb_abi_item *
kb_abi_table(unsigned int *n)
{
	*n = sizeof(kb_abi_items) / sizeof(kb_abi_items[0]);
	return kb_abi_items;
}

unsigned int
kb_abi_version(void)
{
	return KBRIDGE_VERSION;
}

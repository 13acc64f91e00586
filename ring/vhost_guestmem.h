/* SPDX-License-Identifier: BSD-3-Clause
 *
 * vhost_guestmem.h: kbridge outlives guest memory that shrinks under it. A
 * frontend's memory is its files (memfd, hugetlbfs), mapped shared; one it
 * truncates while kbridge runs turns the next touch of a page past the new
 * end into a SIGBUS, in librte_vhost's data path or its message thread.
 * kbridge's handler maps zeros over such a page and returns: the access
 * completes, reading zeros, and the hook disconnects the frontend. Any
 * other SIGBUS goes to the handler installed before (Go's runtime).
 */
#ifndef KB_GUESTMEM_H
#define KB_GUESTMEM_H

#include <stdint.h>

#include <rte_vhost.h>

/* Installs the handler (once; later calls only replace the hook). hook
 * runs inside the signal handler: async-signal-safe only. It gets the vid
 * whose memory the page was, or -1 for a page of a memory table that
 * librte_vhost was mapping (kb_gm_window). Returns 0 or -1 (errno). */
int kb_gm_install(void (*hook)(int vid));
/* vid's regions from now on, replacing the ones it had (librte_vhost's
 * message thread: after it mapped a memory table). */
void kb_gm_set(int vid, const struct rte_vhost_memory *mem);
/* vid has no regions (a new connection with a reused vid). */
void kb_gm_forget(int vid);
/* The message thread handles a SET_MEM_TABLE (on) or another message: a
 * SIGBUS on this thread while on, at any address, is taken for guest
 * memory, since librte_vhost reads the new regions (the rings' used
 * indexes) before kb_gm_set can know them. Returns the pages mapped over
 * on this thread since the window opened. */
uint64_t kb_gm_window(int on);
/* Pages mapped over since start, and the last one's address. */
uint64_t kb_gm_faults(void);
uint64_t kb_gm_last(void);

#endif

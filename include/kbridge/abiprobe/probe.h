/* SPDX-License-Identifier: BSD-3-Clause
 *
 * probe.h: the layout of what the app and kbridge share, as this build of
 * the app's headers lays it out (probe.c fills it).
 */
#ifndef KB_ABI_PROBE_H
#define KB_ABI_PROBE_H

#include <stdint.h>

/* One line of the table: "sizeof S", "offsetof S.field", or a constant
 * the layout depends on, and its value. */
struct kb_abi_item {
	const char *name;
	uint64_t value;
};

/* The table and its length. */
const struct kb_abi_item *kb_abi_table(unsigned int *n);
/* KBRIDGE_VERSION of the headers. */
unsigned int kb_abi_version(void);

#endif

/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>

#include <rte_eal.h>
#include <rte_errno.h>

#include "eal.h"

int
kb_eal_init(int argc, char **argv)
{
	int rc = rte_eal_init(argc, argv);

	/* Some of rte_eal_init's failures leave rte_errno as it was (0), the
	 * version mismatch of a secondary among them: a failure must never
	 * look like success. */
	if (rc < 0)
		return rte_errno > 0 ? -rte_errno : -EIO;
	return rc;
}

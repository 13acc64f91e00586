/* A minimal stand-in for DPDK's app/test/test.c, enough to run one
 * REGISTER_TEST_COMMAND test (test_kni.c of DPDK 22.11) outside DPDK's tree:
 * EAL arguments, then the command's name (default kni_autotest).
 * Exit status: 0 passed, 77 skipped (TEST_SKIPPED), 1 failed. */
#include <stdio.h>
#include <string.h>
#include <rte_eal.h>
#include "test.h"

static TAILQ_HEAD(, test_command) cmds = TAILQ_HEAD_INITIALIZER(cmds);

void add_test_command(struct test_command *t)
{
	TAILQ_INSERT_TAIL(&cmds, t, next);
}

int main(int argc, char **argv)
{
	int n = rte_eal_init(argc, argv);
	if (n < 0) {
		fprintf(stderr, "rte_eal_init failed\n");
		return 1;
	}
	argc -= n;
	argv += n;
	const char *name = argc > 1 ? argv[1] : "kni_autotest";
	struct test_command *t;
	TAILQ_FOREACH(t, &cmds, next) {
		if (strcmp(t->command, name) == 0) {
			int r = t->callback();
			printf("%s: %s (%d)\n", name, r == 0 ? "Test OK" :
			       r == TEST_SKIPPED ? "Test Skipped" : "Test Failed", r);
			rte_eal_cleanup();
			return r == 0 ? 0 : r == TEST_SKIPPED ? 77 : 1;
		}
	}
	fprintf(stderr, "no test command %s\n", name);
	return 1;
}

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * childcheck: kbridge_child.h on its own, as an app's process runs it;
 * tests/kni's TestKbridgeChildHeader builds and runs it, with $KBRIDGE_BIN
 * or $PATH naming a stand-in kbridge (a shell script that writes down what
 * it was given: its environment, signal state and arguments into $KBCHK_OUT,
 * then waits for SIGTERM, or lives $KBCHK_LIFE seconds).
 *
 *   childcheck [EAL args] -- MODE
 *
 * run:     start the child, wait until it wrote $KBCHK_OUT/env, stop it.
 *          Before the start, this thread ignores SIGALRM and SIGPIPE and
 *          blocks SIGUSR2, as an app might: the child must have none of it.
 * symlink: the same, with a symbolic link planted where the child's
 *          configuration goes, pointing at $KBCHK_OUT/target: the link must
 *          be replaced, the target never written.
 * reused:  the app reaps its children itself (SIGCHLD ignored); the child
 *          exits by itself and its pid goes to another process of this app
 *          (ns_last_pid: run it in a PID namespace of its own, unshare
 *          --pid); kbridge_child_stop() must not signal that process.
 *
 * Prints "childcheck: ok ..." lines and exits 0, or "childcheck: FAIL ..."
 * and exits 1. EAL: --no-huge --in-memory is enough (no port is made).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rte_eal.h>
#include <kbridge_child.h>

static int failed;

static void
ok(int cond, const char *what)
{
	printf("childcheck: %s %s\n", cond ? "ok" : "FAIL", what);
	if (!cond)
		failed = 1;
}

static int
wait_file(const char *path, int ms)
{
	for (; ms > 0; ms -= 10) {
		if (access(path, F_OK) == 0)
			return 1;
		usleep(10000);
	}
	return 0;
}

/* The port's and interface's name: $KBCHK_NAME, else kbchk. */
static const char *
name(void)
{
	const char *n = getenv("KBCHK_NAME");

	return n != NULL ? n : "kbchk";
}

static int
start(struct kbridge_child *c)
{
	struct kbridge_child_conf conf;
	char why[256] = "";
	int ret;

	memset(&conf, 0, sizeof(conf));
	conf.port = name();
	conf.ifname = name();
	ret = kbridge_child_start(c, &conf, why, sizeof(why));
	printf("childcheck: start = %d pid %d%s%s\n", ret, (int)c->pid, why[0] ? ": " : "", why);
	return ret;
}

static int
run(const char *out, int plant)
{
	struct kbridge_child c;
	char env[PATH_MAX], target[PATH_MAX], link[PATH_MAX], why[256] = "";
	struct sigaction ign;
	struct stat st;
	sigset_t usr2;
	int ret;

	snprintf(env, sizeof(env), "%s/env", out);
	snprintf(target, sizeof(target), "%s/target", out);
	snprintf(link, sizeof(link), "%s/kbridge-%s.yaml", rte_eal_get_runtime_dir(), name());
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigaction(SIGALRM, &ign, NULL);
	sigaction(SIGPIPE, &ign, NULL);
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &usr2, NULL);
	if (plant) {
		unlink(link);
		if (symlink(target, link) != 0) {
			printf("childcheck: FAIL symlink %s: %s\n", link, strerror(errno));
			return 1;
		}
	}
	if (start(&c) != 0)
		return 1;
	ok(wait_file(env, 10000), "the child ran the stand-in kbridge (it wrote its environment)");
	if (plant) {
		ok(access(target, F_OK) != 0, "the configuration was not written through the planted link");
		ok(lstat(c.config, &st) == 0 && S_ISREG(st.st_mode), "the configuration is a regular file");
	}
	ret = kbridge_child_stop(&c, why, sizeof(why));
	printf("childcheck: stop = %d%s%s\n", ret, why[0] ? ": " : "", why);
	ok(ret == 0, "the child stopped on SIGTERM with status 0");
	ok(access(link, F_OK) != 0, "the configuration is removed");
	return failed;
}

static int
reused(const char *out)
{
	struct kbridge_child c;
	char env[PATH_MAX], why[256] = "";
	pid_t old, imp;
	int fd, n, len, ret, st;
	char num[32];

	snprintf(env, sizeof(env), "%s/env", out);
	signal(SIGCHLD, SIG_IGN); /* children reaped by the kernel, not by the header */
	if (start(&c) != 0)
		return 1;
	old = c.pid;
	ok(wait_file(env, 10000), "the child ran the stand-in kbridge");
	for (n = 0; n < 1000 && !(kill(old, 0) < 0 && errno == ESRCH); n++)
		usleep(10000);
	ok(kill(old, 0) < 0, "the child exited and was reaped elsewhere");
	signal(SIGCHLD, SIG_DFL);
	/* The next pid this namespace gives is old's. It may not be yet: the
	 * kernel frees a reaped child's number a moment after kill() stops
	 * finding it (fork then skipped it once: "got pid 6, not 5"), or a
	 * thread made meanwhile takes it; a later try finds it free. */
	for (n = 0; n < 20; n++) {
		fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
		len = snprintf(num, sizeof(num), "%d", (int)old - 1);
		if (fd < 0 || write(fd, num, (size_t)len) != len) {
			printf("childcheck: FAIL ns_last_pid: %s (run in a PID namespace of its own, as root)\n",
			       strerror(errno));
			return 1;
		}
		close(fd);
		imp = fork();
		if (imp == 0) {
			for (;;)
				pause();
		}
		if (imp == old)
			break;
		printf("childcheck: the other process got pid %d, not %d: another came between; again\n",
		       (int)imp, (int)old);
		kill(imp, SIGKILL);
		waitpid(imp, &st, 0);
		usleep(1000);
	}
	if (imp != old) {
		printf("childcheck: FAIL pid %d never given again in %d tries\n", (int)old, n);
		return 1;
	}
	printf("childcheck: another process of the app now has pid %d\n", (int)imp);
	ret = kbridge_child_stop(&c, why, sizeof(why));
	printf("childcheck: stop = %d%s%s\n", ret, why[0] ? ": " : "", why);
	ok(waitpid(imp, &st, WNOHANG) == 0, "kbridge_child_stop left the process that took the pid alone");
	ok(c.pid == 0, "kbridge_child_stop forgot the child");
	kill(imp, SIGKILL);
	waitpid(imp, &st, 0);
	return failed;
}

int
main(int argc, char **argv)
{
	const char *out = getenv("KBCHK_OUT");
	int ret = rte_eal_init(argc, argv);

	if (ret < 0 || out == NULL) {
		fprintf(stderr, "childcheck: rte_eal_init failed or KBCHK_OUT unset\n");
		return 2;
	}
	argc -= ret;
	argv += ret;
	if (argc < 2) {
		fprintf(stderr, "usage: childcheck [EAL args] -- run|symlink|reused|refused\n");
		return 2;
	}
	if (strcmp(argv[1], "run") == 0)
		ret = run(out, 0);
	else if (strcmp(argv[1], "symlink") == 0)
		ret = run(out, 1);
	else if (strcmp(argv[1], "reused") == 0)
		ret = reused(out);
	else if (strcmp(argv[1], "refused") == 0) {
		/* $KBCHK_NAME is no name the kernel takes: refused, nothing run. */
		struct kbridge_child c;

		ret = start(&c) == -EINVAL ? 0 : 1;
	}
	else
		ret = 2;
	rte_eal_cleanup();
	return ret;
}

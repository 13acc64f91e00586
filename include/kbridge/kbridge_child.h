/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge_child.h: runs a kbridge for one port of this application, or for
 * every port it creates (discover), as a child process, for apps that
 * would rather not run kbridge as a service of its own (rte_kni.h does:
 * one for all its KNIs; docs/KNI.md). Header-only, over kbridge.h.
 *
 * kbridge_child_start() writes a configuration for the port (mode ring,
 * this process's --file-prefix and runtime directory, the port and the
 * interface named as asked, the control socket kbridge@NAME would have,
 * metrics off) into this process's DPDK runtime directory, as a new file
 * (O_EXCL, O_NOFOLLOW: a link planted there is removed, never followed),
 * and starts `kbridge run` on it: the regular file named by $KBRIDGE_BIN,
 * else `kbridge` in an absolute directory on PATH, /usr/bin/kbridge,
 * /usr/local/bin/kbridge. The child runs in a
 * session of its own (a terminal's ^C reaches the app alone, which stops
 * kbridge when it releases the port; the scheduler's autogroup, where
 * enabled, is its own, as a service's), with the signal mask and
 * dispositions a fresh process has, on every CPU this process may use (the
 * app's lcore affinity is not its) or on the CPUs $KBRIDGE_CHILD_CPUS lists
 * (as taskset -c takes them: "0", "0,2-3"), and with none of the app's
 * descriptors but stdin, stdout and stderr: its log goes where the app's
 * stderr goes. Its environment is the app's without systemd's
 * NOTIFY_SOCKET, WATCHDOG_* and LISTEN_*: those are the app's unit's, and
 * a kbridge that saw them would tell the app's unit READY=1, STATUS=,
 * STOPPING=1 (at every release) and FDSTORE=1, and ping its watchdog.
 * It is started with vfork semantics (the app's pages are not copied,
 * whatever its size and threads) and tracked by a pidfd, so that a
 * signal never reaches another process that took its pid.
 * kbridge_child_wait() waits until it serves the port and the interface
 * exists; kbridge_child_stop() stops it (SIGTERM: kbridge frees every mbuf
 * it holds and removes the interface) and removes the file.
 *
 * The functions return 0 or -errno and, on failure, write the cause into
 * `why` (one line, no newline) for the caller's log.
 */
#ifndef KBRIDGE_CHILD_H
#define KBRIDGE_CHILD_H

#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <kbridge.h>

#ifdef __cplusplus
extern "C" {
#endif

/* if_nametoindex() as glibc's <net/if.h> declares it. Not that header: an
 * app that includes <linux/if.h>, as DPDK's KNI example does, cannot
 * include both (they define the same IFF_* names). */
#ifdef __THROW
extern unsigned int if_nametoindex(const char *__ifname) __THROW;
#else
extern unsigned int if_nametoindex(const char *__ifname);
#endif

/* What the child kbridge makes. */
struct kbridge_child_conf {
	const char *port;   /* the kbridge_port_create() name; NULL with discover: none of its own */
	const char *ifname; /* interface.name; with discover, the name of the instance (its socket, its log) */
	uint16_t mtu;       /* interface.mtu; 0: kbridge's default (1500) */
	const uint8_t *mac; /* interface.mac; NULL: the kernel picks one at random */
	int up;             /* interface.up: bring the interface up at start */
	/* discover: true: serve every port the app creates, each with an
	 * interface named after it (MTU and admin state as the port asks:
	 * kbridge_port_set_interface()), until stopped or the app exits. */
	int discover;
};

/* One child kbridge. pid 0: none runs (then pidfd means nothing: a zeroed
 * struct is one with no child). */
struct kbridge_child {
	pid_t pid;
	int status; /* its wait status once reaped; -1: unknown */
	char config[PATH_MAX]; /* the generated configuration, "" when none */
	int pidfd; /* while pid > 0: its pidfd, -1 on a kernel without (before 5.4) */
};

/* The process environment, as POSIX has the app declare it. */
extern char **environ;

/* Linux's P_PIDFD for waitid() (5.4), which glibc's idtype_t lacks before 2.38. */
#define KBRIDGE_CHILD_P_PIDFD_ 3

/* How long kbridge_child_stop() lets kbridge stop by itself before SIGKILL:
 * kbridge_port_free()'s own wait, so that a stop never outlasts it. */
#define KBRIDGE_CHILD_STOP_MS KBRIDGE_FREE_WAIT_MS

/* Whether path is a regular file this process may execute: a directory
 * named kbridge passes access(X_OK), and execve() would then fail in the
 * child instead of the search going on. */
static inline int
kbridge_child_executable_(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Finds the kbridge binary (see the top); 0 and its path, or -ENOENT. On
 * PATH only absolute directories count: an empty or relative entry would
 * run whatever kbridge the app's working directory holds. */
static inline int
kbridge_child_find_bin_(char *buf, size_t len)
{
	static const char *const fixed[] = {"/usr/bin/kbridge", "/usr/local/bin/kbridge"};
	const char *env = getenv("KBRIDGE_BIN");
	const char *path = getenv("PATH");
	size_t i;

	if (env != NULL && env[0] != '\0') {
		rte_strlcpy(buf, env, len);
		return kbridge_child_executable_(buf) ? 0 : -ENOENT;
	}
	while (path != NULL && *path != '\0') {
		const char *end = strchr(path, ':');
		size_t n = end != NULL ? (size_t)(end - path) : strlen(path);
		int w = snprintf(buf, len, "%.*s/kbridge", (int)n, path);

		if (n > 0 && path[0] == '/' && w > 0 && (size_t)w < len &&
		    kbridge_child_executable_(buf))
			return 0;
		path = end != NULL ? end + 1 : NULL;
	}
	for (i = 0; i < RTE_DIM(fixed); i++) {
		rte_strlcpy(buf, fixed[i], len);
		if (kbridge_child_executable_(buf))
			return 0;
	}
	return -ENOENT;
}

/* Whether the child's environment leaves out var ("NAME=value"): what
 * systemd gives the app's own unit. NOTIFY_SOCKET: the child's
 * notifications would be the app's (with NotifyAccess=all systemd takes
 * them); WATCHDOG_*: it would ping the app's watchdog; LISTEN_*: the
 * app's socket-activation fds, which the child does not even have. */
static inline int
kbridge_child_env_dropped_(const char *var)
{
	return strncmp(var, "NOTIFY_SOCKET=", 14) == 0 || strncmp(var, "WATCHDOG_", 9) == 0 ||
	       strncmp(var, "LISTEN_", 7) == 0;
}

/* The child's environment: environ without what kbridge_child_env_dropped_
 * names. The strings are environ's; free() the array. NULL: no memory. */
static inline char **
kbridge_child_env_(void)
{
	size_t n = 0, k = 0, i;
	char **env;

	while (environ != NULL && environ[n] != NULL)
		n++;
	env = (char **)malloc((n + 1) * sizeof(*env));
	if (env == NULL)
		return NULL;
	for (i = 0; i < n; i++)
		if (!kbridge_child_env_dropped_(environ[i]))
			env[k++] = environ[i];
	env[k] = NULL;
	return env;
}

/* The child's CPU mask: room for 1024 CPUs, as glibc's cpu_set_t. */
#define KBRIDGE_CHILD_CPU_WORDS (1024 / (8 * sizeof(unsigned long)))

/* Parses $KBRIDGE_CHILD_CPUS (a CPU list: "0", "0,2-3") into mask; every
 * CPU when it is unset or empty. 0, or -EINVAL for a list that is not one
 * or names no CPU below 1024. */
static inline int
kbridge_child_cpus_(unsigned long *mask)
{
	const char *s = getenv("KBRIDGE_CHILD_CPUS");
	int any = 0;

	if (s == NULL || *s == '\0') {
		memset(mask, 0xff, KBRIDGE_CHILD_CPU_WORDS * sizeof(*mask));
		return 0;
	}
	memset(mask, 0, KBRIDGE_CHILD_CPU_WORDS * sizeof(*mask));
	for (;;) {
		const size_t bits = 8 * sizeof(*mask);
		char *end;
		unsigned long lo, hi, c;

		if (*s < '0' || *s > '9')
			return -EINVAL;
		lo = strtoul(s, &end, 10);
		hi = lo;
		if (*end == '-') {
			s = end + 1;
			if (*s < '0' || *s > '9')
				return -EINVAL;
			hi = strtoul(s, &end, 10);
		}
		if (lo > hi || hi >= KBRIDGE_CHILD_CPU_WORDS * bits)
			return -EINVAL;
		for (c = lo; c <= hi; c++)
			mask[c / bits] |= 1UL << (c % bits);
		any = 1;
		if (*end == '\0')
			break;
		if (*end != ',')
			return -EINVAL;
		s = end + 1;
	}
	return any ? 0 : -EINVAL;
}

/* Whether s is a plain token (letters, digits, '-', '_'): what the file
 * prefix of the app's runtime directory must be for kbridge to be told it. */
static inline int
kbridge_child_plain_(const char *s)
{
	if (s == NULL || *s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'))
			return 0;
	return 1;
}

/* Whether the kernel takes s as an interface name (net/core/dev.c,
 * dev_valid_name): 1 to IFNAMSIZ - 1 bytes, not "." or "..", no '/', ':' or
 * white space (the kernel's isspace: space, \t to \r, 0xa0). DPVS's
 * "dpdk0.kni" is one. kbridge applies the same rule (limits.CheckIfName). */
static inline int
kbridge_child_ifname_(const char *s)
{
	size_t n = s != NULL ? strnlen(s, KBRIDGE_NAME_MAX + 1) : 0;
	const unsigned char *c;

	if (n == 0 || n > KBRIDGE_NAME_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return 0;
	for (c = (const unsigned char *)s; *c != '\0'; c++)
		if (*c == '/' || *c == ':' || *c == ' ' || (*c >= '\t' && *c <= '\r') || *c == 0xa0)
			return 0;
	return 1;
}

/* Writes s as a YAML double-quoted scalar: '"' and '\\' escaped, control
 * bytes as \xNN, the rest as it is (a name that is not UTF-8 is refused by
 * kbridge's configuration check, naming the key). */
static inline void
kbridge_child_yaml_str_(FILE *f, const char *s)
{
	const unsigned char *c;

	fputc('"', f);
	for (c = (const unsigned char *)s; *c != '\0'; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c < 0x20 || *c == 0x7f)
			fprintf(f, "\\x%02x", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

/* Writes the child's configuration to c->config. */
static inline int
kbridge_child_write_config_(struct kbridge_child *c, const struct kbridge_child_conf *conf,
			    char *why, size_t whylen)
{
	const char *rt = rte_eal_get_runtime_dir();
	const char *slash = rt != NULL ? strrchr(rt, '/') : NULL;
	char dir[PATH_MAX], sock[64];
	FILE *f;
	int fd, ok;

	/* The runtime directory is <runtime_dir>/<file prefix>, and kbridge
	 * wants the two apart (dpdk.runtime_dir, dpdk.file_prefix). */
	if (slash == NULL || slash == rt || !kbridge_child_plain_(slash + 1) ||
	    strchr(rt, '"') != NULL || strchr(rt, '\\') != NULL) {
		snprintf(why, whylen, "cannot tell the file prefix from the DPDK runtime directory %.160s",
			 rt != NULL ? rt : "(none)");
		return -EINVAL;
	}
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - rt), rt);
	if (snprintf(c->config, sizeof(c->config), "%s/kbridge-%s.yaml", rt,
		     conf->port != NULL ? conf->port : conf->ifname) >=
	    (int)sizeof(c->config)) {
		c->config[0] = '\0';
		snprintf(why, whylen, "the runtime directory's path %.160s is too long", rt);
		return -ENAMETOOLONG;
	}
	/* A new file, never through a link: one left by an app that died
	 * (or planted there) is removed first, and a link is removed, not
	 * followed. */
	fd = open(c->config, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST && unlink(c->config) == 0)
		fd = open(c->config, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (f == NULL) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		snprintf(why, whylen, "cannot write %.160s: %s", c->config, strerror(err));
		c->config[0] = '\0';
		return -err;
	}
	fprintf(f, "# Written by kbridge_child.h for the app pid %d; removed when it stops kbridge.\n"
		   "mode: ring\n"
		   "dpdk:\n  file_prefix: \"%s\"\n  runtime_dir: \"%s\"\n  wait: 10s\n"
		   "port: ",
		(int)getpid(), slash + 1, dir);
	kbridge_child_yaml_str_(f, conf->port != NULL ? conf->port : "");
	if (conf->discover)
		fprintf(f, "\ndiscover: true");
	fprintf(f, "\ninterface:\n  name: ");
	kbridge_child_yaml_str_(f, conf->ifname);
	fprintf(f, "\n  up: %s\n", conf->up ? "true" : "false");
	if (conf->mtu != 0)
		fprintf(f, "  mtu: %u\n", (unsigned int)conf->mtu);
	if (conf->mac != NULL)
		fprintf(f, "  mac: \"%02x:%02x:%02x:%02x:%02x:%02x\"\n", conf->mac[0], conf->mac[1],
			conf->mac[2], conf->mac[3], conf->mac[4], conf->mac[5]);
	/* The instance's socket (kbridge run --instance): the name is one path
	 * element, the kernel's rule leaving out '/', "." and "..". */
	snprintf(sock, sizeof(sock), "/run/kbridge/%s/control.sock", conf->ifname);
	fprintf(f, "stats:\n  socket: ");
	kbridge_child_yaml_str_(f, sock);
	fprintf(f, "\n  metrics: \"\"\n");

	ok = !ferror(f);
	ok = fclose(f) == 0 && ok;
	if (!ok) {
		snprintf(why, whylen, "cannot write %.160s", c->config);
		unlink(c->config);
		c->config[0] = '\0';
		return -EIO;
	}
	return 0;
}

/* The highest signal number, for resetting every disposition. */
#ifdef NSIG
#define KBRIDGE_CHILD_NSIG_ NSIG
#else
#define KBRIDGE_CHILD_NSIG_ 65
#endif

/*
 * In the child, between vfork() and execve(): it runs on the app's memory
 * and the calling thread's stack, so system calls only (no malloc, no
 * stdio, no write to anything but its locals), and it never returns.
 * Every signal arrives blocked (kbridge_child_spawn_): the app's handlers
 * are set back to the default before any can run here.
 */
static inline void
kbridge_child_exec_(const char *bin, char *const argv[], char *const envp[],
		    const unsigned long *cpus)
{
	struct sigaction dfl;
	sigset_t none;
	int fd, sig;

	/* A session of its own, as a service's: its own process group (a
	 * terminal's ^C reaches the app alone), no controlling terminal,
	 * and, where the kernel groups scheduling by session (autogroup),
	 * CPU time of its own rather than a share of the app's group, whose
	 * polling lcores would take most of its weight. */
	(void)setsid();
	/* Every disposition a fresh process has: the app's handlers (which
	 * would run on its memory here) and what it ignores. */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (sig = 1; sig < KBRIDGE_CHILD_NSIG_; sig++)
		(void)sigaction(sig, &dfl, NULL);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	/* Every CPU (the kernel keeps those the cpuset allows), or
	 * $KBRIDGE_CHILD_CPUS. The raw call: the glibc wrapper needs
	 * _GNU_SOURCE, which a header cannot set for the file that includes
	 * it. */
	(void)syscall(SYS_sched_setaffinity, 0, KBRIDGE_CHILD_CPU_WORDS * sizeof(*cpus), cpus);
#ifdef SYS_close_range
	if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
		for (fd = 3; fd < 65536; fd++)
			(void)close(fd);
	execve(bin, argv, envp);
	_exit(127);
}

/*
 * Starts the child: vfork() semantics, as posix_spawn() has them, and not
 * fork(): fork() copies the page tables of an app that maps gigabytes of
 * hugepages and may run many threads, and a thread of it writing under
 * copy-on-write stalls. posix_spawn() itself cannot set the child's CPUs,
 * and its session and close-from attributes are GNU extensions a header
 * compiled in ISO mode does not see. The calling thread waits until the
 * child has exec'd; the app's other threads run on. Every signal is blocked
 * across the call, so that none runs an app handler in the child. The pid,
 * or -1 with errno.
 */
static inline pid_t
kbridge_child_spawn_(const char *bin, char *const argv[], char *const envp[],
		     const unsigned long *cpus)
{
	sigset_t all, old;
	pid_t pid;
	int err;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = vfork();
	if (pid == 0)
		kbridge_child_exec_(bin, argv, envp, cpus);
	err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = err;
	return pid;
}

/* The child's pidfd, or -1 where the kernel has none (before 5.3). Taken
 * after the spawn: the pid is ours and cannot be reused until it is reaped,
 * by us, unless the app reaps children it did not start (SIGCHLD ignored, a
 * waitpid(-1) of its own). Then a waitid() on the pidfd that finds no child
 * of ours says so, and the pidfd is dropped rather than trusted. */
static inline int
kbridge_child_pidfd_(pid_t pid)
{
#ifdef SYS_pidfd_open
	siginfo_t si;
	int fd = (int)syscall(SYS_pidfd_open, pid, 0u);

	if (fd < 0)
		return -1;
	memset(&si, 0, sizeof(si));
	if (waitid((idtype_t)KBRIDGE_CHILD_P_PIDFD_, (id_t)fd, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
		/* ECHILD: not our child (reaped elsewhere, the pid taken);
		 * EINVAL: a kernel with pidfd_open but not P_PIDFD (5.3). */
		close(fd);
		return -1;
	}
	return fd;
#else
	(void)pid;
	return -1;
#endif
}

/* Sends sig to the child: through its pidfd, which names that process and
 * no later one of the same pid. */
static inline void
kbridge_child_signal_(const struct kbridge_child *c, int sig)
{
#ifdef SYS_pidfd_send_signal
	if (c->pidfd >= 0) {
		(void)syscall(SYS_pidfd_send_signal, c->pidfd, sig, NULL, 0u);
		return;
	}
#endif
	(void)kill(c->pid, sig);
}

/* Forgets the child: closes its pidfd. */
static inline void
kbridge_child_forget_(struct kbridge_child *c, int status)
{
	if (c->pid > 0 && c->pidfd >= 0)
		close(c->pidfd);
	c->pid = 0;
	c->pidfd = -1;
	c->status = status;
}

/*
 * Starts kbridge for conf. Returns 0 with c->pid set, or -errno: no kbridge
 * binary, the configuration could not be written, the spawn failed.
 */
static inline int
kbridge_child_start(struct kbridge_child *c, const struct kbridge_child_conf *conf,
		    char *why, size_t whylen)
{
	unsigned long cpus[KBRIDGE_CHILD_CPU_WORDS];
	char bin[PATH_MAX];
	char *argv[8];
	char **envp;
	int argc = 0, ret;
	pid_t pid;

	memset(c, 0, sizeof(*c));
	c->pidfd = -1;
	if (conf == NULL || (conf->port == NULL && !conf->discover) ||
	    (conf->port != NULL && !kbridge_child_ifname_(conf->port)) || !kbridge_child_ifname_(conf->ifname)) {
		snprintf(why, whylen, "port and interface names must be names the kernel takes for an interface: 1 to %d bytes, not \".\" or \"..\", no '/', ':' or white space",
			 KBRIDGE_NAME_MAX);
		return -EINVAL;
	}
	if (kbridge_child_find_bin_(bin, sizeof(bin)) < 0) {
		snprintf(why, whylen, "no kbridge binary: $KBRIDGE_BIN%s%s, kbridge on PATH, /usr/bin/kbridge and /usr/local/bin/kbridge are none",
			 getenv("KBRIDGE_BIN") != NULL ? " = " : " unset",
			 getenv("KBRIDGE_BIN") != NULL ? getenv("KBRIDGE_BIN") : "");
		return -ENOENT;
	}
	if (kbridge_child_cpus_(cpus) < 0) {
		snprintf(why, whylen, "KBRIDGE_CHILD_CPUS=%.60s is no CPU list (as taskset -c takes: 0,2-3)",
			 getenv("KBRIDGE_CHILD_CPUS"));
		return -EINVAL;
	}
	envp = kbridge_child_env_();
	if (envp == NULL) {
		snprintf(why, whylen, "out of memory for kbridge's environment");
		return -ENOMEM;
	}
	ret = kbridge_child_write_config_(c, conf, why, whylen);
	if (ret < 0) {
		free(envp);
		return ret;
	}
	argv[argc++] = bin;
	argv[argc++] = (char *)"run";
	argv[argc++] = (char *)"--config";
	argv[argc++] = c->config;
	/* As kbridge@NAME would run: its name in the log, and `kbridge stats
	 * --instance NAME` reads the control socket written above. */
	if (strlen(conf->ifname) <= KBRIDGE_NAME_MAX && strcmp(conf->ifname, "kbridge") != 0) {
		argv[argc++] = (char *)"--instance";
		argv[argc++] = (char *)conf->ifname;
	}
	argv[argc] = NULL;
	pid = kbridge_child_spawn_(bin, argv, envp, cpus);
	ret = -errno;
	free(envp);
	if (pid < 0) {
		snprintf(why, whylen, "vfork: %s", strerror(-ret));
		unlink(c->config);
		c->config[0] = '\0';
		return ret;
	}
	c->pid = pid;
	c->pidfd = kbridge_child_pidfd_(pid);
	c->status = -1;
	return 0;
}

/* Describes a wait status into why. */
static inline void
kbridge_child_status_(int status, char *why, size_t whylen)
{
	if (WIFEXITED(status))
		snprintf(why, whylen, "kbridge exited with status %d%s", WEXITSTATUS(status),
			 WEXITSTATUS(status) == 127 ? " (could not exec it)" :
			 WEXITSTATUS(status) == 2 ? " (its configuration or command line: its log says which key)" :
						    " (its log above says why)");
	else if (WIFSIGNALED(status))
		snprintf(why, whylen, "kbridge was killed by signal %d", WTERMSIG(status));
	else
		snprintf(why, whylen, "kbridge ended (wait status %#x)", (unsigned int)status);
}

/* A wait status from waitid()'s siginfo, as waitpid() gives it. */
static inline int
kbridge_child_wstatus_(const siginfo_t *si)
{
	if (si->si_code == CLD_EXITED)
		return (si->si_status & 0xff) << 8;
	return (si->si_status & 0x7f) | (si->si_code == CLD_DUMPED ? 0x80 : 0);
}

/*
 * Reaps the child if it exited: 1 with its wait status, 0 while it runs, -1
 * when it is no child of ours any more (the app reaps children itself:
 * SIGCHLD ignored, or a handler of its own). block: wait for it.
 */
static inline int
kbridge_child_reap_(struct kbridge_child *c, int block, int *status)
{
	int opts = block ? 0 : WNOHANG;
	pid_t r;

	if (c->pidfd >= 0) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		if (waitid((idtype_t)KBRIDGE_CHILD_P_PIDFD_, (id_t)c->pidfd, &si, WEXITED | opts) < 0)
			return -1;
		if (si.si_pid == 0)
			return 0;
		*status = kbridge_child_wstatus_(&si);
		return 1;
	}
	r = waitpid(c->pid, status, opts);
	return r == c->pid ? 1 : r == 0 ? 0 : -1;
}

/* Whether a child reaped elsewhere has exited: its pidfd polls readable once
 * it has, whoever reaped it; without a pidfd only the pid can tell. */
static inline int
kbridge_child_gone_(const struct kbridge_child *c)
{
	if (c->pidfd >= 0) {
		struct pollfd pfd;

		pfd.fd = c->pidfd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		return poll(&pfd, 1, 0) > 0;
	}
	return kill(c->pid, 0) < 0 && errno == ESRCH;
}

/* 1 (and the cause in why) once the child exited and was reaped, else 0. */
static inline int
kbridge_child_exited(struct kbridge_child *c, char *why, size_t whylen)
{
	int status = 0, r;

	if (c->pid <= 0)
		return 1;
	r = kbridge_child_reap_(c, 0, &status);
	if (r == 1) {
		kbridge_child_status_(status, why, whylen);
		kbridge_child_forget_(c, status);
		return 1;
	}
	if (r < 0 && errno == ECHILD && kbridge_child_gone_(c)) {
		snprintf(why, whylen, "kbridge exited (reaped elsewhere: its status is unknown)");
		kbridge_child_forget_(c, -1);
		return 1;
	}
	return 0;
}

/*
 * Waits at most timeout_ms until the child serves port p (it is the port's
 * owner) and interface ifname exists. 0, or -ETIMEDOUT / -ECHILD (it
 * exited) with the cause in why. A child of pid 0 stands for a kbridge
 * started by someone else (kbridge@NAME): any live owner will do.
 */
static inline int
kbridge_child_wait(struct kbridge_child *c, const struct kbridge_port *p, const char *ifname,
		   unsigned int timeout_ms, char *why, size_t whylen)
{
	pid_t want = c->pid;
	unsigned int waited;

	for (waited = 0;; waited += 10) {
		pid_t owner = kbridge_port_owner_pid(p);

		if (want > 0 && kbridge_child_exited(c, why, whylen))
			return -ECHILD;
		if (owner != 0 && (want == 0 || owner == want) && if_nametoindex(ifname) != 0)
			return 0;
		if (waited >= timeout_ms) {
			snprintf(why, whylen, "%s after %u ms: %s", want > 0 ? "kbridge started" : "no kbridge came",
				 timeout_ms,
				 owner == 0 ? "no kbridge took the port" :
				 owner != want && want > 0 ? "another kbridge took the port" :
							    "the interface does not exist");
			return -ETIMEDOUT;
		}
		rte_delay_us_sleep(10000);
	}
}

/*
 * Stops the child: SIGTERM, then SIGKILL after KBRIDGE_CHILD_STOP_MS, and
 * removes its configuration. 0 when it exited by itself with status 0 (it
 * freed what it held and removed the interface), else -EIO with the cause.
 */
static inline int
kbridge_child_stop(struct kbridge_child *c, char *why, size_t whylen)
{
	unsigned int waited;
	int ret = 0;

	if (c->pid > 0) {
		kbridge_child_signal_(c, SIGTERM);
		for (waited = 0; !kbridge_child_exited(c, why, whylen); waited += 10) {
			if (waited >= KBRIDGE_CHILD_STOP_MS) {
				int status = 0;

				kbridge_child_signal_(c, SIGKILL);
				(void)kbridge_child_reap_(c, 1, &status);
				snprintf(why, whylen, "kbridge pid %d did not stop within %d ms of SIGTERM: killed",
					 (int)c->pid, KBRIDGE_CHILD_STOP_MS);
				kbridge_child_forget_(c, -1);
				ret = -EIO;
				break;
			}
			rte_delay_us_sleep(10000);
		}
		if (ret == 0 && c->status != 0)
			ret = -EIO;
	}
	if (c->config[0] != '\0')
		unlink(c->config);
	c->config[0] = '\0';
	return ret;
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_CHILD_H */

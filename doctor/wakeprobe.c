/* The wakeup probe's ping-pong in plain threads: see wakeprobe.h, and
 * wakeprobe.go for why it is C. */
#define _GNU_SOURCE
#include "wakeprobe.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct kb_waiter {
	int efd, ep;
	pthread_t th;
	int started;
	struct kb_probe *p;
};

struct kb_probe {
	int ack, ack_ep;
	_Atomic int64_t woke_at;
	atomic_int stop;
	struct kb_waiter *w;
	int nw;
	int64_t gap_ns, run_ns, span_ns;
	int64_t *out;
	int max, n, err;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int epoll_on(int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		return -errno;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int err = -errno;

		close(ep);
		return err;
	}
	return ep;
}

/* The waiter parks as a kbridge worker does, stamps the time it ran and
 * acknowledges. The epoll timeout only bounds how long it outlives a
 * writer that gave up. */
static void *waiter_main(void *arg)
{
	struct kb_waiter *w = arg;
	struct kb_probe *p = w->p;
	struct epoll_event ev;
	uint64_t v;
	int ms = (int)(p->span_ns / 1000000) + 1;

	while (!atomic_load(&p->stop)) {
		if (epoll_wait(w->ep, &ev, 1, ms) <= 0)
			continue;
		atomic_store(&p->woke_at, now_ns());
		if (read(w->efd, &v, sizeof v) < 0 || atomic_load(&p->stop))
			continue;
		v = 1;
		if (write(p->ack, &v, sizeof v) < 0)
			break;
	}
	return NULL;
}

/* wait_ack waits for the acknowledgement for at most span_ns. */
static int wait_ack(struct kb_probe *p)
{
	struct epoll_event ev;
	int64_t end = now_ns() + p->span_ns;
	uint64_t v;

	for (;;) {
		int64_t left = end - now_ns();
		int n;

		if (left <= 0)
			return -ETIMEDOUT;
		n = epoll_wait(p->ack_ep, &ev, 1, (int)(left / 1000000) + 1);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			break;
	}
	if (read(p->ack, &v, sizeof v) < 0)
		return -errno;
	return 0;
}

static void *writer_main(void *arg)
{
	struct kb_probe *p = arg;
	struct timespec gap = { .tv_sec = p->gap_ns / 1000000000, .tv_nsec = p->gap_ns % 1000000000 };
	int64_t end = now_ns() + p->run_ns;
	uint64_t one = 1;

	for (int i = 0; p->n < p->max && end - now_ns() > p->gap_ns; i++) {
		struct kb_waiter *w = &p->w[i % p->nw];
		int64_t t0;
		int err;

		nanosleep(&gap, NULL); /* EINTR only shortens one gap */
		t0 = now_ns();
		if (write(w->efd, &one, sizeof one) < 0) {
			p->err = -errno;
			return NULL;
		}
		err = wait_ack(p);
		if (err) {
			p->err = err;
			return NULL;
		}
		p->out[p->n++] = atomic_load(&p->woke_at) - t0;
	}
	return NULL;
}

/* start runs fn pinned on cpu: pthread_create fails with EINVAL for a CPU
 * the caller may not use. */
static int start(pthread_t *th, int cpu, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	cpu_set_t set;
	int err;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_attr_init(&attr);
	err = pthread_attr_setaffinity_np(&attr, sizeof set, &set);
	if (!err)
		err = pthread_create(th, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return -err;
}

int kb_wake_probe(int from, const int *to, int nto, int64_t gap_ns, int64_t run_ns,
		  int64_t span_ns, int64_t *out, int max)
{
	struct kb_probe p = { .ack = -1, .ack_ep = -1, .nw = nto, .gap_ns = gap_ns,
			      .run_ns = run_ns, .span_ns = span_ns, .out = out, .max = max };
	pthread_t writer;
	int err = 0;

	if (nto <= 0 || gap_ns <= 0 || max <= 0)
		return -EINVAL;
	p.w = calloc(nto, sizeof *p.w);
	if (!p.w)
		return -ENOMEM;
	for (int i = 0; i < nto; i++)
		p.w[i].efd = p.w[i].ep = -1;
	p.ack = eventfd(0, EFD_CLOEXEC);
	if (p.ack < 0) {
		err = -errno;
		goto out;
	}
	p.ack_ep = epoll_on(p.ack);
	if (p.ack_ep < 0) {
		err = p.ack_ep;
		goto out;
	}
	for (int i = 0; i < nto; i++) {
		struct kb_waiter *w = &p.w[i];

		w->p = &p;
		w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (w->efd < 0) {
			err = -errno;
			goto out;
		}
		w->ep = epoll_on(w->efd);
		if (w->ep < 0) {
			err = w->ep;
			goto out;
		}
		err = start(&w->th, to[i], waiter_main, w);
		if (err)
			goto out;
		w->started = 1;
	}
	err = start(&writer, from, writer_main, &p);
	if (err)
		goto out;
	pthread_join(writer, NULL);
	err = p.err;
out:
	atomic_store(&p.stop, 1);
	for (int i = 0; i < nto; i++) {
		uint64_t one = 1;

		if (p.w[i].started) {
			if (write(p.w[i].efd, &one, sizeof one) < 0) {
				/* the waiter still sees stop within its epoll timeout */
			}
			pthread_join(p.w[i].th, NULL);
		}
		if (p.w[i].ep >= 0)
			close(p.w[i].ep);
		if (p.w[i].efd >= 0)
			close(p.w[i].efd);
	}
	if (p.ack_ep >= 0)
		close(p.ack_ep);
	if (p.ack >= 0)
		close(p.ack);
	free(p.w);
	return err ? err : p.n;
}

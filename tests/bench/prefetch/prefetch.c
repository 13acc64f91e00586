/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * prefetch: does prefetching a burst's frames save the checksum loop the
 * first touch of bytes another CPU wrote? A writer thread pinned to CPU 1
 * (the app's lcore) copies 1500-byte frames into a pool of mbuf-sized
 * elements, in the scattered order a mempool hands them out, and writes
 * each element's header line; a reader pinned to CPU 0 (kbridge) takes
 * bursts of 32, reads each header for the length and sums the frame with
 * the one's-complement sum kbridge's Coalescer checks (tap/vnet/csum.go:
 * 64-bit words, add with carry). The two run concurrently, the writer LAG
 * bursts ahead of the reader, as the app keeps filling the ring while
 * kbridge drains it. Only the reader's work on a burst is timed.
 *
 * Variants of the reader, interleaved round by round:
 *   none       no prefetch;
 *   hot        none, over frames the reader itself summed just before (a
 *              frame in its own cache: what the touch would cost if free);
 *   all        every line of every frame of the burst, up front, as the
 *              burst core can after its dequeue: the headers first, then
 *              each frame's data lines from its header's length;
 *   all-l2     the same into L2 only (prefetcht1), for bursts whose data
 *              outgrows L1;
 *   first      each frame's header and first data line, up front;
 *   ahead1/2   every line of frame i+1 (i+2) before summing frame i.
 *
 * Build and run (needs CPUs 0 and 1, and keeps both busy for about a
 * minute: not beside a measurement on the bed):
 *   cc -O2 -march=native -pthread -o /tmp/prefetch tests/bench/prefetch/prefetch.c
 *   /tmp/prefetch [ROUNDS] [BURSTS]
 * One line per pool size, lag and variant: ns a frame, min / median / max
 * over the rounds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BURST = 32, FRAME = 1500, LINE = 64 };
/* An mbuf of the bed's pool: 128-byte header, 128 of headroom, 2048 room. */
enum { STRIDE = 2304, HDR = 0, DATA = 256 };

enum variant { V_NONE, V_HOT, V_ALL, V_ALL2, V_FIRST, V_AHEAD1, V_AHEAD2, NVARIANT };
static const char *const vname[] = {"none", "hot", "all", "all-l2", "first", "ahead1", "ahead2"};

struct hdr {
	uint16_t data_len;
	uint16_t seq;
};

static uint8_t *pool;
static uint32_t *order; /* the pool's elements in the order they are handed out */
static int nframes, lag;
static long nbursts;
static volatile long written, consumed; /* bursts; written by one side each */
static volatile int hot;                /* the writer does not write (V_HOT) */
static uint8_t src[FRAME];

static inline uint8_t *
elem(long burst, int j)
{
	return pool + (size_t)order[(burst * BURST + j) % nframes] * STRIDE;
}

static void
pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
		fprintf(stderr, "prefetch: cannot pin to CPU %d\n", cpu);
		exit(1);
	}
}

static void *
writer(void *arg)
{
	(void)arg;
	pin(1);
	for (long t = 0; t < nbursts + lag + 1; t++) {
		/* One burst beyond the reader's, written while it reads. */
		while (t - __atomic_load_n(&consumed, __ATOMIC_ACQUIRE) > lag + 1)
			;
		if (!hot) {
			for (int j = 0; j < BURST; j++) {
				uint8_t *e = elem(t, j);
				struct hdr *h = (struct hdr *)(e + HDR);

				src[0] = (uint8_t)t;
				memcpy(e + DATA, src, FRAME);
				h->data_len = FRAME;
				h->seq = (uint16_t)t;
			}
		}
		__atomic_store_n(&written, t + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

/* The same sum as vnet.Sum's bulk loop: 64-bit words with end-around carry. */
static inline uint64_t
sum(const uint8_t *b, int n, uint64_t acc)
{
	unsigned long long s = acc, w;
	unsigned long long c = 0;

	for (; n >= 8; b += 8, n -= 8) {
		memcpy(&w, b, 8);
		c += __builtin_uaddll_overflow(s, w, &s);
	}
	for (; n > 0; b++, n--)
		c += __builtin_uaddll_overflow(s, *b, &s);
	return s + c;
}

static inline void
pf_frame(const uint8_t *e)
{
	__builtin_prefetch(e + HDR, 0, 3);
	for (int o = 0; o < FRAME; o += LINE)
		__builtin_prefetch(e + DATA + o, 0, 3);
}

/* The burst's headers, then each frame's data by its header's length. */
#define PF_BURST(e, loc)                                                                \
	do {                                                                            \
		for (int j_ = 0; j_ < BURST; j_++)                                      \
			__builtin_prefetch((e)[j_] + HDR, 0, 3);                        \
		for (int j_ = 0; j_ < BURST; j_++) {                                    \
			int n_ = ((const struct hdr *)((e)[j_] + HDR))->data_len;       \
			for (int o_ = 0; o_ < n_; o_ += LINE)                           \
				__builtin_prefetch((e)[j_] + DATA + o_, 0, loc);        \
		}                                                               \
	} while (0)

static uint64_t sink;

static inline void
one(uint8_t *const *e, int i)
{
	const struct hdr *h = (const struct hdr *)(e[i] + HDR);

	sink = sum(e[i] + DATA, h->data_len, sink);
}

static void
read_burst(enum variant v, long t)
{
	uint8_t *e[BURST];

	for (int j = 0; j < BURST; j++)
		e[j] = elem(t, j);
	switch (v) {
	case V_ALL:
		PF_BURST(e, 3);
		break;
	case V_ALL2:
		PF_BURST(e, 2);
		break;
	case V_FIRST:
		for (int j = 0; j < BURST; j++) {
			__builtin_prefetch(e[j] + HDR, 0, 3);
			__builtin_prefetch(e[j] + DATA, 0, 3);
		}
		break;
	case V_AHEAD1:
		pf_frame(e[0]);
		break;
	case V_AHEAD2:
		pf_frame(e[0]);
		pf_frame(e[1]);
		break;
	default:
		break;
	}
	for (int j = 0; j < BURST; j++) {
		if (v == V_AHEAD1 && j + 1 < BURST)
			pf_frame(e[j + 1]);
		if (v == V_AHEAD2 && j + 2 < BURST)
			pf_frame(e[j + 2]);
		one(e, j);
	}
}

static uint64_t
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ns a frame of the reader's work over nbursts bursts of variant v. */
static double
measure(enum variant v)
{
	pthread_t w;
	uint64_t spent = 0;

	written = consumed = 0;
	hot = v == V_HOT;
	if (pthread_create(&w, NULL, writer, NULL) != 0) {
		perror("prefetch: pthread_create");
		exit(1);
	}
	for (long t = 0; t < nbursts; t++) {
		while (__atomic_load_n(&written, __ATOMIC_ACQUIRE) <= t + lag)
			;
		if (v == V_HOT)
			read_burst(V_NONE, t); /* into the reader's cache first */
		uint64_t t0 = now();
		read_burst(v == V_HOT ? V_NONE : v, t);
		spent += now() - t0;
		__atomic_store_n(&consumed, t + 1, __ATOMIC_RELEASE);
	}
	pthread_join(w, NULL);
	return (double)spent / (double)(nbursts * BURST);
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 7;
	long bursts = argc > 2 ? atol(argv[2]) : 20000;
	static const int pools[] = {512, 2048, 8192};
	static const int lags[] = {0, 8};

	pin(0);
	for (int i = 0; i < FRAME; i++)
		src[i] = (uint8_t)(i * 7);
	printf("pool frames  lag  variant  ns/frame min  median  max  (%d rounds of %ld bursts of %d)\n", rounds, bursts,
	       BURST);
	for (size_t p = 0; p < sizeof(pools) / sizeof(pools[0]); p++) {
		nframes = pools[p];
		pool = aligned_alloc(4096, (size_t)nframes * STRIDE);
		order = malloc(sizeof(*order) * (size_t)nframes);
		if (pool == NULL || order == NULL)
			return 1;
		memset(pool, 0, (size_t)nframes * STRIDE);
		for (int i = 0; i < nframes; i++)
			order[i] = (uint32_t)i;
		srand(1);
		for (int i = nframes - 1; i > 0; i--) { /* scattered, as a pool hands them out */
			int j = rand() % (i + 1);
			uint32_t x = order[i];

			order[i] = order[j];
			order[j] = x;
		}
		for (size_t l = 0; l < sizeof(lags) / sizeof(lags[0]); l++) {
			double r[NVARIANT][64];

			lag = lags[l];
			nbursts = bursts;
			for (int k = 0; k < rounds && k < 64; k++)
				for (int i = 0; i < NVARIANT; i++) {
					int v = (i + k) % NVARIANT; /* a different order each round */

					r[v][k] = measure((enum variant)v);
				}
			for (int v = 0; v < NVARIANT; v++) {
				qsort(r[v], (size_t)rounds, sizeof(double), cmp);
				printf("%5d  %3d  %-7s  %6.1f  %6.1f  %6.1f\n", nframes, lag, vname[v], r[v][0],
				       r[v][rounds / 2], r[v][rounds - 1]);
			}
		}
		free(pool);
		free(order);
	}
	printf("sink %llx\n", (unsigned long long)sink);
	return 0;
}

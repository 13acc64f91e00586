/* The wakeup probe's ping-pong (wakeprobe.c), called from wakeprobe.go. */
#ifndef KB_WAKEPROBE_H
#define KB_WAKEPROBE_H

#include <stdint.h>

/*
 * kb_wake_probe runs a writer thread pinned on CPU from and a waiter
 * thread parked in epoll_wait on each of the nto CPUs in to. Until run_ns
 * have passed, or max samples are taken, the writer sleeps gap_ns, writes
 * the next waiter's eventfd and waits for its acknowledgement; out[i] is
 * the time from the write to that waiter running, in nanoseconds. It
 * returns the number of samples, -ETIMEDOUT when a wakeup took longer
 * than span_ns (the samples so far are lost), -EINVAL when a CPU is
 * outside the caller's affinity, or another negative errno.
 */
int kb_wake_probe(int from, const int *to, int nto, int64_t gap_ns, int64_t run_ns,
		  int64_t span_ns, int64_t *out, int max);

#endif

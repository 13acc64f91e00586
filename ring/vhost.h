/* SPDX-License-Identifier: BSD-3-Clause
 *
 * vhost.h: kbridge as a vhost-user backend (librte_vhost) for an app's
 * virtio-user port. One backend (one socket, one device at a time) per
 * process; one kb_vq per queue pair. Packets move through the burst core
 * (burst.h), one cgo call per burst.
 */
#ifndef KB_VHOST_H
#define KB_VHOST_H

#include <stdint.h>
#include <sys/uio.h>

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "burst.h"

#define KB_VH_MAX_QUEUES 16

/* One queue pair: guest RX vring 2q (kbridge enqueues), guest TX vring 2q+1
 * (kbridge dequeues). allow/busy are the destroy_device handshake of DPDK's
 * net_vhost PMD: the callback clears allow and waits until busy is 0. */
struct kb_vq {
	int allow;
	int busy;
	int vid;
	uint16_t id;
	uint16_t pad;
	uint64_t gen;   /* bumped by every device or vring change */
	int evfd;       /* the worker's eventfd: kicked on every change; -1 */
	uint64_t kicks_enabled; /* PrepareToPark calls that armed notifications */
	int refused;    /* the TX vring's next chain was refused, or its guest
			 * memory shrank: not served until the next device
			 * (kb_vh_chain_fault, kb_vh_guest_fault) */
	int evfd_users; /* callbacks writing evfd: kb_vh_set_evfd waits them out */
};

/* What kbridge refused of a frontend, for Go to log. */
#define KB_VH_FAULT_MEM_TABLE 1
#define KB_VH_FAULT_CHAIN 2
#define KB_VH_FAULT_REQUEST 3 /* a request kbridge does not use */
#define KB_VH_FAULT_PEER 4    /* a peer not on the allow-list */
#define KB_VH_FAULT_VRING 5   /* a vring request kbridge refuses in this state */
#define KB_VH_MAX_UIDS 32
#define KB_VH_FAULT_LEN 240
#define KB_VH_FAULTS 16

struct kb_vh_backend {
	struct rte_mempool *pool;
	int nb_queues;
	int notify_fd; /* eventfd: Go's event loop reads it after every callback */
	int vid;       /* the connected device, or -1 */
	uint64_t features; /* negotiated with the connected device */
	uint64_t connects, disconnects;
	uint64_t refused_mem_tables, refused_chains, refused_requests;
	uint64_t refused_peers, refused_vrings;
	struct kb_vq q[KB_VH_MAX_QUEUES];
};

extern struct kb_vh_backend kb_vh;
extern volatile int kb_vh_stopping; /* set by Go before the last notify */

/* An mbuf pool of n mbufs of data_room bytes each (after headroom). */
int kb_vh_pool_create(unsigned int n, uint16_t data_room);
unsigned int kb_vh_pool_in_use(void);
unsigned int kb_vh_pool_size(void);
/* Registers the socket with the wanted features and callbacks and starts it. */
int kb_vh_start(const char *path, int client, int nb_queues, int notify_fd);
int kb_vh_stop(const char *path);
/* How long librte_vhost may wait for the rest of a frontend's message
 * (SO_RCVTIMEO, SO_SNDTIMEO on each connection): it reads a payload with a
 * blocking read() on its one message thread. */
#define KB_VH_MSG_TIMEOUT_MS 2000
/* The peers kbridge serves (server) or serves through (client), checked by
 * SO_PEERCRED on each new connection: root, kbridge's own uid, uids[0..n),
 * and a peer whose gid is gid (-1: none). Before kb_vh_start. */
int kb_vh_allow(const uint32_t *uids, int n, int64_t gid);
/* The features a frontend may negotiate (for the log). */
uint64_t kb_vh_offered(const char *path);
/* Copies the oldest refusal not yet taken into what (KB_VH_FAULT_LEN
 * bytes) and returns its kind, or 0 when there is none. */
int kb_vh_fault_take(char *what);

/* The burst core's ops over the vrings: a buffer's ctx is its queue pair's
 * struct kb_vq (&kb_vh.q[q]). Out buffers take KB_BURST_EXTBUF (librte_vhost
 * may hand over external buffers, its own) and KB_BURST_COMPLETE_CSUM (a
 * frontend's NEEDS_CSUM arrives as RX_L4_CKSUM_NONE). */
extern const struct kb_burst_ops kb_vh_burst_ops;


/* Need-wakeup. */
/* If the queue's device changed since *gen, updates *gen and returns the
 * device's current kick eventfd, dup'ed (the caller owns it), or -1 when
 * there is none; returns -2 when nothing changed. */
int kb_vh_sync(int q, uint64_t *gen);
/* Enables guest notifications on the TX vring, fences, and returns how many
 * descriptors wait. */
int kb_vh_prepare_park(int q);
void kb_vh_unpark(int q, int kickfd);
/* Sets the worker's eventfd (-1: none). Returns once no callback still
 * writes the old one, which the caller may then close. */
void kb_vh_set_evfd(int q, int fd);

#endif

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * vhost.h: kbridge as a vhost-user backend (librte_vhost) for an app's
 * virtio-user port. One backend (one socket, one device at a time) per
 * process; one kb_vq per queue pair. As in ring/burst.c, everything that
 * touches packets runs inside one cgo call per burst.
 */
#ifndef KB_VHOST_H
#define KB_VHOST_H

#include <stdint.h>
#include <sys/uio.h>

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "mbuf.h"

#define KB_VH_MAX_QUEUES 16

/* Why a packet from the app cannot be written whole: ring's verdicts
 * (enum kb_pkt_verdict), from the same chain walk. */
#define KB_VH_OK KB_PKT_OK
#define KB_VH_TOO_MANY_SEGS KB_PKT_TOO_MANY_SEGS
#define KB_VH_MALFORMED KB_PKT_MALFORMED

#define KB_VH_L4_CSUM_GOOD 0x1 /* RTE_MBUF_F_RX_L4_CKSUM_GOOD, or completed here */
#define KB_VH_LRO 0x2          /* RTE_MBUF_F_RX_LRO: tso_segsz is valid */

struct kb_vh_pkt {
	uint32_t pkt_len;
	uint16_t nb_iov;
	uint16_t first_seg;
	uint8_t verdict;
	uint8_t offload;
	uint16_t tso_segsz;
};

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
	int refused;    /* the TX vring's next chain was refused: not served
			 * until the next device (kb_vh_chain_fault) */
};

/* What kbridge refused of a frontend, for Go to log. */
#define KB_VH_FAULT_MEM_TABLE 1
#define KB_VH_FAULT_CHAIN 2
#define KB_VH_FAULT_LEN 240
#define KB_VH_FAULTS 16

struct kb_vh_backend {
	struct rte_mempool *pool;
	int nb_queues;
	int notify_fd; /* eventfd: Go's event loop reads it after every callback */
	int vid;       /* the connected device, or -1 */
	uint64_t features; /* negotiated with the connected device */
	uint64_t connects, disconnects;
	uint64_t refused_mem_tables, refused_chains;
	struct kb_vq q[KB_VH_MAX_QUEUES];
};

extern struct kb_vh_backend kb_vh;
extern volatile int kb_vh_stopping; /* set by Go before the last notify */

/* EAL as kbridge's own primary. */
int kb_vh_eal_init(int argc, char **argv);
/* An mbuf pool of n mbufs of data_room bytes each (after headroom). */
int kb_vh_pool_create(unsigned int n, uint16_t data_room);
unsigned int kb_vh_pool_in_use(void);
unsigned int kb_vh_pool_size(void);
/* Registers the socket with the wanted features and callbacks and starts it. */
int kb_vh_start(const char *path, int client, int nb_queues, int notify_fd);
int kb_vh_stop(const char *path);
/* The features a frontend may negotiate (for the log). */
uint64_t kb_vh_offered(const char *path);
/* Copies the oldest refusal not yet taken into what (KB_VH_FAULT_LEN
 * bytes) and returns its kind, or 0 when there is none. */
int kb_vh_fault_take(char *what);

/* App -> kernel: dequeued bursts. */
struct kb_vh_out {
	struct kb_vq *q;
	uint16_t cap, max_segs, n, pad;
	struct rte_mbuf **mbufs;
	struct kb_vh_pkt *pkts;
	struct iovec *iov;
	uint64_t csum_sw; /* NEEDS_CSUM packets completed in software */
};
struct kb_vh_out *kb_vh_out_new(int q, uint16_t cap, uint16_t max_segs);
uint16_t kb_vh_out_next(struct kb_vh_out *b);
void kb_vh_out_free(struct kb_vh_out *b);

/* Kernel -> app: frames copied into mbufs and enqueued. */
struct kb_vh_in {
	struct kb_vq *q;
	uint8_t *buf;
	uint32_t *lens;
	uint32_t stride;
	uint16_t cap, n;
	struct rte_mbuf **mbufs;
	uint16_t queued, no_mbuf, ring_full, pad;
};
struct kb_vh_in *kb_vh_in_new(int q, uint16_t cap, uint32_t stride);
void kb_vh_in_put(struct kb_vh_in *b);
struct kb_vh_tso {
	uint16_t l2, l3, l4, mss;
	uint8_t ipv6, pad[3];
};
/* 1 queued, 0 dropped (counted), -E2BIG: the guest did not negotiate TSO
 * for this IP version, split it instead. */
int kb_vh_in_put_tso(struct kb_vh_in *b, uint8_t *data, uint32_t len,
		     const struct kb_vh_tso *t);
void kb_vh_in_free(struct kb_vh_in *b);

/* Need-wakeup. */
/* If the queue's device changed since *gen, updates *gen and returns the
 * device's current kick eventfd, dup'ed (the caller owns it), or -1 when
 * there is none; returns -2 when nothing changed. */
int kb_vh_sync(int q, uint64_t *gen);
/* Enables guest notifications on the TX vring, fences, and returns how many
 * descriptors wait. */
int kb_vh_prepare_park(int q);
void kb_vh_unpark(int q, int kickfd);
void kb_vh_set_evfd(int q, int fd);

#endif

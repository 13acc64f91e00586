/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst.h: the C half of kbridge's DPDK binding. Everything here runs inside
 * one cgo call per burst; Go never calls DPDK once per packet.
 */
#ifndef KB_BURST_H
#define KB_BURST_H

#include <stdint.h>
#include <sys/uio.h>

#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "include/kbridge.h"
#include "mbuf.h"

/* Residence-time histogram: bucket i counts packets that stayed less than
 * 2^(i+KB_HIST_SHIFT) ns between the app's enqueue and the TAP write; the
 * last bucket takes everything longer. */
#define KB_HIST_BUCKETS 24
#define KB_HIST_SHIFT 8


/* What the app's NIC did for a packet (struct kb_pkt.offload). */
#define KB_PKT_L4_CSUM_GOOD 0x1 /* RTE_MBUF_F_RX_L4_CKSUM_GOOD */
#define KB_PKT_LRO 0x2          /* RTE_MBUF_F_RX_LRO: tso_segsz is valid */

/* One packet dequeued from a to_kernel ring. Its segments are
 * iov[first_seg .. first_seg+nb_iov). */
struct kb_pkt {
	uint32_t pkt_len;
	uint16_t nb_iov;
	uint16_t first_seg;
	uint8_t verdict;
	uint8_t written; /* set by Go: counts toward residence time */
	uint8_t offload; /* KB_PKT_L4_CSUM_GOOD, KB_PKT_LRO */
	uint8_t pad;
	uint16_t tso_segsz;
	uint16_t pad2;
	uint64_t enq_tsc;
};

/* A reusable burst buffer for one worker in the app -> kernel direction. */
struct kb_out_burst {
	struct rte_ring *ring;
	int32_t tsc_offset;
	uint16_t cap;      /* packets per burst */
	uint16_t max_segs; /* iovecs per packet */
	uint16_t n;        /* packets in the current burst */
	uint16_t pad;
	uint64_t tsc_hz;
	struct rte_mbuf **mbufs;
	struct kb_pkt *pkts;
	struct iovec *iov;
	uint64_t hist[KB_HIST_BUCKETS];
	/* The shared record of the burst held (kbridge.h's kbridge_held), or
	 * NULL when the port has none (a version-1 app). */
	struct kbridge_held_q *held;
};

/* A reusable burst buffer for the kernel -> app direction: frames read from
 * the TAP device, packed at `stride` bytes apart in `buf`. */
struct kb_in_burst {
	struct rte_ring *ring;
	struct rte_mempool *pool;
	uint8_t *buf;
	uint32_t *lens;
	uint32_t stride;
	uint16_t cap;
	uint16_t n;
	struct rte_mbuf **mbufs; /* scratch: cap heads for the enqueue */
	/* Results of the last kb_in_put(). */
	uint16_t queued;
	uint16_t no_mbuf;
	uint16_t ring_full;
	uint16_t pad;
	/* The shared record of the mbufs allocated and not yet enqueued, or
	 * NULL (see struct kb_out_burst). */
	struct kbridge_held_q *held;
	uint32_t room; /* data room of one of the pool's mbufs */
};

struct kb_out_burst *kb_out_new(struct rte_ring *ring, int32_t tsc_offset,
				uint64_t tsc_hz, uint16_t cap, uint16_t max_segs);
/* Releases the previous burst (recording residence times of the packets Go
 * wrote) and dequeues the next one. Returns the number of packets. */
uint16_t kb_out_next(struct kb_out_burst *b);
/* Releases the current burst and the buffer itself. */
void kb_out_free(struct kb_out_burst *b);

struct kb_in_burst *kb_in_new(struct rte_ring *ring, struct rte_mempool *pool,
			      uint16_t cap, uint32_t stride);
/* Copies b->n frames into mbufs (chained when larger than one mbuf) and
 * enqueues them; what cannot be queued is freed and counted. */
void kb_in_put(struct kb_in_burst *b);
void kb_in_free(struct kb_in_burst *b);

/* A TCP super-frame for an app that declared KBRIDGE_APP_TSO: header
 * lengths, segment size, and the most segments its mbuf chain may have. */
struct kb_tso {
	uint16_t l2, l3, l4, mss;
	uint16_t max_segs; /* 0: no limit */
	uint8_t ipv6;
	uint8_t pad;
};

/* Copies one TCP super-frame of len bytes into one mbuf chain marked for TSO
 * (RTE_MBUF_F_TX_TCP_SEG, lengths, tso_segsz, the pseudo-header checksum
 * DPDK's TSO wants) and enqueues it. Returns 1 when queued, 0 when dropped
 * (counted in b->no_mbuf or b->ring_full), -E2BIG when the chain would have
 * more segments than the app takes: the caller then splits the frame. */
int kb_in_put_tso(struct kb_in_burst *b, uint8_t *data, uint32_t len,
		  const struct kb_tso *t);

unsigned int kb_ring_count(const struct rte_ring *r);

/* Record what the burst holds in rec (shared memory, kbridge_held) from now
 * on. 0, or -EINVAL when the burst is larger than a record. */
int kb_out_set_held(struct kb_out_burst *b, struct kbridge_held_q *rec);
int kb_in_set_held(struct kb_in_burst *b, struct kbridge_held_q *rec);

/* Test hook (KBRIDGE_TEST_HOLD): the next non-empty burst of a direction
 * whose bit is set (KB_TEST_HOLD_OUT: after dequeue; KB_TEST_HOLD_IN:
 * after allocation, before enqueue) is held for up to 60 s, once, after a
 * line on stderr says so. */
#define KB_TEST_HOLD_OUT 0x1
#define KB_TEST_HOLD_IN 0x2
extern volatile int kb_test_hold;

#endif

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst.h: kbridge's one app-side core. Both DPDK app sides (ring mode over
 * the app's rte_rings, mode vhost over librte_vhost's vrings) move packets
 * through these burst buffers, each burst inside one cgo call: the buffers'
 * lifecycle, the describe loop (an mbuf chain into iovecs and per-packet
 * metadata), copy-in (kernel frames into fresh mbuf chains) and the TSO
 * chain builder. What differs between the modes is what a burst is dequeued
 * from and enqueued to (struct kb_burst_ops, written by each mode's C),
 * where the mbufs come from and go back to (struct kb_src, burst_mbufsrc.c), the
 * held record of ring mode's crash recovery and residence timing (set when
 * a buffer is made), and the KB_BURST_* flags.
 */
#ifndef KB_BURST_H
#define KB_BURST_H

#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "kbridge_classify.h"
#include "kbridge_owner.h"
#include "burst_policer.h"
#include "burst_sockview.h"

/* A record, in memory the app shares, of the mbufs a buffer holds between
 * two ring operations (kbridge.h's struct kbridge_held_q): m[0..*n), room for
 * at least cap. A record never names an mbuf that was freed or handed over:
 * n is cleared first. n == NULL: no record. pend, when set, is the record's
 * word for the ring operation under way (dequeue_held, enqueue_held, the
 * fresh and spent rings' kb_fresh_take_held and kb_spent_put_held). dir is
 * the direction the test hook holds it in (KB_TEST_HOLD_OUT or _IN). */
struct kb_held {
	volatile uint32_t *n;
	struct rte_mbuf **m;
	volatile uint32_t *pend;
	int dir;
};

/* Where a buffer's mbufs come from and where those it is done with go
 * (burst_mbufsrc.c): the burst core takes and gives them back only here.
 * pool set: allocated from and freed to that mempool through this
 * process's handlers (mode vhost's own pool; ring mode with an app of
 * kbridge.h version 6 or older, whose pool's handler attach checked).
 * pool NULL: the app's fresh and spent rings (ring mode, version 7): taken
 * off fresh, which the app fills; put on spent, which the app frees; no
 * handler of the app's pool is ever called. */
struct kb_src {
	struct rte_mempool *pool;
	struct rte_ring *fresh, *spent;
	/* The control block's count of the times spent had no room for what a
	 * buffer was done with (kbridge_queue_mbufs.spent_waits), or NULL. */
	volatile uint64_t *spent_waits;
};

/* Where bursts go, for one mode; ctx is the buffer's (a ring, a queue). */
struct kb_burst_ops {
	/* Takes up to n mbufs the app sent into m; returns how many. */
	uint16_t (*dequeue)(void *ctx, struct rte_mbuf **m, uint16_t n);
	/* Hands m[0..n) to the app; returns how many reached it. The rest,
	 * m[sent..n), stay the caller's (all of them with copies set). */
	uint16_t (*enqueue)(void *ctx, struct rte_mbuf **m, uint16_t n);
	/* Whether the app takes a TCP super-frame of that IP version now;
	 * NULL: as far as the buffer's max_segs allows. */
	int (*takes_tso)(void *ctx, int ipv6);
	/* Optional, for a buffer with a held record (ring mode): dequeue and
	 * enqueue that keep the record themselves, around the ring operation,
	 * so that a takeover can tell what a process killed inside it had
	 * claimed or published (rec->pend). dequeue_held records what it
	 * took (kb_held_set); enqueue_held hands over exactly what rec names,
	 * m[0..n) being those mbufs in that order, and clears the record; what
	 * it could not hand over, m[sent..n), stays the caller's. */
	uint16_t (*dequeue_held)(void *ctx, struct kb_held *rec, struct rte_mbuf **m,
				 uint16_t n);
	uint16_t (*enqueue_held)(void *ctx, struct kb_held *rec, struct rte_mbuf **m,
				 uint16_t n);
	/* Optional: the room the app's side has now (ring slots, vring
	 * buffers) and, in *reserve, how much of it is kept for control and
	 * neighbour frames (KBRIDGE_RESERVE of its size). NULL: no reserve. */
	unsigned int (*room)(void *ctx, unsigned int *reserve);
	/* The enqueue copies the mbufs (into a guest's buffers): every one
	 * stays the caller's, sent or not. */
	int copies;
};

/* Flags of an out buffer. */
#define KB_BURST_EXTBUF 0x1        /* external buffers are the dequeuer's own
				    * and valid for as long as the mbuf */
#define KB_BURST_COMPLETE_CSUM 0x2 /* complete partial checksums
				    * (RX_L4_CKSUM_NONE) in software */

/* Residence-time histogram: bucket i counts packets that stayed less than
 * 2^(i+KB_HIST_SHIFT) ns between the app's enqueue and the TAP write; the
 * last bucket takes everything longer. */
#define KB_HIST_BUCKETS 24
#define KB_HIST_SHIFT 8

/* Why a packet cannot be written whole. Go counts and drops it. */
enum kb_pkt_verdict {
	KB_PKT_OK = 0,
	KB_PKT_TOO_MANY_SEGS = 1, /* more segments than the iovec budget */
	KB_PKT_MALFORMED = 2,     /* pkt_len disagrees with the segment chain, a
				   * segment overruns its buffer, or it has an
				   * external buffer kbridge cannot vouch for */
};

/* What the app's NIC (or the core) did for a packet (struct kb_pkt.offload). */
#define KB_PKT_L4_CSUM_GOOD 0x1 /* RTE_MBUF_F_RX_L4_CKSUM_GOOD, or completed */
#define KB_PKT_LRO 0x2          /* RTE_MBUF_F_RX_LRO: tso_segsz is valid */
#define KB_PKT_CSUM_CHECKED 0x4 /* the core checked its IPv4 header and TCP
				 * checksums (kb_tcp_csum_good): both right */

/* One packet of an out burst. Its segments are
 * iov[first_seg .. first_seg+nb_iov). */
struct kb_pkt {
	uint32_t pkt_len;
	uint16_t nb_iov;
	uint16_t first_seg;
	uint8_t verdict;
	uint8_t written; /* set by Go: counts toward residence time */
	uint8_t offload; /* KB_PKT_L4_CSUM_GOOD, KB_PKT_LRO, KB_PKT_CSUM_CHECKED */
	uint8_t pad;
	uint16_t tso_segsz;
	uint16_t pad2;
	uint64_t enq_tsc;
};

/* Control-plane protection of an out buffer: the management match and each
 * class's rates; on == 0 turns it off. */
struct kb_copp {
	struct kbridge_class_match match;
	struct kb_rate rate[KBRIDGE_CLASSES];
	uint8_t on;
};

/* What an out buffer's classifier and policers did; policed_at: when (ns,
 * CLOCK_MONOTONIC) each class's policer last refused a frame, 0 never.
 * Unwanted frames are classed so by the view of the host's sockets
 * (burst_sockview.h), read once per burst. */
struct kb_copp_stats {
	uint64_t passed[KBRIDGE_CLASSES];
	uint64_t policed[KBRIDGE_CLASSES];
	uint64_t why[KBRIDGE_HDR_WHYS];
	uint64_t policed_at[KBRIDGE_CLASSES];
	uint64_t unwanted[KB_SV_WHYS]; /* frames classed unwanted, by reason */
};

/* A reusable burst buffer for one worker in the app -> kernel direction. */
struct kb_out {
	const struct kb_burst_ops *ops;
	void *ctx;
	int32_t tsc_offset; /* the enqueue TSC's dynamic field, or -1 */
	uint16_t cap;       /* packets per burst */
	uint16_t max_segs;  /* iovecs per packet */
	uint16_t n;         /* packets in the current burst */
	uint16_t flags;     /* KB_BURST_* */
	uint64_t tsc_hz;
	struct rte_mbuf **mbufs;
	struct kb_pkt *pkts;
	struct iovec *iov;
	uint64_t hist[KB_HIST_BUCKETS];
	uint64_t csum_sw; /* partial checksums completed (KB_BURST_COMPLETE_CSUM) */
	struct kb_held held;
	/* CoPP: what kb_out_set_copp handed over, taken at the next burst;
	 * what is in force, its policers and counters; the mbufs of the
	 * current burst it freed, and how many (they are work too). */
	struct kb_copp *copp_next;
	struct kb_copp copp;
	struct kb_policer pol[KBRIDGE_CLASSES];
	struct kb_copp_stats copp_stats;
	struct rte_mbuf **policed;
	uint16_t last_policed;
	struct kb_src src;
	/* The held record names mbufs the spent ring had no room for: they
	 * go before the next burst is taken (ring mode, version 7). */
	uint8_t pending;
	/* A record of the buffer's own, for a rings source given none (no
	 * claim, as tests run): what it holds, not what a takeover finds. */
	struct kbridge_held_q *own;
};

/* A TCP super-frame: header lengths, segment size, IP version. */
struct kb_tso {
	uint16_t l2, l3, l4, mss;
	uint8_t ipv6;
	uint8_t pad[3];
};

/* The longest frame an in buffer is handed (kb_in_put_tso's super-frame,
 * read whole into one of Go's buffers): limits.FrameBuffer. */
#define KB_IN_FRAME_MAX (1u << 16)

/* A reusable burst buffer for the kernel -> app direction: frames read from
 * the TAP device, packed at `stride` bytes apart in `buf`. */
struct kb_in {
	const struct kb_burst_ops *ops;
	void *ctx;
	struct kb_src src;
	uint8_t *buf;
	uint32_t *lens;
	/* Per slot, a partial checksum the kernel left (NEEDS_CSUM) that
	 * kb_in_put finishes: csum_start << 16 | csum_offset; 0: none. */
	uint32_t *csum;
	uint32_t stride;
	uint32_t room; /* data room of one mbuf, after its headroom */
	uint16_t cap;
	uint16_t n;
	uint16_t max_segs; /* the most segments of a TSO chain; 0: no limit */
	uint16_t pad;
	struct rte_mbuf **mbufs; /* scratch: cap heads for the enqueue */
	/* Results of the last kb_in_put or kb_in_put_tso. */
	uint16_t queued;
	uint16_t no_mbuf;
	uint16_t ring_full;
	uint16_t pad2;
	struct kb_tso tso; /* the frame kb_in_put_tso queues */
	struct kb_held held;
	/* The control plane's reserve (ops->room), kept while reserve_on:
	 * frames queued into it, and frames the room refused by class (the
	 * management class counts as default: no match here), which are
	 * counted in ring_full too. */
	uint8_t reserve_on;
	uint16_t kept; /* frames of the last kb_in_put the room kept, moved to
			* the front (lens[] too) */
	uint64_t reserved;
	uint64_t room_dropped[KBRIDGE_CLASSES];
	/* Scratch: one chain's segments, as many as the longest frame (a
	 * slot of stride bytes, or a TCP super-frame of up to KB_IN_FRAME_MAX)
	 * takes of room-byte mbufs. */
	struct rte_mbuf **segs;
	uint32_t max_chain;
	/* As kb_out's: the held record names mbufs for the spent ring, and
	 * the buffer's own record. */
	uint8_t pending;
	struct kbridge_held_q *own;
};

/* A buffer made as cfg says (ops, ctx, cap, max_segs, flags, tsc_offset,
 * tsc_hz, held, src), or NULL when out of memory. A rings source keeps
 * what it holds on a record (its own, when given none): what the record
 * names already (a takeover's leftovers) goes to the spent ring first. */
struct kb_out *kb_out_new(const struct kb_out *cfg);
/* Releases the previous burst (recording residence times of the packets Go
 * wrote) and dequeues and describes the next one. Returns its size. */
uint16_t kb_out_next(struct kb_out *b);
/* Releases the current burst and the buffer itself. */
void kb_out_free(struct kb_out *b);
/* Hands c to the buffer's worker, which puts it in force, with full
 * buckets, at its next burst: any goroutine may call it while the worker
 * runs. -ENOMEM: nothing changed. */
int kb_out_set_copp(struct kb_out *b, const struct kb_copp *c);

/* A buffer made as cfg says (ops, ctx, src, room, cap, stride, max_segs,
 * held), or NULL when out of memory; as kb_out_new for a rings source. */
struct kb_in *kb_in_new(const struct kb_in *cfg);
/* Copies b->n frames into mbufs (chained when larger than one mbuf) and
 * enqueues them; what cannot be queued is given back and counted. */
void kb_in_put(struct kb_in *b);
/* Copies one TCP super-frame of len bytes, described by b->tso, into one
 * mbuf chain marked for TSO (RTE_MBUF_F_TX_TCP_SEG, lengths, tso_segsz, the
 * pseudo-header checksum DPDK's TSO and librte_vhost's GSO header want) and
 * enqueues it. Returns 1 when queued, 0 when dropped (counted in b->no_mbuf
 * or b->ring_full), -E2BIG when the app does not take it (the chain would
 * have more segments than max_segs, or takes_tso says no): the caller then
 * splits the frame. */
int kb_in_put_tso(struct kb_in *b, uint8_t *data, uint32_t len);
void kb_in_free(struct kb_in *b);
/* How many of n frames, all of data[0..len)'s class, the app's side has room
 * for under the control plane's reserve (all of them while it is off); the
 * rest are counted as kb_in_put counts the frames the room refuses. */
unsigned int kb_in_admit_n(struct kb_in *b, const uint8_t *data, uint32_t len,
			   unsigned int n);
/* Puts what the record names, a takeover's leftovers, on the spent ring
 * before the record takes anything else: 1 once it did (or had nothing),
 * 0 while the ring has no room. */
int kb_in_flush(struct kb_in *b);
/* Hands b->mbufs[0..k), which the held record names in that order, to the
 * app: b->queued is set to how many it took, the rest counted in
 * b->ring_full. */
void kb_in_hand_over(struct kb_in *b, uint16_t k);

/* The test hook (ring/testhook.go, built with the kbridge_testhook tag
 * only; KBRIDGE_TEST_HOLD): the next non-empty burst of a direction whose
 * bit is set, in a buffer with a held record (KB_TEST_HOLD_OUT: after
 * dequeue; KB_TEST_HOLD_IN: after allocation, before enqueue), is held for
 * up to 60 s, once, after a line on stderr says so. A product build has
 * neither the variable nor the branches. */
#define KB_TEST_HOLD_OUT 0x1
#define KB_TEST_HOLD_IN 0x2
#ifdef KB_RING_TESTHOOK
extern volatile int kb_test_hold;
void kb_test_hold_now(int dir, uint32_t n);
#endif

/* Records that the buffer holds rec->m[0..n), already written there. */
static inline void
kb_held_set(struct kb_held *rec, uint16_t n)
{
	if (rec->n == NULL || n == 0)
		return;
	__atomic_store_n(rec->n, n, __ATOMIC_RELEASE);
#ifdef KB_RING_TESTHOOK
	if (unlikely(kb_test_hold & KB_TEST_HOLD_OUT & rec->dir))
		kb_test_hold_now(KB_TEST_HOLD_OUT, n);
#endif
}

/* Records that the buffer holds m[0..n): pointers first, then n. */
static inline void
kb_held_note(struct kb_held *rec, struct rte_mbuf *const *m, uint16_t n)
{
	if (rec->n == NULL || n == 0)
		return;
	memcpy(rec->m, m, (size_t)n * sizeof(*m));
	kb_held_set(rec, n);
}

/* Records one more mbuf, m, as the k-th held (k counts from 1). */
static inline void
kb_held_add(struct kb_held *rec, uint16_t k, struct rte_mbuf *m)
{
	if (rec->n == NULL)
		return;
	rec->m[k - 1] = m;
	__atomic_store_n(rec->n, k, __ATOMIC_RELEASE);
}

/* Forgets the record before its mbufs are freed or handed over. */
static inline void
kb_held_clear(struct kb_held *rec)
{
	if (rec->n == NULL)
		return;
#ifdef KB_RING_TESTHOOK
	if (unlikely(kb_test_hold & KB_TEST_HOLD_IN & rec->dir) && *rec->n > 0)
		kb_test_hold_now(KB_TEST_HOLD_IN, *rec->n);
#endif
	__atomic_store_n(rec->n, 0, __ATOMIC_RELEASE);
}

/* ---- The mbuf source (burst_mbufsrc.c) ---- */

/* The bytes one mbuf of a pktmbuf pool holds after its headroom (its
 * private data: no handler is called). */
unsigned int kb_pool_data_room(struct rte_mempool *mp);

/* How many mbufs kb_src_take gives now at the least: the fresh ring's
 * count (kbridge alone takes from it, so it only grows until kbridge
 * does), or UINT_MAX for a pool, whose allocation decides. */
unsigned int kb_src_avail(const struct kb_src *s);
/* Takes up to n mbufs, reset as an alloc leaves them, into m and, when rec
 * is a record, records them there (m[0..got) named in that order); returns
 * got. A pool: n in bulk, else one at a time while it gives. Rings:
 * min(n, the fresh ring's count). */
uint16_t kb_src_take(const struct kb_src *s, struct kb_held *rec, struct rte_mbuf **m,
		     uint16_t n);
/* Gives back a burst the record names: a pool frees m[0..n), the same
 * mbufs, once the record is cleared; rings put what the record names on
 * the spent ring, all of them or, when it has not the room, none (counted
 * in spent_waits; the record unchanged). Returns 1 when given back, 0 when
 * the caller still holds them and must try again. */
int kb_src_give_held(const struct kb_src *s, struct kb_held *rec, struct rte_mbuf **m,
		     uint16_t n);
/* Gives back m[0..n), on no record: freed, or put on the spent ring; what
 * the spent ring has no room for is lost (never freed twice). Only for
 * what a ring could not take, which the core keeps from happening with
 * the rings (kb_in cuts a burst to the room the app's ring has). Returns
 * how many were lost. */
unsigned int kb_src_give(const struct kb_src *s, struct rte_mbuf **m, uint16_t n);

/* Ring mode's fresh and spent rings under a held record (port_reconcile.c): the
 * take and the put of kb_src, bracketed by the record's pend word as the
 * burst rings' dequeue_held and enqueue_held are. kb_fresh_take_held takes
 * n (the ring has them) into rec->m and m; kb_spent_put_held puts what rec
 * names, all or none (1 or 0), and clears rec when it does. */
uint16_t kb_fresh_take_held(struct rte_ring *fresh, struct kb_held *rec, struct rte_mbuf **m,
			    uint16_t n);
int kb_spent_put_held(struct rte_ring *spent, struct kb_held *rec);

#endif

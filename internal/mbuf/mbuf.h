/* SPDX-License-Identifier: BSD-3-Clause
 *
 * mbuf.h: the per-packet mbuf work that kbridge's two DPDK app sides (ring/
 * over DPDK rings, vhost/ over librte_vhost) share, as static inline code
 * each side's one-call-per-burst C compiles in: walking a chain into iovecs
 * with its checks, and copying a frame into a fresh chain.
 */
#ifndef KB_MBUF_H
#define KB_MBUF_H

#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include <rte_mbuf.h>

/* Why a packet cannot be written whole. Go counts and drops it. */
enum kb_pkt_verdict {
	KB_PKT_OK = 0,
	KB_PKT_TOO_MANY_SEGS = 1, /* more segments than the iovec budget */
	KB_PKT_MALFORMED = 2,     /* pkt_len disagrees with the segment chain, a
				   * segment overruns its buffer, or it has an
				   * external buffer kbridge cannot vouch for */
};

/* Points iov[0..max_segs) at the segments of m and stores their number in
 * *nb. The walk is bounded by max_segs, so a cyclic chain ends as
 * TOO_MANY_SEGS instead of looping. */
static inline uint8_t
kb_mbuf_iov(struct rte_mbuf *m, struct iovec *iov, uint16_t max_segs,
	    int allow_extbuf, uint16_t *nb)
{
	uint32_t pkt_len = rte_pktmbuf_pkt_len(m), sum = 0;
	uint16_t k = 0;
	uint8_t verdict = KB_PKT_OK;

	for (; m != NULL; m = m->next) {
		if (k == max_segs) {
			verdict = KB_PKT_TOO_MANY_SEGS;
			break;
		}
		if ((!allow_extbuf && RTE_MBUF_HAS_EXTBUF(m)) ||
		    (uint32_t)m->data_off + m->data_len > m->buf_len) {
			verdict = KB_PKT_MALFORMED;
			break;
		}
		iov[k].iov_base = rte_pktmbuf_mtod(m, void *);
		iov[k].iov_len = m->data_len;
		sum += m->data_len;
		k++;
	}
	if (verdict == KB_PKT_OK && sum != pkt_len)
		verdict = KB_PKT_MALFORMED;
	*nb = k;
	return verdict;
}

/* Copies one frame into a fresh mbuf chain from pool; NULL when the pool
 * runs dry (what was taken is freed). */
static inline struct rte_mbuf *
kb_mbuf_copy(struct rte_mempool *pool, const uint8_t *data, uint32_t len)
{
	struct rte_mbuf *head = NULL, *tail = NULL;
	uint32_t off = 0;

	do {
		struct rte_mbuf *m = rte_pktmbuf_alloc(pool);
		uint32_t room, chunk;

		if (m == NULL) {
			rte_pktmbuf_free(head);
			return NULL;
		}
		room = rte_pktmbuf_tailroom(m);
		chunk = len - off < room ? len - off : room;
		memcpy(rte_pktmbuf_mtod(m, void *), data + off, chunk);
		m->data_len = (uint16_t)chunk;
		off += chunk;
		if (head == NULL) {
			head = m;
		} else {
			tail->next = m;
			head->nb_segs++;
		}
		tail = m;
	} while (off < len);
	head->pkt_len = len;
	return head;
}

#endif

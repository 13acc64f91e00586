/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge_requests.h: the kernel interface's requests to the app (the
 * mailbox in the control block), both sides of it, and what the app's port
 * accepted. Part of kbridge.h, which applications include.
 */
#ifndef KBRIDGE_REQUESTS_H
#define KBRIDGE_REQUESTS_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <rte_atomic.h>

#include "kbridge_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Requests (version 5): what an administrator does to the kernel interface
 * (ip link set kb0 mtu|up|down|address|promisc|allmulticast) reaches the app
 * as a request, as KNI's rte_kni_ops callbacks did, but without a kernel
 * thread or rtnl held anywhere: kbridge posts one request at a time in the
 * control block; the app takes it off its control path with
 * kbridge_port_poll_request(), applies it to its ethdev and answers with
 * kbridge_port_reply(). kbridge keeps an accepted change and sets a refused
 * or unanswered one back. Request types, and their bits in the mask the app
 * passes to kbridge_port_serve_requests():
 */
#define KBRIDGE_REQ_MTU 1u      /* value: the new MTU (rte_eth_dev_set_mtu) */
#define KBRIDGE_REQ_LINK 2u     /* value: 1 up, 0 down (rte_eth_dev_set_link_up/down) */
#define KBRIDGE_REQ_MAC 3u      /* mac: the new address (rte_eth_dev_default_mac_addr_set) */
#define KBRIDGE_REQ_PROMISC 4u  /* value: 1 on, 0 off (rte_eth_promiscuous_enable/disable) */
#define KBRIDGE_REQ_ALLMULTI 5u /* value: 1 on, 0 off (rte_eth_allmulticast_enable/disable) */
#define KBRIDGE_REQ_BIT(t) (1u << (t))
#define KBRIDGE_REQ_ALL                                                             \
	(KBRIDGE_REQ_BIT(KBRIDGE_REQ_MTU) | KBRIDGE_REQ_BIT(KBRIDGE_REQ_LINK) |     \
	 KBRIDGE_REQ_BIT(KBRIDGE_REQ_MAC) | KBRIDGE_REQ_BIT(KBRIDGE_REQ_PROMISC) | \
	 KBRIDGE_REQ_BIT(KBRIDGE_REQ_ALLMULTI))

/* kbridge_ctl.accepted: which values it records, and the values. */
#define KBRIDGE_ACCEPTED_MAC (1ull << 48)      /* the MAC in bits 0-47, first byte highest */
#define KBRIDGE_ACCEPTED_LINK (1ull << 49)     /* admin state recorded: ..._UP */
#define KBRIDGE_ACCEPTED_UP (1ull << 50)
#define KBRIDGE_ACCEPTED_PROMISC (1ull << 51)  /* promiscuous recorded: ..._PROMISC_ON */
#define KBRIDGE_ACCEPTED_PROMISC_ON (1ull << 52)
#define KBRIDGE_ACCEPTED_ALLMULTI (1ull << 53) /* all-multicast recorded: ..._ALLMULTI_ON */
#define KBRIDGE_ACCEPTED_ALLMULTI_ON (1ull << 54)

/*
 * Declare which requests the app serves (KBRIDGE_REQ_BIT(KBRIDGE_REQ_MTU) |
 * ..., or KBRIDGE_REQ_ALL) and the largest MTU its port takes (0: no limit
 * of its own; kbridge still holds the MTU to what its mbufs hold). Call it
 * before kbridge starts, then call kbridge_port_poll_request() from the
 * control path. An app that never calls it keeps the kernel interface as
 * kbridge's configuration says: kbridge sets every change back.
 */
static inline void
kbridge_port_serve_requests(struct kbridge_port *p, uint32_t types, uint32_t max_mtu)
{
	p->ctl->app_max_mtu = max_mtu;
	__atomic_store_n(&p->ctl->app_requests, types & KBRIDGE_REQ_ALL, __ATOMIC_RELEASE);
}

/*
 * kbridge's side of the mailbox, here so that both sides of the protocol
 * have one home (kbridge calls these; an app never does). Posts a request
 * and returns its seq: req_seq odd while req is written, then even. A
 * kbridge killed while posting left it odd: the next post starts past it.
 */
static inline uint32_t
kbridge_req_post_(struct kbridge_ctl *c, uint32_t type, uint32_t value, const uint8_t mac[6])
{
	uint32_t seq = __atomic_load_n(&c->req_seq, __ATOMIC_RELAXED);

	seq = (seq & 1u) ? seq + 2u : seq + 1u; /* odd: being written */
	__atomic_store_n(&c->req_seq, seq, __ATOMIC_RELAXED);
	rte_atomic_thread_fence(__ATOMIC_RELEASE);
	c->req.type = type;
	c->req.value = value;
	memcpy(c->req.mac, mac, sizeof(c->req.mac));
	c->req.seq = seq + 1u;
	__atomic_store_n(&c->req_seq, seq + 1u, __ATOMIC_RELEASE);
	return seq + 1u;
}

/* 1 and *result once the app answered request seq, else 0. */
static inline int
kbridge_req_answer_(const struct kbridge_ctl *c, uint32_t seq, int32_t *result)
{
	uint64_t a = __atomic_load_n(&c->req_answer, __ATOMIC_ACQUIRE);

	if ((uint32_t)a != seq)
		return 0;
	*result = (int32_t)(uint32_t)(a >> 32);
	return 1;
}

/* Withdraws a request no one answered (a kbridge that took the port over
 * from a killed one, whose kb0 went with it): req_seq odd, so the app
 * never takes it. The next post starts past it. */
static inline void
kbridge_req_withdraw_(struct kbridge_ctl *c)
{
	uint32_t seq = __atomic_load_n(&c->req_seq, __ATOMIC_ACQUIRE);

	if ((seq & 1u) == 0 && seq != (uint32_t)__atomic_load_n(&c->req_answer, __ATOMIC_ACQUIRE))
		__atomic_store_n(&c->req_seq, seq + 1u, __ATOMIC_RELEASE);
}

/*
 * Answers the request kbridge_port_poll_request() returned: 0 when it was
 * applied, -errno when the port refused it (rte_eth_dev_set_mtu's answer,
 * say). kbridge logs a refusal with the errno and sets the kernel interface
 * back. An answer to a request kbridge no longer waits for is ignored.
 */
static inline void
kbridge_port_reply(struct kbridge_port *p, const struct kbridge_request *req, int result)
{
	struct kbridge_ctl *c = p->ctl;

	if (__atomic_load_n(&c->req_seq, __ATOMIC_ACQUIRE) != req->seq)
		return; /* kbridge gave up on it and may be posting another */
	__atomic_store_n(&c->req_answer, (uint64_t)(uint32_t)result << 32 | req->seq, __ATOMIC_RELEASE);
}

/*
 * Takes the request kbridge posted, if one waits: returns 1 and fills *req,
 * else 0. Lock-free and without a system call: call it from the app's
 * control path (a timer, a control thread, its main loop between bursts),
 * say every few milliseconds, never holding a lock the lcores need. Apply
 * the request to the port, then answer it with kbridge_port_reply(). A
 * request stays posted until it is answered or kbridge replaces it: when
 * no answer came in time kbridge sets the kernel interface back and posts
 * the old value in its place, so an app that polls late applies that one;
 * kbridge, and a kbridge that takes the port over, posts nothing else until
 * that one is answered.
 * Many PMDs want the port stopped for an MTU change: stop the lcores'
 * use of the port first, as for any ethdev reconfiguration.
 */
static inline int
kbridge_port_poll_request(struct kbridge_port *p, struct kbridge_request *req)
{
	struct kbridge_ctl *c = p->ctl;
	uint32_t s1, s2;

	s1 = __atomic_load_n(&c->req_seq, __ATOMIC_ACQUIRE);
	if ((s1 & 1) != 0 || s1 == (uint32_t)__atomic_load_n(&c->req_answer, __ATOMIC_ACQUIRE))
		return 0;
	memcpy(req, (const void *)&c->req, sizeof(*req));
	rte_atomic_thread_fence(__ATOMIC_ACQUIRE);
	s2 = __atomic_load_n(&c->req_seq, __ATOMIC_RELAXED);
	if (s1 != s2)
		return 0; /* kbridge is posting the next one: take it next time */
	req->seq = s1;
	if (req->type < KBRIDGE_REQ_MTU || req->type > KBRIDGE_REQ_ALLMULTI) {
		/* A type this header does not know (a newer kbridge's): refused
		 * here, so that an app never sees what it cannot apply. */
		kbridge_port_reply(p, req, -ENOTSUP);
		return 0;
	}
	return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* KBRIDGE_REQUESTS_H */

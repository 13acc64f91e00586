/* SPDX-License-Identifier: BSD-3-Clause
 *
 * rte_kni.h: KNI's API (DPDK 22.11's librte_kni) on kbridge, so that an
 * application written for KNI builds and runs unchanged on a DPDK without
 * KNI (23.11 and later, or a 22.11 built without it). Header-only, over
 * kbridge.h and kbridge_child.h: no kernel module, nothing to link but
 * DPDK. What each call does here and where it differs from KNI:
 * docs/KNI.md.
 *
 * A KNI is a kbridge port of one queue pair (kbridge_port_create()), and
 * one kbridge serves every KNI of the app: the first rte_kni_alloc()
 * starts it as a child process (kbridge_child.h, discover: true) unless
 * $KBRIDGE_KNI_SPAWN is 0, when a kbridge started by someone else
 * (systemd's kbridge@NAME) must come and take the ports. Either way the
 * kernel interface exists when rte_kni_alloc() returns; later allocs and
 * releases only make or free a port and wait for kbridge's word
 * (milliseconds). The child lives until rte_kni_close() or the app's exit.
 *
 * rte_kni_compat.h gives back what DPDK removed beside KNI and KNI
 * applications call (rte_ctrl_thread_create() on DPDK 23.11 and later).
 *
 * librte_kni (librte_kni/rte_kni.c) is these same bodies compiled once as
 * exported functions, for what links -lrte_kni or looks the functions up by
 * name instead of including this header (docs/KNI.md, librte_kni).
 *
 * Threads, as with KNI: one lcore calls rte_kni_tx_burst() for a KNI (the
 * to_kernel ring has one producer), one calls rte_kni_rx_burst() (one
 * consumer); they may be two lcores. rte_kni_handle_request() runs the
 * ops' callbacks in the thread that calls it. rte_kni_alloc() and
 * rte_kni_release() are thread safe.
 */
#ifndef _RTE_KNI_H_
#define _RTE_KNI_H_

#include <pthread.h>

#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_pci.h>

#include <rte_kni_common.h>
#include <rte_kni_compat.h>
#include <kbridge.h>
#include <kbridge_child.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rte_mbuf;
struct rte_mempool;

/*
 * How KNI's functions are defined: inline in the app that includes this
 * header; exported definitions where librte_kni/rte_kni.c includes it
 * (RTE_KNI_API set). With RTE_KNI_LIBRARY (librte_kni.pc's Cflags) the app
 * calls librte_kni's instead, declared at the end: then every part of a
 * process (libmoon's C and its Lua FFI) shares librte_kni's KNIs. The
 * bodies are then compiled under other names, and unused.
 */
#if defined(RTE_KNI_API)
#define RTE_KNI_DECLARE_
#define RTE_KNI_EAL_CHECK_
#elif defined(RTE_KNI_LIBRARY)
#define RTE_KNI_DECLARE_
#define RTE_KNI_API static inline
#define rte_kni_init rte_kni_init_inline_
#define rte_kni_alloc rte_kni_alloc_inline_
#define rte_kni_release rte_kni_release_inline_
#define rte_kni_tx_burst rte_kni_tx_burst_inline_
#define rte_kni_rx_burst rte_kni_rx_burst_inline_
#define rte_kni_handle_request rte_kni_handle_request_inline_
#define rte_kni_get rte_kni_get_inline_
#define rte_kni_get_name rte_kni_get_name_inline_
#define rte_kni_register_handlers rte_kni_register_handlers_inline_
#define rte_kni_unregister_handlers rte_kni_unregister_handlers_inline_
#define rte_kni_update_link rte_kni_update_link_inline_
#define rte_kni_close rte_kni_close_inline_
#else
#define RTE_KNI_API static inline
#endif

/* The callbacks for what is done to the kernel interface. Each runs in the
 * thread that calls rte_kni_handle_request() and returns 0, or -errno to
 * refuse: kbridge then sets the interface back. */
struct rte_kni_ops {
	uint16_t port_id; /* passed to each callback */

	int (*change_mtu)(uint16_t port_id, unsigned int new_mtu);
	int (*config_network_if)(uint16_t port_id, uint8_t if_up);
	int (*config_mac_address)(uint16_t port_id, uint8_t mac_addr[]);
	int (*config_promiscusity)(uint16_t port_id, uint8_t to_on);
	int (*config_allmulticast)(uint16_t port_id, uint8_t to_on);
};

/* The interface rte_kni_alloc() makes, laid out as KNI's. */
struct rte_kni_conf {
	char name[RTE_KNI_NAMESIZE]; /* the interface's and the kbridge port's name */
	uint32_t core_id;            /* no effect: kbridge's worker CPUs are its workers.cpus */
	uint16_t group_id;           /* no effect */
	unsigned mbuf_size;          /* no effect: the pool's mbufs are what kbridge fills */
	struct rte_pci_addr addr;    /* deprecated in KNI; no effect */
	struct rte_pci_id id;        /* deprecated in KNI; no effect */

	__extension__
	uint8_t force_bind : 1;                /* no effect */
	uint8_t mac_addr[RTE_ETHER_ADDR_LEN]; /* the interface's MAC; all zero: random */
	uint16_t mtu;                         /* the interface's MTU; 0: 1500 */
	uint16_t min_mtu;                     /* no effect: kbridge's lower bound, 68, applies */
	uint16_t max_mtu;                     /* the largest MTU change passed on; 0: no limit of its own */
};

/* How long rte_kni_alloc() waits for kbridge: $KBRIDGE_KNI_WAIT_MS, else this. */
#define RTE_KNI_KBRIDGE_WAIT_MS 30000
/* Ring entries per direction: KNI's FIFO size. */
#define RTE_KNI_RING_SIZE 1024
/* The MTU of a KNI whose conf->mtu is 0, as KNI's. */
#define RTE_KNI_DEFAULT_MTU 1500

/* A KNI: the port and the callbacks. */
struct rte_kni {
	char name[RTE_KNI_NAMESIZE];
	struct kbridge_port *port;
	struct rte_kni_ops ops;
	unsigned int mtu; /* the interface's MTU as the app last took it */
	int ready;        /* rte_kni_alloc() returned it */
};

/* The KNIs of this process, for rte_kni_get(), in slots that grow (no
 * bound but memory), and the app's one kbridge; weak, as kbridge.h's ports
 * registry, so that every translation unit shares them, and exported by
 * librte_kni.so as that registry is (kbridge_wakeup.h), under names that
 * carry the header's version as struct rte_kni changes with it. */
#define rte_kni_registry_ KBRIDGE_REGISTRY_NAME_(rte_kni_registry_v)
#define rte_kni_registry_len_ KBRIDGE_REGISTRY_NAME_(rte_kni_registry_len_v)
#define rte_kni_lock_ KBRIDGE_REGISTRY_NAME_(rte_kni_lock_v)
#define rte_kni_kbridge_ KBRIDGE_REGISTRY_NAME_(rte_kni_kbridge_v)
KBRIDGE_REGISTRY_ struct rte_kni **rte_kni_registry_;
KBRIDGE_REGISTRY_ unsigned int rte_kni_registry_len_;
KBRIDGE_REGISTRY_ pthread_mutex_t rte_kni_lock_ = PTHREAD_MUTEX_INITIALIZER;
KBRIDGE_REGISTRY_ int rte_kni_logtype_ = -1;
/* The kbridge rte_kni_alloc() started (pid 0: none runs, or one someone
 * else started serves the KNIs). Guarded by rte_kni_lock_. */
KBRIDGE_REGISTRY_ struct kbridge_child rte_kni_kbridge_;

/* KNI's log type, "lib.kni", registered once. */
static inline int
rte_kni_log_type_(void)
{
	int t = __atomic_load_n(&rte_kni_logtype_, __ATOMIC_ACQUIRE);

	if (t < 0) {
		t = rte_log_register_type_and_pick_level("lib.kni", RTE_LOG_INFO);
		if (t < 0)
			t = RTE_LOGTYPE_USER1;
		__atomic_store_n(&rte_kni_logtype_, t, __ATOMIC_RELEASE);
	}
	return t;
}

#define RTE_KNI_LOG_(level, ...) \
	rte_log(RTE_LOG_##level, rte_kni_log_type_(), "KNI: " __VA_ARGS__)

/*
 * Whether this copy of DPDK's EAL was initialised. librte_kni.so calls the
 * shared DPDK libraries it was linked with: an app linked with DPDK
 * statically that loads it (dlopen, LuaJIT's ffi.load, a stray -lrte_kni)
 * brings in a second EAL, never initialised, whose empty tables
 * rte_kni_alloc() would crash in: no lcore is no EAL. Said on stderr,
 * since that EAL's log is no one's. Checked in librte_kni only: inline,
 * the header calls the app's own EAL, as KNI did.
 */
static inline int
rte_kni_eal_ready_(const char *fn)
{
#ifdef RTE_KNI_EAL_CHECK_
	if (rte_lcore_count() > 0)
		return 1;
	fprintf(stderr,
		"KNI: %s: the DPDK this librte_kni calls was never initialised (rte_eal_init): a second DPDK in the process? An app linked with DPDK statically takes librte_kni.a, not librte_kni.so (docs/KNI.md, librte_kni)\n",
		fn);
	return 0;
#else
	(void)fn;
	return 1;
#endif
}

/*
 * KNI opened /dev/kni here. Nothing to open on kbridge: registers the log
 * type and returns 0 (librte_kni: -1 when its EAL was never initialised).
 * max_kni_ifaces has no effect: the KNIs of a process are bounded by its
 * memory only. rte_kni_alloc() works without it.
 */
RTE_KNI_API int
rte_kni_init(unsigned int max_kni_ifaces)
{
	if (!rte_kni_eal_ready_("rte_kni_init"))
		return -1;
	(void)max_kni_ifaces;
	(void)rte_kni_log_type_();
	return 0;
}

/* The KNI of that name, or NULL; the caller holds rte_kni_lock_. */
static inline struct rte_kni *
rte_kni_find_(const char *name)
{
	unsigned int i;

	for (i = 0; i < rte_kni_registry_len_; i++)
		if (rte_kni_registry_[i] != NULL &&
		    strncmp(rte_kni_registry_[i]->name, name, RTE_KNI_NAMESIZE) == 0)
			return rte_kni_registry_[i];
	return NULL;
}

/* Whether kni is in the registry; the caller holds rte_kni_lock_. */
static inline int
rte_kni_listed_(const struct rte_kni *kni)
{
	unsigned int i;

	for (i = 0; i < rte_kni_registry_len_; i++)
		if (rte_kni_registry_[i] == kni)
			return 1;
	return 0;
}

/* Puts kni in a free slot, growing the slots when none is: 0, or -ENOMEM.
 * The caller holds rte_kni_lock_. */
static inline int
rte_kni_list_(struct rte_kni *kni)
{
	struct rte_kni **grown;
	unsigned int i, len;

	for (i = 0; i < rte_kni_registry_len_; i++)
		if (rte_kni_registry_[i] == NULL) {
			rte_kni_registry_[i] = kni;
			return 0;
		}
	len = rte_kni_registry_len_ == 0 ? 16 : 2 * rte_kni_registry_len_;
	grown = (struct rte_kni **)realloc(rte_kni_registry_, len * sizeof(*grown));
	if (grown == NULL)
		return -ENOMEM;
	memset(grown + rte_kni_registry_len_, 0, (len - rte_kni_registry_len_) * sizeof(*grown));
	grown[rte_kni_registry_len_] = kni;
	rte_kni_registry_ = grown;
	rte_kni_registry_len_ = len;
	return 0;
}

/* Takes kni off the registry. */
static inline void
rte_kni_unlist_(const struct rte_kni *kni)
{
	unsigned int i;

	pthread_mutex_lock(&rte_kni_lock_);
	for (i = 0; i < rte_kni_registry_len_; i++)
		if (rte_kni_registry_[i] == kni)
			rte_kni_registry_[i] = NULL;
	pthread_mutex_unlock(&rte_kni_lock_);
}

/* $name as milliseconds, else def. */
static inline unsigned int
rte_kni_env_ms_(const char *name, unsigned int def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long n;

	if (v == NULL || *v == '\0')
		return def;
	n = strtoul(v, &end, 10);
	return *end == '\0' && n <= 3600000 ? (unsigned int)n : def;
}

/* Whether rte_kni_alloc() starts the app's kbridge ($KBRIDGE_KNI_SPAWN is
 * not 0). */
static inline int
rte_kni_spawns_(void)
{
	const char *spawn = getenv("KBRIDGE_KNI_SPAWN");

	return spawn == NULL || strcmp(spawn, "0") != 0;
}

/* The name of the app's kbridge: its instance (log, control socket
 * /run/kbridge/NAME/control.sock): the app's file prefix when that is a
 * name the kernel takes for an interface, else kni<pid>. */
static inline void
rte_kni_instance_(char *buf, size_t len)
{
	const char *rt = rte_eal_get_runtime_dir();
	const char *prefix = rt != NULL ? strrchr(rt, '/') : NULL;

	if (prefix != NULL && kbridge_child_ifname_(prefix + 1) && strcmp(prefix + 1, "kbridge") != 0)
		rte_strlcpy(buf, prefix + 1, len);
	else
		snprintf(buf, len, "kni%d", (int)getpid());
}

/* Starts the app's kbridge unless it runs: 0, or -errno with why. The
 * caller holds rte_kni_lock_. One that exited (killed, crashed) is started
 * again: it serves every KNI there is, taking them over from the one gone. */
static inline int
rte_kni_kbridge_up_(char *why, size_t whylen)
{
	struct kbridge_child_conf cc;
	char name[RTE_KNI_NAMESIZE];
	char gone[256] = "";

	if (rte_kni_kbridge_.pid > 0 && !kbridge_child_exited(&rte_kni_kbridge_, gone, sizeof(gone)))
		return 0;
	if (gone[0] != '\0')
		RTE_KNI_LOG_(WARNING, "the app's kbridge is gone (%s): starting it again\n", gone);
	rte_kni_instance_(name, sizeof(name));
	memset(&cc, 0, sizeof(cc));
	cc.ifname = name;
	cc.discover = 1;
	return kbridge_child_start(&rte_kni_kbridge_, &cc, why, whylen);
}

/* Waits up to ms for kbridge to serve kni's port: 0, or -errno with why
 * (kbridge refused the port, its child exited, the time ran out). */
static inline int
rte_kni_wait_served_(struct rte_kni *kni, unsigned int ms, char *why, size_t whylen)
{
	uint64_t end = rte_get_timer_cycles() + (uint64_t)ms * rte_get_timer_hz() / 1000;
	int ret;

	for (;;) {
		ret = kbridge_port_wait_served(kni->port, 5, why, whylen);
		if (ret != -ETIMEDOUT)
			return ret;
		pthread_mutex_lock(&rte_kni_lock_);
		ret = rte_kni_kbridge_.pid > 0 && kbridge_child_exited(&rte_kni_kbridge_, why, whylen);
		pthread_mutex_unlock(&rte_kni_lock_);
		if (ret)
			return -ECHILD;
		if (rte_get_timer_cycles() >= end) {
			snprintf(why, whylen, "no kbridge served the port within %u ms%s", ms,
				 rte_kni_spawns_() ? "" :
				 " (KBRIDGE_KNI_SPAWN=0: start kbridge@NAME, or one with discover: true, or unset it)");
			return -ETIMEDOUT;
		}
	}
}

/*
 * Makes kernel interface conf->name with conf->mac_addr (random if all
 * zero) and conf->mtu, down, as KNI did; it exists when the call returns.
 * Packets the kernel sends it are allocated from pktmbuf_pool. ops (may be
 * NULL, or fill only some callbacks) is copied. The first call starts the
 * app's kbridge (see the top); the later ones make the port and wait for
 * kbridge's word. Returns NULL on failure, the cause in the log: a bad
 * argument, the name taken (by a KNI of this process, or a kernel
 * interface: kbridge says), no kbridge binary, kbridge exiting, or kbridge
 * not serving the port within $KBRIDGE_KNI_WAIT_MS (default
 * RTE_KNI_KBRIDGE_WAIT_MS).
 */
RTE_KNI_API struct rte_kni *
rte_kni_alloc(struct rte_mempool *pktmbuf_pool, const struct rte_kni_conf *conf,
	      struct rte_kni_ops *ops)
{
	static const uint8_t zero[RTE_ETHER_ADDR_LEN] = {0};
	struct rte_kni *kni;
	char why[256] = "";
	int ret;

	if (!rte_kni_eal_ready_("rte_kni_alloc"))
		return NULL;
	if (pktmbuf_pool == NULL || conf == NULL || conf->name[0] == '\0' ||
	    strnlen(conf->name, RTE_KNI_NAMESIZE) >= RTE_KNI_NAMESIZE) {
		RTE_KNI_LOG_(ERR, "rte_kni_alloc: no mbuf pool, no configuration, or no name of at most %d characters\n",
			     RTE_KNI_NAMESIZE - 1);
		return NULL;
	}
	kni = (struct rte_kni *)rte_zmalloc("rte_kni", sizeof(*kni), 0);
	if (kni == NULL) {
		RTE_KNI_LOG_(ERR, "%.*s: out of memory\n", RTE_KNI_NAMESIZE, conf->name);
		return NULL;
	}
	rte_strlcpy(kni->name, conf->name, sizeof(kni->name));
	if (ops != NULL)
		memcpy(&kni->ops, ops, sizeof(kni->ops));
	else
		kni->ops.port_id = UINT16_MAX;
	kni->mtu = conf->mtu != 0 ? conf->mtu : RTE_KNI_DEFAULT_MTU;

	pthread_mutex_lock(&rte_kni_lock_);
	ret = rte_kni_find_(kni->name) != NULL ? -EEXIST : rte_kni_list_(kni);
	pthread_mutex_unlock(&rte_kni_lock_);
	if (ret < 0) { /* the slot holds the name while the rest is made */
		RTE_KNI_LOG_(ERR, "%s: %s\n", kni->name, ret == -EEXIST ? "KNI already exists" : "out of memory");
		rte_free(kni);
		return NULL;
	}
	if (!rte_kni_spawns_() && if_nametoindex(kni->name) != 0) {
		RTE_KNI_LOG_(ERR, "%s: a kernel interface of that name exists already (a kbridge left by a crash? kbridge cleanup --instance %s)\n",
			     kni->name, kni->name);
		goto fail;
	}
	/* What kbridge must know before it takes the port: made, told, then
	 * published. */
	kni->port = kbridge_port_prepare(kni->name, 1, RTE_KNI_RING_SIZE, pktmbuf_pool,
					 pktmbuf_pool->socket_id);
	if (kni->port == NULL) {
		RTE_KNI_LOG_(ERR, "%s: kbridge_port_create: %s\n", kni->name, rte_strerror(rte_errno));
		goto fail;
	}
	kbridge_port_serve_requests(kni->port, KBRIDGE_REQ_ALL, conf->max_mtu);
	if (memcmp(conf->mac_addr, zero, sizeof(zero)) != 0)
		kbridge_port_set_mac(kni->port, conf->mac_addr);
	kbridge_port_set_interface(kni->port, (uint16_t)kni->mtu, 0);
	if (rte_kni_spawns_()) {
		pthread_mutex_lock(&rte_kni_lock_);
		ret = rte_kni_kbridge_up_(why, sizeof(why));
		pthread_mutex_unlock(&rte_kni_lock_);
		if (ret < 0) {
			RTE_KNI_LOG_(ERR, "%s: cannot start kbridge: %s\n", kni->name, why);
			goto fail;
		}
	}
	kbridge_port_publish(kni->port);
	ret = rte_kni_wait_served_(kni, rte_kni_env_ms_("KBRIDGE_KNI_WAIT_MS", RTE_KNI_KBRIDGE_WAIT_MS),
				   why, sizeof(why));
	if (ret < 0) {
		RTE_KNI_LOG_(ERR, "%s: no kernel interface: %s\n", kni->name, why);
		goto fail;
	}
	pthread_mutex_lock(&rte_kni_lock_);
	kni->ready = 1;
	pthread_mutex_unlock(&rte_kni_lock_);
	RTE_KNI_LOG_(INFO, "%s: kernel interface ready, served by kbridge pid %d\n", kni->name,
		     (int)kbridge_port_owner_pid(kni->port));
	return kni;

fail:
	rte_kni_unlist_(kni);
	if (kni->port != NULL && kbridge_port_free(kni->port) < 0)
		RTE_KNI_LOG_(ERR, "%s: kbridge pid %d still serves the port\n", kni->name,
			     (int)kbridge_port_owner_pid(kni->port));
	rte_free(kni);
	return NULL;
}

/*
 * Removes the interface: frees the port (kbridge lets go of it at once,
 * freeing what it holds, and removes the interface in the background; a
 * KNI of the same name made meanwhile waits inside kbridge for it), the
 * mbufs in its rings with it. No lcore may use the KNI any more. The name
 * can be allocated again at once. 0, or -1 (an unknown KNI; a kbridge that
 * did not let go, named in the log: the KNI is then left as it is).
 */
RTE_KNI_API int
rte_kni_release(struct rte_kni *kni)
{
	int found;

	if (kni == NULL)
		return -1;
	pthread_mutex_lock(&rte_kni_lock_);
	found = rte_kni_listed_(kni);
	pthread_mutex_unlock(&rte_kni_lock_);
	if (!found)
		return -1;
	if (kbridge_port_free(kni->port) < 0) {
		RTE_KNI_LOG_(ERR, "%s: kbridge pid %d still serves the port: not released\n", kni->name,
			     (int)kbridge_port_owner_pid(kni->port));
		return -1;
	}
	kni->port = NULL;
	rte_kni_unlist_(kni);
	rte_free(kni);
	return 0;
}

/*
 * Hands up to num packets to the kernel. Returns how many it took: the
 * first ones, up to the room in the ring; the rest stay the caller's, as
 * with KNI (free or retry them). No system call, but the eventfd write
 * that wakes a parked kbridge worker.
 */
RTE_KNI_API unsigned
rte_kni_tx_burst(struct rte_kni *kni, struct rte_mbuf **mbufs, unsigned num)
{
	unsigned int room, reserve;

	if (kni == NULL || kni->port == NULL)
		return 0;
	/* One producer: the room only grows until the enqueue, so all of
	 * these fit above the control plane's reserve, and
	 * kbridge_to_kernel() frees none (KNI's caller keeps the rest). */
	room = rte_ring_free_count(kni->port->to_kernel[0]);
	reserve = KBRIDGE_RESERVE(rte_ring_get_capacity(kni->port->to_kernel[0]));
	room = room > reserve ? room - reserve : 0;
	if (num > room)
		num = room;
	if (num > UINT16_MAX)
		num = UINT16_MAX;
	return kbridge_to_kernel(kni->port, 0, mbufs, (uint16_t)num);
}

/* Takes up to num packets the kernel sent; the caller owns them. */
RTE_KNI_API unsigned
rte_kni_rx_burst(struct rte_kni *kni, struct rte_mbuf **mbufs, unsigned num)
{
	if (kni == NULL || kni->port == NULL)
		return 0;
	if (num > UINT16_MAX)
		num = UINT16_MAX;
	return kbridge_from_kernel(kni->port, 0, mbufs, (uint16_t)num);
}

/* What KNI did with a MAC, promiscuous or all-multicast request that had
 * no callback: apply it to ops.port_id's ethdev when that port is valid. */
static inline int
rte_kni_default_(const struct rte_kni *kni, const struct kbridge_request *r)
{
	uint16_t port = kni->ops.port_id;
	struct rte_ether_addr mac;
	int ret = -ENOTSUP;

	if (port == UINT16_MAX)
		return 0;
	if (!rte_eth_dev_is_valid_port(port)) {
		RTE_KNI_LOG_(ERR, "%s: invalid port id %u\n", kni->name, (unsigned int)port);
		return -EINVAL;
	}
	switch (r->type) {
	case KBRIDGE_REQ_MAC:
		memcpy(mac.addr_bytes, r->mac, RTE_ETHER_ADDR_LEN);
		ret = rte_eth_dev_default_mac_addr_set(port, &mac);
		break;
	case KBRIDGE_REQ_PROMISC:
		ret = r->value ? rte_eth_promiscuous_enable(port) : rte_eth_promiscuous_disable(port);
		break;
	case KBRIDGE_REQ_ALLMULTI:
		ret = r->value ? rte_eth_allmulticast_enable(port) : rte_eth_allmulticast_disable(port);
		break;
	}
	if (ret != 0)
		RTE_KNI_LOG_(ERR, "%s: request %u for port %u: %s\n", kni->name, r->type,
			     (unsigned int)port, rte_strerror(-ret));
	return ret;
}

/*
 * Serves the request kbridge posted for what was done to the interface
 * (ip link set NAME mtu|up|down|address|promisc|allmulticast), if one
 * waits: calls the ops' callback in this thread with ops.port_id and
 * answers kbridge with its return value (0 keeps the change; -errno, or a
 * positive errno, sets it back). Call it from the lcore loop or a control
 * thread every few milliseconds: kbridge sets back what is not answered
 * within its request timeout (requests.timeout, 3 s by default). 0, or -1
 * for a NULL kni.
 */
RTE_KNI_API int
rte_kni_handle_request(struct rte_kni *kni)
{
	const struct rte_kni_ops *o;
	struct kbridge_request r;
	int ret = 0;

	if (kni == NULL || kni->port == NULL)
		return -1;
	if (!kbridge_port_poll_request(kni->port, &r))
		return 0;
	o = &kni->ops;
	switch (r.type) {
	case KBRIDGE_REQ_MTU:
		/* The MTU the port has already (kbridge's question at start,
		 * which KNI never asked: conf->mtu is the port's) is taken
		 * without a callback. */
		if (r.value != kni->mtu && o->change_mtu != NULL)
			ret = o->change_mtu(o->port_id, r.value);
		if (ret == 0)
			kni->mtu = r.value;
		break;
	case KBRIDGE_REQ_LINK:
		if (o->config_network_if != NULL)
			ret = o->config_network_if(o->port_id, (uint8_t)r.value);
		break;
	case KBRIDGE_REQ_MAC:
		ret = o->config_mac_address != NULL ? o->config_mac_address(o->port_id, r.mac) :
						      rte_kni_default_(kni, &r);
		break;
	case KBRIDGE_REQ_PROMISC:
		ret = o->config_promiscusity != NULL ? o->config_promiscusity(o->port_id, (uint8_t)r.value) :
						       rte_kni_default_(kni, &r);
		break;
	case KBRIDGE_REQ_ALLMULTI:
		ret = o->config_allmulticast != NULL ? o->config_allmulticast(o->port_id, (uint8_t)r.value) :
						       rte_kni_default_(kni, &r);
		break;
	}
	kbridge_port_reply(kni->port, &r, ret > 0 ? -ret : ret);
	return 0;
}

/* The KNI of that name in this process, or NULL. */
RTE_KNI_API struct rte_kni *
rte_kni_get(const char *name)
{
	struct rte_kni *kni;

	if (name == NULL || name[0] == '\0')
		return NULL;
	pthread_mutex_lock(&rte_kni_lock_);
	kni = rte_kni_find_(name);
	/* One still being allocated is not there yet. */
	if (kni != NULL && !kni->ready)
		kni = NULL;
	pthread_mutex_unlock(&rte_kni_lock_);
	return kni;
}

RTE_KNI_API const char *
rte_kni_get_name(const struct rte_kni *kni)
{
	return kni != NULL ? kni->name : NULL;
}

/* Sets the callbacks, as KNI: -1 when kni or ops is NULL or callbacks are
 * registered already (rte_kni_unregister_handlers() first). */
RTE_KNI_API int
rte_kni_register_handlers(struct rte_kni *kni, struct rte_kni_ops *ops)
{
	const struct rte_kni_ops *o;

	if (kni == NULL || ops == NULL) {
		RTE_KNI_LOG_(ERR, "rte_kni_register_handlers: no KNI or no ops\n");
		return -1;
	}
	o = &kni->ops;
	if (o->change_mtu != NULL || o->config_network_if != NULL || o->config_mac_address != NULL ||
	    o->config_promiscusity != NULL || o->config_allmulticast != NULL) {
		RTE_KNI_LOG_(ERR, "%s: request callbacks registered already\n", kni->name);
		return -1;
	}
	memcpy(&kni->ops, ops, sizeof(kni->ops));
	return 0;
}

/* Clears the callbacks, port_id with them (to 0, as KNI did). */
RTE_KNI_API int
rte_kni_unregister_handlers(struct rte_kni *kni)
{
	if (kni == NULL)
		return -1;
	memset(&kni->ops, 0, sizeof(kni->ops));
	return 0;
}

/*
 * Sets the interface's carrier (linkup 0: off, else on) and returns the
 * previous state, 1 or 0; -1 for a NULL kni. kbridge applies it within
 * milliseconds; until the first call the carrier is on.
 */
RTE_KNI_API int
rte_kni_update_link(struct rte_kni *kni, unsigned int linkup)
{
	uint64_t link;
	int was;

	if (kni == NULL || kni->port == NULL)
		return -1;
	link = __atomic_load_n(&kni->port->ctl->link, __ATOMIC_ACQUIRE);
	was = (link & KBRIDGE_LINK_REPORTED) == 0 || (link & KBRIDGE_LINK_UP) != 0;
	kbridge_port_set_link(kni->port, linkup != 0, (uint32_t)link,
			      (link & KBRIDGE_LINK_REPORTED) == 0 || (link & KBRIDGE_LINK_FULL_DUPLEX) != 0);
	return was;
}

/*
 * KNI closed /dev/kni here. Stops the kbridge rte_kni_alloc() started (it
 * frees what it holds and removes the interfaces of the KNIs still
 * allocated, which no longer move packets: rte_kni_release() each first);
 * the next rte_kni_alloc() starts one again.
 */
RTE_KNI_API void
rte_kni_close(void)
{
	char why[256] = "";

	pthread_mutex_lock(&rte_kni_lock_);
	if (kbridge_child_stop(&rte_kni_kbridge_, why, sizeof(why)) < 0 && why[0] != '\0')
		RTE_KNI_LOG_(WARNING, "stopping the app's kbridge: %s\n", why);
	pthread_mutex_unlock(&rte_kni_lock_);
}

/* librte_kni's functions: what an app built with RTE_KNI_LIBRARY calls,
 * and, in librte_kni's own build, a check that each definition above has
 * this signature. */
#ifdef RTE_KNI_LIBRARY
#undef rte_kni_init
#undef rte_kni_alloc
#undef rte_kni_release
#undef rte_kni_tx_burst
#undef rte_kni_rx_burst
#undef rte_kni_handle_request
#undef rte_kni_get
#undef rte_kni_get_name
#undef rte_kni_register_handlers
#undef rte_kni_unregister_handlers
#undef rte_kni_update_link
#undef rte_kni_close
#endif
#ifdef RTE_KNI_DECLARE_
int rte_kni_init(unsigned int max_kni_ifaces);
struct rte_kni *rte_kni_alloc(struct rte_mempool *pktmbuf_pool, const struct rte_kni_conf *conf,
			      struct rte_kni_ops *ops);
int rte_kni_release(struct rte_kni *kni);
unsigned rte_kni_tx_burst(struct rte_kni *kni, struct rte_mbuf **mbufs, unsigned num);
unsigned rte_kni_rx_burst(struct rte_kni *kni, struct rte_mbuf **mbufs, unsigned num);
int rte_kni_handle_request(struct rte_kni *kni);
struct rte_kni *rte_kni_get(const char *name);
const char *rte_kni_get_name(const struct rte_kni *kni);
int rte_kni_register_handlers(struct rte_kni *kni, struct rte_kni_ops *ops);
int rte_kni_unregister_handlers(struct rte_kni *kni);
int rte_kni_update_link(struct rte_kni *kni, unsigned int linkup);
void rte_kni_close(void);
#endif

#ifdef __cplusplus
}
#endif

#endif /* _RTE_KNI_H_ */

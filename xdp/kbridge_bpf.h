/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel UAPI and helper definitions the kbridge XDP programs need.
 * Kept local so that `go generate ./xdp/` needs nothing but clang: no
 * kernel headers, no libbpf-dev, no multiarch include path.
 */
#ifndef KBRIDGE_BPF_H
#define KBRIDGE_BPF_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;

enum xdp_action {
	XDP_ABORTED = 0,
	XDP_DROP,
	XDP_PASS,
	XDP_TX,
	XDP_REDIRECT,
};

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

/* Values from include/uapi/linux/bpf.h. */
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_XSKMAP 17

/* libbpf and cilium/ebpf both read this from the map's BTF. */
#define LIBBPF_PIN_BY_NAME 1

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name
#define __always_inline inline __attribute__((always_inline))

/* Helper IDs from enum bpf_func_id. */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *)23;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define kb_ntohs(x) __builtin_bswap16(x)
#define kb_htons(x) __builtin_bswap16(x)
#else
#define kb_ntohs(x) (x)
#define kb_htons(x) (x)
#endif

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8

#define IPPROTO_HOPOPTS 0
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_DSTOPTS 60

#endif

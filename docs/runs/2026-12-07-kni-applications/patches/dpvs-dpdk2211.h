/* DPVS v1.10.2 is written for DPDK 24.11. What it calls that DPDK 22.11
 * names or types differently, force-included with -include: DPDK API, not
 * KNI. */
#ifndef KB_EXT_DPVS_DPDK2211_H
#define KB_EXT_DPVS_DPDK2211_H
/* this header includes system headers before DPVS's files define it */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <rte_config.h>
#include <rte_version.h>
#if RTE_VERSION < RTE_VERSION_NUM(23, 11, 0, 0)
/* 23.11 renamed the bonding "slave" calls "member" */
#define rte_eth_bond_member_add rte_eth_bond_slave_add
#define rte_eth_bond_member_remove rte_eth_bond_slave_remove
#define rte_eth_bond_members_get rte_eth_bond_slaves_get
#define rte_eth_bond_active_members_get rte_eth_bond_active_slaves_get
/* 23.11 defines RTE_LOGTYPE_MBUF no more; DPVS's mbuf.c defines its own */
#include <rte_log.h>
#undef RTE_LOGTYPE_MBUF
#endif
#if RTE_VERSION < RTE_VERSION_NUM(24, 11, 0, 0)
/* 24.11 named the ICMP types RTE_ICMP_TYPE_* */
#define RTE_ICMP_TYPE_ECHO_REQUEST 8
#define RTE_ICMP_TYPE_ECHO_REPLY 0
/* 24.11's rte_lpm6 takes struct rte_ipv6_addr *, 22.11's uint8_t[16] */
#include <rte_lpm6.h>
#define rte_lpm6_add(l, ip, d, nh) rte_lpm6_add(l, (const uint8_t *)(ip), d, nh)
#define rte_lpm6_is_rule_present(l, ip, d, nh) rte_lpm6_is_rule_present(l, (const uint8_t *)(ip), d, nh)
#define rte_lpm6_delete(l, ip, d) rte_lpm6_delete(l, (const uint8_t *)(ip), d)
#define rte_lpm6_lookup(l, ip, nh) rte_lpm6_lookup(l, (const uint8_t *)(ip), nh)
#endif
#endif

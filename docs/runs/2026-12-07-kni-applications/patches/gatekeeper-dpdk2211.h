/* Gatekeeper v1.1.0 was written for its own fork of DPDK 20.11
 * (github.com/cjdoucette/dpdk, branch gatekeeper-dpdk). What it calls that
 * DPDK 22.11 names differently or lacks, force-included with -include:
 * DPDK API, not KNI. */
#ifndef KB_EXT_GATEKEEPER_DPDK2211_H
#define KB_EXT_GATEKEEPER_DPDK2211_H
/* renamed in DPDK 22.11 */
#define rte_frag_table_del_expired_entries rte_ip_frag_table_del_expired_entries
/* the fork's own call: prefetches a flow's hash buckets before their entry
 * expires. A hint only: nothing here, the lookup that follows fetches them. */
#define rte_hash_prefetch_buckets_non_temporal(h, sig) do { (void)(h); (void)(sig); } while (0)
#endif

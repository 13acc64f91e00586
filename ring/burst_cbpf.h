/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst_cbpf.h: a classic BPF interpreter (linux/filter.h's instruction set, as
 * SO_ATTACH_FILTER takes it) over one frame's bytes, for the socket view:
 * a packet socket on the interface (tcpdump with an expression, lldpd, a
 * DHCP client) captures only what its filter accepts, and a frame it would
 * capture is never judged unwanted. What it cannot decide as the kernel
 * would (a load past the bytes it has: the kernel reads the whole packet)
 * it answers "accepted", so that a frame is kept whenever in doubt. The
 * programs come from the kernel (sock_diag), which checked them when they
 * were attached; package sockview refuses those that use the kernel's
 * ancillary loads (SKF_AD_OFF and below), which have no meaning here.
 */
#ifndef KB_CBPF_H
#define KB_CBPF_H

#include <stdint.h>

/* struct sock_filter's layout. */
struct kb_cbpf_insn {
	uint16_t code;
	uint8_t jt, jf;
	uint32_t k;
};

/* What the program insn[0..n) returns for the frame p[0..len): the bytes
 * to capture, 0 to refuse; a load outside p[0..len) ends it as accepted
 * (1). */
uint32_t kb_cbpf_run(const struct kb_cbpf_insn *insn, uint16_t n, const uint8_t *p, uint32_t len);

#endif

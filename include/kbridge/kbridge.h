/* SPDX-License-Identifier: BSD-3-Clause
 *
 * kbridge.h: the DPDK application's side of the kbridge exception path.
 *
 * Header-only. A DPDK application (the primary process) creates a named
 * exception port, hands the packets the kernel must see to
 * kbridge_to_kernel() and sends what kbridge_from_kernel() returns out of its
 * NIC. The kbridge daemon (a DPDK secondary process started with the same
 * --file-prefix) finds the port by name and moves the packets to and from a
 * kernel TAP interface.
 *
 * This is the one header an application includes. It includes the others,
 * one concern each, installed beside it:
 *  - kbridge_ring.h: the control block, the rings and the burst calls
 *    (kbridge_to_kernel(), kbridge_from_kernel(), kbridge_port_set_offloads()).
 *  - kbridge_classify.h: the control-plane classifier the to_kernel ring's
 *    reserve admits frames by (kbridge_classify()).
 *  - kbridge_owner.h: which kbridge owns the port, and what it holds
 *    (kbridge_port_owner_pid()).
 *  - kbridge_wakeup.h: how a kbridge worker's eventfd reaches the app.
 *  - kbridge_port.h: kbridge_port_create(), kbridge_port_free().
 *  - kbridge_link.h: the port's link and MAC for the kernel interface
 *    (kbridge_port_set_link(), kbridge_port_set_mac()).
 *  - kbridge_requests.h: the kernel interface's requests to the app
 *    (kbridge_port_serve_requests(), kbridge_port_poll_request(),
 *    kbridge_port_reply()).
 */
#ifndef KBRIDGE_H
#define KBRIDGE_H

#include "kbridge_ring.h"
#include "kbridge_owner.h"
#include "kbridge_wakeup.h"
#include "kbridge_port.h"
#include "kbridge_link.h"
#include "kbridge_requests.h"

#endif /* KBRIDGE_H */

/* SPDX-License-Identifier: BSD-3-Clause
 *
 * burst_split.h: the kernel -> app direction's TCP segmentation in C. A TCP
 * super-frame read from the TAP is cut into MTU frames written straight
 * into the app's mbufs, for an app whose port does not segment: one copy of
 * the payload instead of a copy into a burst slot and another into an mbuf.
 * The frames are those tap/vnet's Super.Segment makes, byte for byte.
 */
#ifndef KB_BURST_SPLIT_H
#define KB_BURST_SPLIT_H

#include <stdint.h>

#include "burst.h"

/* Cuts the TCP super-frame data[0..len), described by b->tso (its segment
 * size already cut to the MTU), into segments of one mbuf each and hands
 * them over in chunks of at most b->cap, each on the held record until its
 * enqueue. The reserve admits a prefix of the segments (one class for all);
 * a source that runs dry or a full ring ends the cut, the rest counted in
 * b->no_mbuf or b->ring_full: what is queued is always the first
 * b->queued segments. Returns b->queued, or -E2BIG when a segment would not
 * fit one mbuf (or the frame is not one Super.Segment cuts): the caller
 * then splits the frame itself. */
int kb_in_put_split(struct kb_in *b, uint8_t *data, uint32_t len);

#endif

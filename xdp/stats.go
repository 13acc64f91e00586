package xdp

import (
	"fmt"
)

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64
	Bytes   uint64
}

// Stats are the program counters summed over CPUs. Every frame the programs
// see is counted under exactly one of FastPath, Exception, Returned, Pass,
// Drop or Aborted; ParseError and XSKMiss count reasons on top of that (a
// frame that cannot be parsed still goes to the exception path, a
// fast-path frame without a socket then follows xsk_fallback).
type Stats struct {
	FastPath   Counter // to an AF_XDP socket
	Exception  Counter // NIC -> kb0
	Returned   Counter // kb0 -> NIC
	Pass       Counter // XDP_PASS to the NIC's own stack (xsk_fallback: pass)
	Drop       Counter // dropped: xsk_fallback drop, or a redirect map entry missing
	Aborted    Counter // configuration map missing: should never happen
	ParseError Counter // truncated or malformed headers
	XSKMiss    Counter // fast-path frame, but no socket on its rx queue
}

// Map returns the counters by stable snake_case name, for metrics export.
func (s Stats) Map() map[string]Counter {
	return map[string]Counter{
		"fast_path":   s.FastPath,
		"exception":   s.Exception,
		"returned":    s.Returned,
		"pass":        s.Pass,
		"drop":        s.Drop,
		"aborted":     s.Aborted,
		"parse_error": s.ParseError,
		"xsk_miss":    s.XSKMiss,
	}
}

// Stats reads the per-CPU counters and sums them.
func (p *Path) Stats() (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.objs.Stats == nil {
		return Stats{}, ErrClosed
	}
	var s Stats
	fields := map[steerKbStat]*Counter{
		steerKbStatKB_STAT_FAST_PATH:   &s.FastPath,
		steerKbStatKB_STAT_EXCEPTION:   &s.Exception,
		steerKbStatKB_STAT_RETURNED:    &s.Returned,
		steerKbStatKB_STAT_PASS:        &s.Pass,
		steerKbStatKB_STAT_DROP:        &s.Drop,
		steerKbStatKB_STAT_ABORTED:     &s.Aborted,
		steerKbStatKB_STAT_PARSE_ERROR: &s.ParseError,
		steerKbStatKB_STAT_XSK_MISS:    &s.XSKMiss,
	}
	for idx, c := range fields {
		var perCPU []steerKbCounter
		if err := p.objs.Stats.Lookup(idx, &perCPU); err != nil {
			return Stats{}, fmt.Errorf("xdp: read stats[%d]: %w", idx, err)
		}
		for _, v := range perCPU {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
		}
	}
	return s, nil
}

package broker

import (
	"fmt"
	"sort"
)

// Forged origin_seq jumps (issue 21, section 4).
//
// Dedup answers every origin_seq at or below an origin stream's highest
// queued one DUPLICATE, so one entry with origin_seq near 2^63 would turn
// every later real entry of its origin into a silent DUPLICATE. Relayed
// entries were always held to "highest + 1" (GAP otherwise); a direct
// stream may legitimately pass numbers — entries not for this region
// (reported in ReplicateEntries.skipped, replapply_skip.go), and a few
// unreported ones (a skip report lost with a receiver restart, a head the
// origin trimmed before this region joined, an operator's skip on the
// replicator cursor). So a direct entry whose origin_seq is above the next
// one of its stream is accepted only when the numbers it passes are
// reported as skipped, up to replication.max_origin_seq_jump unreported
// ones; beyond that it is REJECTED, nothing is recorded and the mark does
// not move. REJECTED, not GAP: a GAP is final for the sender (it drops the
// entry as done), so a real entry refused as a GAP would be a silent loss;
// a REJECTED one is resent and the refusal is logged and counted, visible
// as a stall that the operator can lift by raising the limit.

// DefaultMaxOriginSeqJump is the default replication.max_origin_seq_jump.
const DefaultMaxOriginSeqJump = 1 << 16

// maxOriginSeqJumpLimit bounds replication.max_origin_seq_jump.
const maxOriginSeqJumpLimit = 1 << 40

// skipCoveredLocked counts the values of [first, last] reported as not
// for this region on origin stream stream. Needs applyMu.
func (r *replState) skipCoveredLocked(stream string, first, last int64) int64 {
	rs := r.skips[stream]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].Last >= first })
	var n int64
	for ; i < len(rs) && rs[i].First <= last; i++ {
		n += min(rs[i].Last, last) - max(rs[i].First, first) + 1
	}
	return n
}

// checkOriginJumpLocked refuses a direct entry (origin_seq seq of origin
// stream stream, dedup name name) that passes more unreported numbers than
// replication.max_origin_seq_jump allows. Needs applyMu.
func (t *topic) checkOriginJumpLocked(stream, name string, seq int64) error {
	_, pushed := t.ml.replProgress(name)
	next := max(pushed, 0) + 1
	if seq <= next {
		return nil
	}
	passed := seq - next
	unreported := passed - t.repl.skipCoveredLocked(stream, next, seq-1)
	limit := t.b.cfg.Replication.withDefaults().MaxOriginSeqJump
	if limit < 0 {
		limit = 0
	}
	if unreported <= limit {
		return nil
	}
	origin, _ := splitOriginStream(stream)
	t.log.Warn("implausible origin_seq jump refused", "origin_region", origin, "origin_stream", stream,
		"origin_seq", seq, "next", next, "unreported", unreported, "max_origin_seq_jump", limit)
	return fmt.Errorf("%w: origin_region %q (stream %s): origin_seq %d jumps over %d numbers after %d, the next of its origin stream, "+
		"that were not reported as skipped, limit %d (replication.max_origin_seq_jump): an implausible jump, not stored",
		ErrInvalidArgument, origin, stream, seq, unreported, next, limit)
}

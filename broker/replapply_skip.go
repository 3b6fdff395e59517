package broker

import (
	"fmt"
	"slices"
	"sort"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Entries not for this region (issue 20 item 6).
//
// A sender passes, without sending, the entries that are not for this
// region (replicate_to without it, disable_replication), and reports
// their origin_seq ranges (ReplicateEntries.skipped). The receiver keeps
// them per origin stream in memory (replState.skips, bounded by
// subscriptions.max_skip_ranges_per_stream) until the next entry of the
// stream is stored, and stores with that entry how many origin_seq values
// right below it are not for this region (origin_skipped_before), counted
// from the reports only: a gap that was not reported (entries trimmed at
// the origin before this region joined, a relay's GAP) is never counted.
// The replicated subscriptions then acknowledge those values together
// with the entry (subcover.go: the region's scoped claim), so they hold no
// hole open here. The entry carries it, so every subscription — new ones,
// restored ones, after a seek — finds it, and nothing else is persisted;
// a report lost with a receiver restart before its next entry costs a
// hole (a range in the vectors), never a message.

// maxSkipStreams bounds the origin streams a topic keeps skip reports
// for: origin streams per topic are at most max_origin_incarnations per
// region (16 by default), so 256 covers 16 regions; reports of further
// streams are ignored (holes, never a loss).
const maxSkipStreams = 256

// validateSkipped checks a request's skip reports; nothing is applied
// when one is bad.
func validateSkipped(skipped []*clientv1.SkippedSeqs) error {
	for i, r := range skipped {
		if err := validateOriginStream(fmt.Sprintf("skipped[%d].stream", i), r.GetStream()); err != nil {
			return err
		}
		if r.GetFirst() < 1 || r.GetLast() < r.GetFirst() || r.GetLast() > maxSeq {
			return fmt.Errorf("%w: skipped[%d] = [%d, %d]: need 1 <= first <= last <= %d (math.MaxInt64 - 1)",
				ErrInvalidArgument, i, r.GetFirst(), r.GetLast(), int64(maxSeq))
		}
	}
	return nil
}

// noteSkipped records a request's skip reports (validated). Reports of
// this region's own streams, and values at or below a stream's highest
// stored entry, are dropped: no later entry of the stream needs them.
func (t *topic) noteSkipped(skipped []*clientv1.SkippedSeqs) {
	if len(skipped) == 0 {
		return
	}
	maxRanges := t.b.cfg.Subscriptions.withDefaults().MaxSkipRangesPerStream
	r := &t.repl
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	for _, sk := range skipped {
		stream := sk.GetStream()
		if origin, _ := splitOriginStream(stream); origin == t.b.cfg.Region {
			continue
		}
		stored, _ := t.ml.replProgress(replDedupName(stream))
		first, last := max(sk.GetFirst(), stored+1), sk.GetLast()
		if first > last {
			continue
		}
		if r.skips == nil {
			r.skips = map[string][]seqRange{}
		}
		rs, ok := r.skips[stream]
		if !ok && len(r.skips) >= maxSkipStreams {
			continue
		}
		rs = addSeqRange(rs, seqRange{first, last})
		for len(rs) > 0 && rs[0].Last <= stored {
			rs = rs[1:]
		}
		if len(rs) > maxRanges {
			rs = rs[len(rs)-maxRanges:] // the lowest are forgotten
		}
		r.skips[stream] = rs
	}
}

// skippedBeforeLocked returns how many origin_seq values right below seq
// (down to the highest stored entry of the stream, exclusive) were
// reported not for this region, and forgets the reports at or below
// stored. Needs applyMu.
func (r *replState) skippedBeforeLocked(stream string, seq, stored int64) int64 {
	rs := r.skips[stream]
	for len(rs) > 0 && rs[0].Last <= stored {
		rs = rs[1:]
	}
	if len(rs) == 0 {
		delete(r.skips, stream)
	} else {
		r.skips[stream] = rs
	}
	i := sort.Search(len(rs), func(i int) bool { return rs[i].Last >= seq-1 })
	if i == len(rs) || rs[i].First > seq-1 {
		return 0
	}
	return seq - max(rs[i].First, stored+1)
}

// addSeqRange inserts r into sorted disjoint non-adjacent ranges rs,
// merging.
func addSeqRange(rs []seqRange, r seqRange) []seqRange {
	// touches, not First-1 / Last+1: a bound may be at an end of int64.
	i := sort.Search(len(rs), func(i int) bool { return touches(rs[i].Last, r.First) })
	j := i
	for j < len(rs) && touches(r.Last, rs[j].First) {
		r.First, r.Last = min(r.First, rs[j].First), max(r.Last, rs[j].Last)
		j++
	}
	return slices.Replace(rs, i, j, r)
}

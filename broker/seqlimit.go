package broker

import (
	"fmt"
	"math"
)

// Sequence number bounds (issue 22 item 4).
//
// Sequence ids, origin_seq values and the ranges built from them are
// int64, and the code around them computes "the next one" (last + 1: the
// next expected origin_seq, whether two ranges touch) and "the last of a
// batch" (sequence_id + num_messages - 1). A value that comes from the
// network at or near math.MaxInt64 would wrap those negative: a range
// that overlaps its neighbour, a batch whose highest id is below its
// first, a dedup check that answers wrongly. Rather than trusting every
// such sum, a number from outside is refused when the arithmetic done on
// it could overflow, and nothing of its request is applied:
//
//   - an origin_seq, a sequence id or a range bound may be at most
//     maxSeq (math.MaxInt64 - 1), so its successor is an int64;
//   - a batch's sequence_id may be at most math.MaxInt64 - num_messages
//     (the same bound a producer's send is held to, service.go), so its
//     highest id is at most maxSeq too.
//
// The pure leaves (ackVector, seqRanges, addSeqRange) are also written so
// that a bound of math.MaxInt64 does not wrap (First-1 <= Last rather
// than First <= Last+1): a stored record or a bug upstream cannot break
// their invariants either.

// maxSeq is the highest sequence id, origin_seq or range bound accepted
// from the network: maxSeq + 1 is still an int64.
const maxSeq = math.MaxInt64 - 1

// touches reports whether a range ending at hi reaches one starting at
// lo (hi+1 >= lo: they overlap or are adjacent) without computing hi+1 or
// lo-1, either of which wraps at the ends of int64.
func touches(hi, lo int64) bool {
	return hi >= lo || lo != math.MinInt64 && hi == lo-1
}

// checkBatchSeq refuses a batch whose ids would overflow: sequence_id must
// be in [0, math.MaxInt64 - num_messages], so that its highest id,
// sequence_id + num_messages - 1, is at most maxSeq. prefix qualifies the
// field names ("" for a send, "entries[3]." for a replicated entry);
// num must already be >= 1.
func checkBatchSeq(prefix string, seq int64, num int32) error {
	if seq < 0 {
		return fmt.Errorf("%w: %ssequence_id %d must be >= 0", ErrInvalidArgument, prefix, seq)
	}
	if limit := math.MaxInt64 - int64(num); seq > limit {
		return fmt.Errorf("%w: %ssequence_id %d + num_messages %d overflows int64: sequence_id must be at most %d (math.MaxInt64 - num_messages)",
			ErrInvalidArgument, prefix, seq, num, limit)
	}
	return nil
}

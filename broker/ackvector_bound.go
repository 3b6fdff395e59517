package broker

import (
	"slices"
	"strconv"
)

// The size bound of a vector (SubscriptionsConfig.MaxAckVectorBytes).
//
// approxBytes estimates, from above, what a vector takes in a cursor
// record (cursor.go: JSON, per key {"md":N,"r":[[F,L],...],"b":{"S":[W,...]}})
// in time linear in its keys, not its ranges, so it can be checked on
// every acknowledgement: each range counts at the width of the key's
// highest origin_seq, each batch entry at the width of any int64, each
// word at the width of any uint64. The wire form (AckVector) is smaller.

// Per-element costs of approxBytes, in bytes, each the most that element
// takes in the record: a key's `"K":{"md":N,"r":[],"b":{}},` with N up to
// 19 digits and the key's '>' escaped by encoding/json as \u003e (5 more);
// a batch entry's `"S":[],` with S up to 19 digits; a word's `W,` with W up
// to 20 digits; a range's `[F,L],` beyond its two numbers.
const (
	vecKeyOverhead   = 48
	vecBatchEntry    = 25
	vecBatchWord     = 21
	vecRangeOverhead = 4
)

// approxBytes is v's estimated size in a cursor record (an upper bound).
func (v ackVector) approxBytes() int {
	n := 0
	for key, o := range v {
		n += len(key) + o.approxBytes()
	}
	return n
}

// approxBytes is o's share of ackVector.approxBytes, without its key.
func (o *originAcks) approxBytes() int {
	return vecKeyOverhead + len(o.Ranges)*o.rangeCost() + len(o.Batch)*vecBatchEntry + o.batchWords*vecBatchWord
}

// rangeCost is what one range of o counts: two numbers as wide as its
// highest origin_seq.
func (o *originAcks) rangeCost() int {
	top := o.MD
	if n := len(o.Ranges); n > 0 {
		top = o.Ranges[n-1].Last
	}
	return 2*len(strconv.FormatInt(top, 10)) + vecRangeOverhead
}

// trim makes v fit in maxBytes (approxBytes) by dropping what is furthest
// from the mark-deletes, from the largest key first: its highest batch
// entries, then its highest ranges. Mark-deletes are never dropped. A
// trimmed vector acknowledges less than before, never more: the entries
// it forgot are delivered again after a move (never skipped), and a local
// acknowledgement the vector forgot comes back when the cursor's
// mark-delete passes it (translation). It returns how many ranges and
// batch entries it dropped.
func (v ackVector) trim(maxBytes int) int {
	dropped := 0
	for over := v.approxBytes() - maxBytes; over > 0; over = v.approxBytes() - maxBytes {
		var big *originAcks
		for _, o := range v {
			if len(o.Ranges) == 0 && len(o.Batch) == 0 {
				continue
			}
			if big == nil || o.approxBytes() > big.approxBytes() {
				big = o
			}
		}
		if big == nil {
			return dropped // only mark-deletes left: bounded by the keys
		}
		if nb := len(big.Batch); nb > 0 {
			seqs := make([]int64, 0, nb)
			for seq := range big.Batch {
				seqs = append(seqs, seq)
			}
			slices.Sort(seqs)
			n := min(nb, over/vecBatchEntry+1)
			for _, seq := range seqs[nb-n:] {
				big.batchWords -= len(big.Batch[seq])
				delete(big.Batch, seq)
			}
			dropped += n
			continue
		}
		nr := len(big.Ranges)
		n := min(nr, over/big.rangeCost()+1)
		big.Ranges = slices.Clone(big.Ranges[:nr-n])
		dropped += n
	}
	return dropped
}

package broker

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// cursorRecord is a subscription's stored cursor: the mark-delete position
// (every entry up to it is acknowledged) plus the entries after it that are
// acknowledged individually, as [ledger, firstEntry, lastEntry] ranges.
type cursorRecord struct {
	MarkDelete [2]int64   `json:"md"`
	Acked      [][3]int64 `json:"acked,omitempty"`
	CreatedMs  int64      `json:"created_ms"`
	cursorExt
}

// cursorExt holds the cover-vector and replicated-subscription fields of
// a cursor record (subcover.go, subsync.go). Records written before they
// existed decode with every field zero: not replicated, no cover.
type cursorExt struct {
	// Replicated marks a replicated subscription.
	Replicated bool `json:"replicated,omitempty"`
	// Cover is the cover vector (for a replicated subscription: its whole
	// acknowledgement vector), per origin: mark-delete seq and ranges.
	Cover map[string]coverOrigin `json:"cover,omitempty"`
	// ResetEpoch/ResetRegion order the subscription's resets across
	// regions (SubscriptionUpdate.reset_epoch/reset_region).
	ResetEpoch  int64  `json:"reset_epoch,omitempty"`
	ResetRegion string `json:"reset_region,omitempty"`
	// VFront is the position up to which the local mark-delete has been
	// translated into the vector (unset: the mark-delete).
	VFront *[2]int64 `json:"vfront,omitempty"`
	// Type is the subscription type last connected (shipped to the other
	// regions so a subscription created there has the same type).
	Type int32 `json:"type,omitempty"`
	// BatchAcks are the partially acknowledged entries after mark-delete:
	// their acknowledged batch indexes (batchacks.go). Local to the region:
	// never shipped with the vector.
	BatchAcks []batchAckRecord `json:"batch_acks,omitempty"`
}

// coverOrigin is one origin of a stored cover vector.
type coverOrigin struct {
	MD     int64      `json:"md"`
	Ranges [][2]int64 `json:"r,omitempty"`
	// Batch: batch-index acknowledgements, seq -> bitset words.
	Batch map[int64][]uint64 `json:"b,omitempty"`
}

// vectorToRecord converts v for a cursor record, keeping at most maxRanges
// ranges per origin (the lowest: dropping the others only makes their
// entries count unacknowledged again after a restart — redelivered, never
// lost).
func vectorToRecord(v ackVector, maxRanges int) map[string]coverOrigin {
	if v == nil {
		return nil
	}
	out := make(map[string]coverOrigin, len(v))
	for origin, o := range v {
		c := coverOrigin{MD: o.MD}
		for i, r := range o.Ranges {
			if i >= maxRanges {
				break
			}
			c.Ranges = append(c.Ranges, [2]int64{r.First, r.Last})
		}
		if len(o.Batch) > 0 {
			// The lowest seqs, at most maxRanges entries (dropped ones are
			// redelivered after a restart, never lost).
			seqs := make([]int64, 0, len(o.Batch))
			for seq := range o.Batch {
				seqs = append(seqs, seq)
			}
			slices.Sort(seqs)
			c.Batch = make(map[int64][]uint64, min(len(seqs), maxRanges))
			for i, seq := range seqs {
				if i >= maxRanges {
					break
				}
				c.Batch[seq] = o.Batch[seq]
			}
		}
		out[origin] = c
	}
	return out
}

// vectorFromRecord converts a stored cover vector (nil stays nil), its
// batch acks within lim.
func vectorFromRecord(m map[string]coverOrigin, lim *vecLimits) ackVector {
	if m == nil {
		return nil
	}
	v := ackVector{}
	for origin, c := range m {
		v.setMD(origin, c.MD)
		if v[origin] == nil {
			v[origin] = &originAcks{}
		}
		rs := make([]seqRange, len(c.Ranges))
		for i, r := range c.Ranges {
			rs[i] = seqRange{r[0], r[1]}
		}
		v.addMany(origin, rs) // one merge: a record's ranges in any order

		for seq, ws := range c.Batch {
			v.addBatchLim(origin, seq, ws, lim)
		}
	}
	return v
}

func encodeCursor(md pos, acked map[pos]struct{}, createdMs int64, maxAcks int) []byte {
	return encodeCursorExt(md, acked, createdMs, maxAcks, cursorExt{})
}

// encodeCursorExt encodes a cursor record with its extension fields.
func encodeCursorExt(md pos, acked map[pos]struct{}, createdMs int64, maxAcks int, ext cursorExt) []byte {
	rec := cursorRecord{MarkDelete: [2]int64{md.L, md.E}, CreatedMs: createdMs, cursorExt: ext}
	rec.Acked = ackRanges(acked, maxAcks)
	b, _ := json.Marshal(&rec)
	return b
}

// decodeCursorExt returns the extension fields of a cursor record.
func decodeCursorExt(b []byte) (cursorExt, error) {
	var rec cursorRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return cursorExt{}, fmt.Errorf("broker: cursor record corrupt: %v", err)
	}
	return rec.cursorExt, nil
}

// ackRanges collapses acknowledged positions into per-ledger ranges. Only
// the first maxAcks positions (in ledger/entry order) are kept: the rest
// would be redelivered after a restart, never lost.
func ackRanges(acked map[pos]struct{}, maxAcks int) [][3]int64 {
	ps := make([]pos, 0, len(acked))
	for p := range acked {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].L < ps[j].L || ps[i].L == ps[j].L && ps[i].E < ps[j].E })
	if len(ps) > maxAcks {
		ps = ps[:maxAcks]
	}
	var out [][3]int64
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1][0] == p.L && out[n-1][2]+1 == p.E {
			out[n-1][2] = p.E
			continue
		}
		out = append(out, [3]int64{p.L, p.E, p.E})
	}
	return out
}

// decodeCursor decodes a cursor record: mark-delete, individually
// acknowledged positions and creation time. It keeps at most maxAcks
// acknowledged positions (max_individual_acks, the bound encodeCursorExt
// writes with), the first in the record's order: a record that holds more
// (written under a larger bound, or corrupt) costs maxAcks positions, not
// what its ranges span, and the positions dropped are redelivered, never
// lost. A range whose last entry is before its first holds nothing.
func decodeCursor(b []byte, maxAcks int) (pos, map[pos]struct{}, int64, error) {
	var rec cursorRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return pos{}, nil, 0, fmt.Errorf("broker: cursor record corrupt: %v", err)
	}
	acked := map[pos]struct{}{}
	for _, r := range rec.Acked {
		for e := r[1]; e <= r[2] && len(acked) < maxAcks; e++ {
			acked[pos{r[0], e}] = struct{}{}
			if e == r[2] {
				break // e++ would wrap at math.MaxInt64
			}
		}
	}
	return pos{rec.MarkDelete[0], rec.MarkDelete[1]}, acked, rec.CreatedMs, nil
}

// formatRanges renders ranges as "[L:E..L:E]" for internal stats.
func formatRanges(r [][3]int64) []string {
	out := make([]string, 0, len(r))
	for _, x := range r {
		out = append(out, fmt.Sprintf("[%d:%d..%d:%d]", x[0], x[1], x[0], x[2]))
	}
	return out
}

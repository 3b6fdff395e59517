package broker

// Deltas (subsync.go ships them).
//
// Vectors are joins, so a sender need not ship a whole vector V to a
// remote that is known to hold W already: the difference D = V \ W is
// enough, since W ∪ D ⊇ V and the remote joins what it receives. minus
// computes D per key: the origin_seq values V acknowledges and W does not,
// as ranges (a leading run from 1 as the mark-delete), and the batch
// indexes of V's partially acknowledged entries that W has neither as a
// whole nor by index.

// minus returns what v acknowledges and w does not (nil w: a copy of v).
// The result shares nothing with v or w.
func (v ackVector) minus(w ackVector) ackVector {
	out := ackVector{}
	for key, o := range v {
		wo := w[key]
		if wo == nil {
			if o.MD > 0 || len(o.Ranges) > 0 || len(o.Batch) > 0 {
				out[key] = ackVector{key: o}.clone()[key]
			}
			continue
		}
		out.addMany(key, diffRanges(o.intervals(), wo.intervals()))
		for seq, ws := range o.Batch {
			if wo.covers(seq) {
				continue
			}
			have := wo.Batch[seq]
			var d []uint64
			for i, x := range ws {
				if i < len(have) {
					x &^= have[i]
				}
				if x != 0 {
					for len(d) < i {
						d = append(d, 0)
					}
					d = append(d, x)
				}
			}
			if len(d) > 0 {
				out.addBatchLim(key, seq, d, noVecLimits)
			}
		}
	}
	return out
}

// intervals returns o's acknowledged values as sorted disjoint ranges
// ([1, MD] first when MD > 0).
func (o *originAcks) intervals() []seqRange {
	out := make([]seqRange, 0, len(o.Ranges)+1)
	if o.MD > 0 {
		out = append(out, seqRange{1, o.MD})
	}
	return append(out, o.Ranges...)
}

// diffRanges returns a \ b (both sorted and disjoint) as sorted disjoint
// ranges.
func diffRanges(a, b []seqRange) []seqRange {
	var out []seqRange
	j := 0
	for _, r := range a {
		cur := r.First
		for j < len(b) && b[j].Last < cur {
			j++
		}
		for k := j; cur <= r.Last; k++ {
			if k >= len(b) || b[k].First > r.Last {
				out = append(out, seqRange{cur, r.Last})
				break
			}
			if b[k].First > cur {
				out = append(out, seqRange{cur, b[k].First - 1})
			}
			if b[k].Last >= r.Last {
				break // r is done; Last+1 could wrap at math.MaxInt64
			}
			cur = max(cur, b[k].Last+1)
		}
	}
	return out
}

// empty reports whether v acknowledges nothing.
func (v ackVector) empty() bool {
	for _, o := range v {
		if o.MD > 0 || len(o.Ranges) > 0 || len(o.Batch) > 0 {
			return false
		}
	}
	return true
}

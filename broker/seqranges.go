package broker

import "sort"

// seqRanges is a set of sequence IDs held as sorted, disjoint, non-adjacent
// closed intervals. It records exactly which sequence IDs of one producer
// identity are stored in this region (ident_dedup.go): a high-water mark is
// not enough when the producer's messages reach a region by several paths
// (its home region and the region it failed over to) in either order.
//
// It is bounded: beyond maxRanges intervals the lowest ones are forgotten.
// Forgetting only makes a later copy look new (stored again, a duplicate),
// never makes an unstored message look stored. A producer that sends in
// order normally has one interval.
type seqRanges struct {
	// r holds the intervals, ascending; r[i][1]+1 < r[i+1][0].
	r [][2]int64
}

// maxIdentRanges bounds the intervals kept per producer identity (16 bytes
// each in memory, about 40 in the snapshot's JSON).
const maxIdentRanges = 16

// add inserts [lo, hi] (ignored when hi < lo), merging overlapping and
// adjacent intervals, then forgets the lowest intervals beyond maxRanges.
func (s *seqRanges) add(lo, hi int64, maxRanges int) {
	if hi < lo {
		return
	}
	// i: first interval that ends at or after lo-1 (may merge with [lo, hi]).
	// touches, not lo-1 / hi+1: either bound may be at an end of int64.
	i := sort.Search(len(s.r), func(k int) bool { return touches(s.r[k][1], lo) })
	j := i
	for j < len(s.r) && touches(hi, s.r[j][0]) {
		lo = min(lo, s.r[j][0])
		hi = max(hi, s.r[j][1])
		j++
	}
	out := make([][2]int64, 0, len(s.r)-(j-i)+1)
	out = append(out, s.r[:i]...)
	out = append(out, [2]int64{lo, hi})
	out = append(out, s.r[j:]...)
	if maxRanges > 0 && len(out) > maxRanges {
		out = out[len(out)-maxRanges:]
	}
	s.r = out
}

// covers reports whether every ID of [lo, hi] is in the set (false for an
// empty interval).
func (s *seqRanges) covers(lo, hi int64) bool {
	if hi < lo {
		return false
	}
	i := sort.Search(len(s.r), func(k int) bool { return s.r[k][1] >= lo })
	return i < len(s.r) && s.r[i][0] <= lo && hi <= s.r[i][1]
}

// highest returns the highest ID in the set (-1: empty).
func (s *seqRanges) highest() int64 {
	if len(s.r) == 0 {
		return -1
	}
	return s.r[len(s.r)-1][1]
}

// intervals returns a copy of the intervals, ascending.
func (s *seqRanges) intervals() [][2]int64 {
	return append([][2]int64(nil), s.r...)
}

// load replaces the set by stored intervals, keeping only well-formed ones
// (a corrupt snapshot loses coverage, which is safe, never adds any).
func (s *seqRanges) load(iv [][2]int64, maxRanges int) {
	s.r = nil
	for _, v := range iv {
		s.add(v[0], v[1], maxRanges)
	}
}

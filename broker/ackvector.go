package broker

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// Acknowledgement vectors.
//
// A region's copy of a topic interleaves the entries of every origin region
// in its own order, at its own positions; an entry is the same message in
// every region only by its origin key (origin region, origin_seq). An
// ackVector states a subscription's progress in those terms: per origin,
// every origin_seq up to a mark-delete plus individually acknowledged
// ranges. It is what a replicated subscription ships to the other regions
// and what a seek by time or origin position resolves to, so it selects the
// same messages in every region.
//
// Vectors form a join semi-lattice (join = union of acknowledged sets):
// joining is commutative, associative and idempotent, so vectors may be
// shipped late, twice or out of order and relayed through any region.
//
// Exact and scoped claims (issue 20 item 6). A key of the map is either an
// origin stream ("a@3": an exact claim, true wherever the entry is stored)
// or a region and an origin stream ("b>a@3": a scoped claim of region b,
// true only of the entries that are for b — entryScope). Entries kept out
// of b by replicate_to or disable_replication never reach b; b learns
// their origin_seq values from its senders (ReplicateEntries.skipped,
// stored with the next entry as origin_skipped_before) and counts them
// acknowledged in its own scoped claim, so the claim compacts into its
// mark-delete instead of keeping a hole per such entry. The claim says
// nothing of those entries anywhere else: a receiver applies b's claim
// only to the entries that are for b (coversEntry), since an entry kept
// out of b may be for c. So:
//
//   - a region's acknowledgements of its own origin's entries are exact
//     (every one of them is stored there);
//   - its acknowledgements of other origins' entries go, with the
//     origin_seq values known not to be for it, into its scoped claim;
//   - an exact claim about another origin received from elsewhere is
//     folded into the own scoped claim above its mark-delete
//     (foldForeignLocked): only its mark-delete is kept exact, so a hole
//     the origin region keeps for its own unacknowledged local-only
//     entries does not stay a hole in every other region. What is lost is
//     the relay of that origin's acknowledgements of entries not for this
//     region (a partial mesh then re-delivers them: duplicates, never a
//     loss).
//
// A vector is bounded (vecLimits, SubscriptionsConfig): batch entries per
// origin, their words, and its size as a cursor record stores it; past the
// size it drops its highest ranges (trim), so it acknowledges less, never
// more.

// seqRange is an inclusive range of origin_seq values.
type seqRange struct{ First, Last int64 }

// originAcks is one origin's acknowledged origin_seq values: every value
// <= MD, plus Ranges (sorted, disjoint, not adjacent, all above MD+1).
//
// Batch holds batch-index acknowledgements: per origin_seq not otherwise
// acknowledged, the bitset words of its acknowledged message indexes (a
// partially acknowledged batch entry). A value covered by MD or Ranges has
// no Batch entry (pruneBatch).
type originAcks struct {
	MD     int64
	Ranges []seqRange
	Batch  map[int64][]uint64
	// batchWords counts the words of Batch (bounded by
	// vecLimits.batchWords).
	batchWords int
}

// maxBatchWords bounds the words of one entry's batch bitset
// (maxBatchIndex indexes).
const maxBatchWords = maxBatchIndex / 64

// vecLimits bounds a vector (SubscriptionsConfig): maxBytes its size as a
// cursor record stores it (approxBytes), batchSeqs the partially
// acknowledged entries it keeps per origin and batchWords their bitset
// words. Beyond the batch bounds new batch acks are not recorded
// (addBatchLim refuses them): those messages are delivered again after a
// move, never skipped; an ack of the whole entry still replicates. A nil
// *vecLimits means the defaults.
type vecLimits struct {
	maxBytes, batchSeqs, batchWords int
}

var (
	defaultVecLimits = vecLimits{maxBytes: DefaultMaxAckVectorBytes, batchSeqs: DefaultMaxVectorBatchSeqs, batchWords: DefaultMaxVectorBatchWords}
	// noVecLimits is for bookkeeping copies (what a remote is known to
	// hold): they must not forget what they were told.
	noVecLimits = &vecLimits{maxBytes: math.MaxInt, batchSeqs: math.MaxInt, batchWords: math.MaxInt}
)

func (l *vecLimits) get() *vecLimits {
	if l == nil {
		return &defaultVecLimits
	}
	return l
}

// addBatch is addBatchLim with the default bounds.
func (v ackVector) addBatch(origin string, seq int64, words []uint64) bool {
	return v.addBatchLim(origin, seq, words, nil)
}

// addBatchLim acknowledges the batch indexes words (bitset) of entry
// (origin, seq); it reports whether v changed. An entry acknowledged as a
// whole already, or one beyond the per-origin bounds of lim, is left as
// it is.
func (v ackVector) addBatchLim(origin string, seq int64, words []uint64, lim *vecLimits) bool {
	if seq <= 0 || v.covers(origin, seq) {
		return false
	}
	lim = lim.get()
	o := v[origin]
	if o == nil {
		o = &originAcks{}
		v[origin] = o
	}
	cur, ok := o.Batch[seq]
	if !ok && len(o.Batch) >= lim.batchSeqs {
		return false
	}
	words = words[:min(len(words), maxBatchWords)]
	for len(words) > 0 && words[len(words)-1] == 0 {
		words = words[:len(words)-1]
	}
	if grow := len(words) - len(cur); grow > 0 && o.batchWords+grow > lim.batchWords {
		return false
	}
	changed := false
	for i, w := range words {
		if i >= len(cur) {
			o.batchWords += i + 1 - len(cur)
			cur = append(cur, make([]uint64, i+1-len(cur))...)
		}
		if cur[i]|w != cur[i] {
			cur[i] |= w
			changed = true
		}
	}
	if !changed {
		return false
	}
	if o.Batch == nil {
		o.Batch = map[int64][]uint64{}
	}
	o.Batch[seq] = cur
	return true
}

// batchOf returns the acknowledged batch indexes of entry (origin, seq)
// as bitset words (nil: none, or acknowledged as a whole).
func (v ackVector) batchOf(origin string, seq int64) []uint64 {
	if o := v[origin]; o != nil {
		return o.Batch[seq]
	}
	return nil
}

// pruneBatch drops the batch entries that MD or Ranges cover.
func (o *originAcks) pruneBatch() {
	for seq := range o.Batch {
		if o.covers(seq) {
			o.batchWords -= len(o.Batch[seq])
			delete(o.Batch, seq)
		}
	}
}

// batchContains reports whether v's batch acks (or whole acks) include
// every batch ack of w.
func (v ackVector) batchContains(w ackVector) bool {
	for origin, o := range w {
		for seq, ws := range o.Batch {
			if v.covers(origin, seq) {
				continue
			}
			have := v.batchOf(origin, seq)
			for i, x := range ws {
				var h uint64
				if i < len(have) {
					h = have[i]
				}
				if x&^h != 0 {
					return false
				}
			}
		}
	}
	return true
}

// ackVector maps origin region to its acknowledged origin_seq values. The
// zero value (nil) acknowledges nothing; mutate only a non-nil vector.
type ackVector map[string]*originAcks

// originKey is an entry's identity across regions (Region: its origin
// stream key, Seq: its origin_seq), with what this region knows of it
// beyond that: Skip, how many origin_seq values right below Seq are not
// for this region (EntryMetadata.origin_skipped_before), and Scope, which
// regions the entry is for.
type originKey struct {
	Region string
	Seq    int64
	Skip   int64
	Scope  entryScope
}

// covers reports whether (origin, seq) is acknowledged (origin is a key:
// an origin stream, or a scoped claim's key).
func (v ackVector) covers(origin string, seq int64) bool {
	return v[origin].covers(seq)
}

// covers reports whether seq is acknowledged (false on a nil o).
func (o *originAcks) covers(seq int64) bool {
	if o == nil {
		return false
	}
	if seq <= o.MD {
		return true
	}
	i := sort.Search(len(o.Ranges), func(i int) bool { return o.Ranges[i].Last >= seq })
	return i < len(o.Ranges) && o.Ranges[i].First <= seq
}

// add acknowledges the range [first, last] of origin; it reports whether
// v changed.
func (v ackVector) add(origin string, first, last int64) bool {
	if first > last || last <= 0 {
		return false
	}
	first = max(first, 1)
	o := v[origin]
	if o == nil {
		o = &originAcks{}
		v[origin] = o
	}
	if last <= o.MD {
		return false
	}
	first = max(first, o.MD+1)
	// Insert and merge with overlapping or adjacent ranges.
	i := sort.Search(len(o.Ranges), func(i int) bool { return o.Ranges[i].Last >= first-1 })
	if i == len(o.Ranges) && first > o.MD+1 {
		// Above every range (acknowledgements mostly come in order): append.
		// No two vectors share a Ranges array (clone, merge and trim copy).
		o.Ranges = append(o.Ranges, seqRange{first, last})
		if len(o.Batch) > 0 {
			o.pruneBatch()
		}
		return true
	}
	j := i
	nf, nl := first, last
	// First-1 <= last, not First <= last+1: last may be math.MaxInt64
	// (First >= 2 here, so First-1 cannot wrap).
	for j < len(o.Ranges) && o.Ranges[j].First-1 <= last {
		nf, nl = min(nf, o.Ranges[j].First), max(nl, o.Ranges[j].Last)
		j++
	}
	if j == i+1 && o.Ranges[i].First == nf && o.Ranges[i].Last == nl {
		return false // already covered by one range
	}
	rs := make([]seqRange, 0, len(o.Ranges)-(j-i)+1)
	rs = append(rs, o.Ranges[:i]...)
	rs = append(rs, seqRange{nf, nl})
	rs = append(rs, o.Ranges[j:]...)
	o.Ranges = rs
	// Fold a range that now starts right after MD into it.
	if len(o.Ranges) > 0 && o.Ranges[0].First-1 <= o.MD {
		o.MD = max(o.MD, o.Ranges[0].Last)
		o.Ranges = o.Ranges[1:]
	}
	if len(o.Batch) > 0 {
		o.pruneBatch()
	}
	return true
}

// setMD raises origin's mark-delete to md (everything up to md
// acknowledged); it reports whether v changed.
func (v ackVector) setMD(origin string, md int64) bool {
	o := v[origin]
	if o != nil && md <= o.MD {
		return false
	}
	return v.add(origin, 1, md)
}

// addManyLinear is the number of ranges up to which addMany adds them one
// by one: add is O(log n) for a range above every other (the common case)
// and O(n) below, so a few of them cost less than a merge.
const addManyLinear = 8

// addMany acknowledges every range of rs (invalid ones, first > last or
// last <= 0, are ignored as add ignores them) under origin; it reports
// whether v changed. The result is what calling add on each would give,
// in O(k log k + n) for k ranges and n ranges already held: add costs O(n)
// per range below the top, so one request of k ranges in descending order
// (a hostile or a merely unlucky one) would cost O(k·(n+k)) — minutes of
// CPU for a few MiB (issue 22). rs is not modified.
func (v ackVector) addMany(origin string, rs []seqRange) bool {
	if len(rs) <= addManyLinear {
		changed := false
		for _, r := range rs {
			if v.add(origin, r.First, r.Last) {
				changed = true
			}
		}
		return changed
	}
	in := make([]seqRange, 0, len(rs))
	for _, r := range rs {
		if r.First > r.Last || r.Last <= 0 {
			continue
		}
		in = append(in, seqRange{max(r.First, 1), r.Last})
	}
	if len(in) == 0 {
		return false
	}
	slices.SortFunc(in, func(a, b seqRange) int { return cmp.Compare(a.First, b.First) })
	// Coalesce in place into sorted, disjoint, non-adjacent ranges.
	n := 0
	for _, r := range in {
		if n > 0 && r.First-1 <= in[n-1].Last {
			in[n-1].Last = max(in[n-1].Last, r.Last)
			continue
		}
		in[n] = r
		n++
	}
	o := v[origin]
	if o == nil {
		o = &originAcks{}
		v[origin] = o
	}
	// mergeOriginAcks folds a leading range that reaches MD+1 (here one
	// starting at 1) into the mark-delete.
	m := mergeOriginAcks(o, &originAcks{Ranges: in[:n]})
	if m.MD == o.MD && slices.Equal(m.Ranges, o.Ranges) {
		return false
	}
	o.MD, o.Ranges = m.MD, m.Ranges
	if len(o.Batch) > 0 {
		o.pruneBatch()
	}
	return true
}

// join is joinLim with the default bounds.
func (v ackVector) join(w ackVector) bool { return v.joinLim(w, nil) }

// joinLim adds every acknowledgement of w to v (batch acks within lim's
// per-origin bounds); it reports whether v changed. It merges each
// origin's sorted ranges in one pass (linear in the ranges of both): a
// replicated subscription joins received vectors often. It does not
// enforce lim.maxBytes (trim does).
func (v ackVector) joinLim(w ackVector, lim *vecLimits) bool {
	changed := false
	for origin, o := range w {
		if o == nil || o.MD <= 0 && len(o.Ranges) == 0 && len(o.Batch) == 0 {
			continue
		}
		cur := v[origin]
		if cur == nil {
			cur = &originAcks{}
		}
		merged := mergeOriginAcks(cur, o)
		merged.Batch, merged.batchWords = cur.Batch, cur.batchWords
		if merged.MD != cur.MD || !slices.Equal(merged.Ranges, cur.Ranges) || v[origin] == nil {
			v[origin] = merged
			changed = true
			if len(merged.Batch) > 0 {
				merged.pruneBatch()
			}
		}
		for seq, ws := range o.Batch {
			if v.addBatchLim(origin, seq, ws, lim) {
				changed = true
			}
		}
	}
	return changed
}

// mergeOriginAcks returns the union of a and b (both normalized: ranges
// sorted, disjoint, not adjacent, above MD+1) in normalized form.
func mergeOriginAcks(a, b *originAcks) *originAcks {
	out := &originAcks{MD: max(a.MD, b.MD)}
	rs := make([]seqRange, 0, len(a.Ranges)+len(b.Ranges))
	push := func(r seqRange) {
		if r.Last <= out.MD {
			return
		}
		if r.First <= out.MD+1 && len(rs) == 0 {
			out.MD = r.Last
			return
		}
		// r.First-1, not Last+1: a Last of math.MaxInt64 must not wrap.
		if n := len(rs); n > 0 && r.First-1 <= rs[n-1].Last {
			rs[n-1].Last = max(rs[n-1].Last, r.Last)
			return
		}
		rs = append(rs, r)
	}
	i, j := 0, 0
	for i < len(a.Ranges) || j < len(b.Ranges) {
		if j >= len(b.Ranges) || i < len(a.Ranges) && a.Ranges[i].First <= b.Ranges[j].First {
			push(a.Ranges[i])
			i++
		} else {
			push(b.Ranges[j])
			j++
		}
	}
	out.Ranges = rs
	return out
}

// contains reports whether v acknowledges everything w does (batch
// indexes included).
func (v ackVector) contains(w ackVector) bool {
	if !v.batchContains(w) {
		return false
	}
	for origin, o := range w {
		if !v.coversRange(origin, 1, o.MD) {
			return false
		}
		for _, r := range o.Ranges {
			if !v.coversRange(origin, r.First, r.Last) {
				return false
			}
		}
	}
	return true
}

// coversRange reports whether every value of [first, last] is acknowledged.
func (v ackVector) coversRange(origin string, first, last int64) bool {
	o := v[origin]
	if o == nil {
		return first > last
	}
	if last <= o.MD {
		return true
	}
	first = max(first, o.MD+1)
	i := sort.Search(len(o.Ranges), func(i int) bool { return o.Ranges[i].Last >= first })
	return i < len(o.Ranges) && o.Ranges[i].First <= first && o.Ranges[i].Last >= last
}

// clone returns a deep copy of v (never nil).
func (v ackVector) clone() ackVector {
	c := make(ackVector, len(v))
	for origin, o := range v {
		co := &originAcks{MD: o.MD, Ranges: append([]seqRange(nil), o.Ranges...), batchWords: o.batchWords}
		if len(o.Batch) > 0 {
			co.Batch = make(map[int64][]uint64, len(o.Batch))
			for seq, ws := range o.Batch {
				co.Batch[seq] = append([]uint64(nil), ws...)
			}
		}
		c[origin] = co
	}
	return c
}

// rangeCount is the number of ranges above the mark-deletes, and acks the
// number of origin_seq values they hold.
func (v ackVector) rangeCount() (ranges, acks int64) {
	for _, o := range v {
		ranges += int64(len(o.Ranges))
		for _, r := range o.Ranges {
			// Saturating: ranges up to math.MaxInt64 must not wrap the sum
			// negative (it is a statistic).
			if n := r.Last - r.First + 1; n > 0 && acks <= math.MaxInt64-n {
				acks += n
			} else {
				acks = math.MaxInt64
			}
		}
	}
	return ranges, acks
}

// toProto converts v for the wire (scoped claims in AckVector.scoped).
func (v ackVector) toProto() *clientv1.AckVector {
	out := &clientv1.AckVector{Origins: make(map[string]*clientv1.OriginAcks, len(v))}
	for key, o := range v {
		p := &clientv1.OriginAcks{MarkDeleteSeq: o.MD}
		for _, r := range o.Ranges {
			p.Acked = append(p.Acked, &clientv1.SeqRange{First: r.First, Last: r.Last})
		}
		if len(o.Batch) > 0 {
			seqs := make([]int64, 0, len(o.Batch))
			for seq := range o.Batch {
				seqs = append(seqs, seq)
			}
			slices.Sort(seqs)
			for _, seq := range seqs {
				p.BatchAcks = append(p.BatchAcks, &clientv1.BatchSeqAcks{Seq: seq, Words: o.Batch[seq]})
			}
		}
		if claimer, stream, ok := splitScoped(key); ok {
			if out.Scoped == nil {
				out.Scoped = map[string]*clientv1.ScopedAcks{}
			}
			sa := out.Scoped[claimer]
			if sa == nil {
				sa = &clientv1.ScopedAcks{Origins: map[string]*clientv1.OriginAcks{}}
				out.Scoped[claimer] = sa
			}
			sa.Origins[stream] = p
			continue
		}
		out.Origins[key] = p
	}
	return out
}

// ackVectorFromProto is ackVectorFromProtoLim with the default bounds.
func ackVectorFromProto(field string, p *clientv1.AckVector) (ackVector, error) {
	return ackVectorFromProtoLim(field, p, nil)
}

// ackVectorFromProtoLim validates and converts a received vector; field
// names the vector in errors. A vector past lim (its size, or its batch
// entries per origin) is refused whole, naming the configuration field.
func ackVectorFromProtoLim(field string, p *clientv1.AckVector, lim *vecLimits) (ackVector, error) {
	lim = lim.get()
	// Refuse a vector that cannot fit before building it: a range takes at
	// least 6 bytes of a cursor record ("[1,1],").
	n := 0
	for _, o := range p.GetOrigins() {
		n += len(o.GetAcked()) + len(o.GetBatchAcks())
	}
	for _, sa := range p.GetScoped() {
		for _, o := range sa.GetOrigins() {
			n += len(o.GetAcked()) + len(o.GetBatchAcks())
		}
	}
	if 6*n > lim.maxBytes {
		return nil, fmt.Errorf("%w: %s has %d ranges and batch entries, more than fit in subscriptions.max_ack_vector_bytes %d",
			ErrInvalidArgument, field, n, lim.maxBytes)
	}
	v := ackVector{}
	for origin, o := range p.GetOrigins() {
		if err := validateOriginStream(field+".origins key", origin); err != nil {
			return nil, err
		}
		if err := v.addOriginProto(fmt.Sprintf("%s.origins[%s]", field, origin), origin, o, lim); err != nil {
			return nil, err
		}
	}
	for claimer, sa := range p.GetScoped() {
		if err := ValidateName(field+".scoped key", claimer); err != nil {
			return nil, err
		}
		for stream, o := range sa.GetOrigins() {
			if err := validateOriginStream(fmt.Sprintf("%s.scoped[%s].origins key", field, claimer), stream); err != nil {
				return nil, err
			}
			if err := v.addOriginProto(fmt.Sprintf("%s.scoped[%s].origins[%s]", field, claimer, stream), scopedKey(claimer, stream), o, lim); err != nil {
				return nil, err
			}
		}
	}
	if size := v.approxBytes(); size > lim.maxBytes {
		return nil, fmt.Errorf("%w: %s is about %d bytes, limit %d (subscriptions.max_ack_vector_bytes)", ErrInvalidArgument, field, size, lim.maxBytes)
	}
	return v, nil
}

// addOriginProto adds one received OriginAcks under key (field names it in
// errors).
func (v ackVector) addOriginProto(field, key string, o *clientv1.OriginAcks, lim *vecLimits) error {
	if md := o.GetMarkDeleteSeq(); md < 0 || md > maxSeq {
		return fmt.Errorf("%w: %s.mark_delete_seq %d must be in [0, %d] (math.MaxInt64 - 1)", ErrInvalidArgument, field, md, int64(maxSeq))
	}
	// Validate every range, then add them in one merge (addMany): a
	// request of many ranges in descending order must not cost O(n²).
	rs := make([]seqRange, 0, len(o.GetAcked())+1)
	if md := o.GetMarkDeleteSeq(); md > 0 {
		rs = append(rs, seqRange{1, md})
	}
	for i, r := range o.GetAcked() {
		if r.GetFirst() < 1 || r.GetLast() < r.GetFirst() || r.GetLast() > maxSeq {
			return fmt.Errorf("%w: %s.acked[%d] = [%d, %d]: need 1 <= first <= last <= %d (math.MaxInt64 - 1)",
				ErrInvalidArgument, field, i, r.GetFirst(), r.GetLast(), int64(maxSeq))
		}
		rs = append(rs, seqRange{r.GetFirst(), r.GetLast()})
	}
	v.addMany(key, rs)
	if len(o.GetBatchAcks()) > lim.batchSeqs {
		return fmt.Errorf("%w: %s.batch_acks has %d entries, limit %d (subscriptions.max_vector_batch_seqs)", ErrInvalidArgument, field, len(o.GetBatchAcks()), lim.batchSeqs)
	}
	for i, b := range o.GetBatchAcks() {
		if b.GetSeq() < 1 || b.GetSeq() > maxSeq {
			return fmt.Errorf("%w: %s.batch_acks[%d].seq %d must be in [1, %d] (math.MaxInt64 - 1)", ErrInvalidArgument, field, i, b.GetSeq(), int64(maxSeq))
		}
		if len(b.GetWords()) > maxBatchWords {
			return fmt.Errorf("%w: %s.batch_acks[%d] has %d words, limit %d (%d batch indexes)", ErrInvalidArgument, field, i, len(b.GetWords()), maxBatchWords, maxBatchIndex)
		}
		v.addBatchLim(key, b.GetSeq(), b.GetWords(), lim)
	}
	return nil
}

// entryOrigin returns the origin key of the stored entry e of t and its
// decoded metadata: origin stream key (originStreamKey: region and origin
// incarnation; it goes in originKey.Region) and origin_seq as stored, or for a local
// entry stored without a number its position-derived offset. ok is false
// for an entry that has no origin key (undecodable, or its ledger no longer
// retained).
func (t *topic) entryOrigin(e LedgerEntry) (originKey, *clientv1.EntryMetadata, bool) {
	md, _, err := wire.DecodeEntry(e.Data)
	if err != nil {
		return originKey{}, nil, false
	}
	if md.GetReplicated() {
		if md.GetOriginRegion() == "" || md.GetOriginSeq() <= 0 {
			return originKey{}, md, false
		}
		skip := min(max(md.GetOriginSkippedBefore(), 0), md.GetOriginSeq()-1)
		return originKey{Region: entryStream(md), Seq: md.GetOriginSeq(), Skip: skip, Scope: scopeOf(md)}, md, true
	}
	seq, inc := md.GetOriginSeq(), md.GetOriginIncarnation()
	if seq <= 0 {
		// Position-derived: the legacy stream (incarnation 0).
		var ok bool
		if seq, ok = t.ml.originSeq(pos{e.LedgerID, e.EntryID}); !ok {
			return originKey{}, md, false
		}
		inc = 0
	}
	return originKey{Region: originStreamKey(t.b.cfg.Region, inc), Seq: seq, Scope: scopeOf(md)}, md, true
}

package broker

import (
	"math"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// Hostile ack vectors (issue 22 item 4): cost and overflow.

// bigVecLimits lets a test vector hold far more than the defaults, so
// that only the cost of applying it is measured.
var bigVecLimits = &vecLimits{maxBytes: 1 << 30, batchSeqs: 1 << 20, batchWords: 1 << 20}

// descendingProto is a received vector of n single-value ranges, every
// other origin_seq, highest first: the order that made add copy the whole
// Ranges slice on every insert.
func descendingProto(n int) *clientv1.AckVector {
	o := &clientv1.OriginAcks{Acked: make([]*clientv1.SeqRange, 0, n)}
	for i := n; i >= 1; i-- {
		o.Acked = append(o.Acked, &clientv1.SeqRange{First: int64(2 * i), Last: int64(2 * i)})
	}
	return &clientv1.AckVector{Origins: map[string]*clientv1.OriginAcks{"a": o}}
}

// allocated returns the bytes f allocates (the process's TotalAlloc
// delta: other goroutines add to it, so bounds must be generous).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A received vector of n ranges in descending order costs O(n log n), not
// O(n²): one add per range rebuilt the Ranges slice each time, allocating
// about 16·n²/2 bytes (3.2 GB for 20 000 ranges; minutes of CPU for the
// 6 MiB request of the issue). The merge allocates a few times the result.
func TestAckVectorFromProtoDescendingRangesLinearAlloc(t *testing.T) {
	const n = 20000
	p := descendingProto(n)
	var v ackVector
	var err error
	got := allocated(func() { v, err = ackVectorFromProtoLim("vector", p, bigVecLimits) })
	if err != nil {
		t.Fatal(err)
	}
	// The result alone is 16·n bytes; old code: ~3.2e9.
	const bound = 64 << 20
	if got > bound {
		t.Fatalf("applying %d descending ranges allocated %d bytes, want <= %d (O(n²) insertion?)", n, got, bound)
	}
	o := v["a"]
	if o.MD != 0 || len(o.Ranges) != n {
		t.Fatalf("MD %d, %d ranges, want 0 and %d", o.MD, len(o.Ranges), n)
	}
	for i := int64(1); i <= 2*n+1; i++ {
		if v.covers("a", i) != (i%2 == 0) {
			t.Fatalf("covers(%d) = %v", i, v.covers("a", i))
		}
	}
}

// A cursor record's vector is restored with the same single merge.
func TestVectorFromRecordDescendingRangesLinearAlloc(t *testing.T) {
	const n = 20000
	c := coverOrigin{}
	for i := n; i >= 1; i-- {
		c.Ranges = append(c.Ranges, [2]int64{int64(2 * i), int64(2 * i)})
	}
	m := map[string]coverOrigin{"a": c}
	var v ackVector
	got := allocated(func() { v = vectorFromRecord(m, bigVecLimits) })
	const bound = 64 << 20
	if got > bound {
		t.Fatalf("restoring %d descending ranges allocated %d bytes, want <= %d", n, got, bound)
	}
	if len(v["a"].Ranges) != n {
		t.Fatalf("%d ranges, want %d", len(v["a"].Ranges), n)
	}
}

// addMany gives exactly what add gives range by range (MD, Ranges, batch
// entries pruned), for random ranges: overlapping, adjacent, from 1,
// invalid, in any order.
func TestAckVectorAddManyMatchesAdd(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for round := 0; round < 2000; round++ {
		base := ackVector{}
		for i := rng.Intn(6); i > 0; i-- {
			f := int64(rng.Intn(80) - 5)
			base.add("a", f, f+int64(rng.Intn(5)))
		}
		if rng.Intn(3) == 0 {
			base.setMD("a", int64(rng.Intn(20)))
		}
		for i := rng.Intn(4); i > 0; i-- {
			base.addBatch("a", int64(rng.Intn(90)+1), []uint64{1})
		}
		k := rng.Intn(40)
		if rng.Intn(4) == 0 {
			k = addManyLinear + 1 + rng.Intn(5) // just past the linear cut
		}
		rs := make([]seqRange, k)
		for i := range rs {
			f := int64(rng.Intn(100) - 5)
			rs[i] = seqRange{f, f + int64(rng.Intn(6)) - 1} // sometimes first > last
		}
		orig := slices.Clone(rs)
		want, got := base.clone(), base.clone()
		wantChanged := false
		for _, r := range rs {
			if want.add("a", r.First, r.Last) {
				wantChanged = true
			}
		}
		gotChanged := got.addMany("a", rs)
		if !slices.Equal(rs, orig) {
			t.Fatalf("round %d: addMany modified its argument", round)
		}
		w, g := want["a"], got["a"]
		if (w == nil) != (g == nil) {
			t.Fatalf("round %d: key present %v, want %v", round, g != nil, w != nil)
		}
		if w == nil {
			continue
		}
		if g.MD != w.MD || !slices.Equal(g.Ranges, w.Ranges) || len(g.Batch) != len(w.Batch) || g.batchWords != w.batchWords {
			t.Fatalf("round %d: addMany(%v) on %+v = %+v, want %+v", round, rs, base["a"], g, w)
		}
		if gotChanged != wantChanged {
			t.Fatalf("round %d: changed %v, want %v", round, gotChanged, wantChanged)
		}
	}
}

// checkNormalized fails unless every key of v keeps the invariant: ranges
// sorted, disjoint, not adjacent, above MD+1 (written without +1 so that
// it holds at math.MaxInt64 too).
func checkNormalized(t testing.TB, what string, v ackVector) {
	t.Helper()
	for key, o := range v {
		for i, r := range o.Ranges {
			if r.Last < r.First || r.First-1 <= o.MD || i > 0 && r.First-1 <= o.Ranges[i-1].Last {
				t.Fatalf("%s: key %q not normalized: MD %d ranges %v", what, key, o.MD, o.Ranges)
			}
		}
		if o.MD < 0 {
			t.Fatalf("%s: key %q has MD %d", what, key, o.MD)
		}
	}
}

// A range up to math.MaxInt64 merges with the ranges it overlaps: last+1
// wrapped to math.MinInt64, so the old add and merge left overlapping
// ranges, and the old diff reported a range the other side covers.
func TestAckVectorMaxInt64Bounds(t *testing.T) {
	const top = math.MaxInt64
	v := ackVector{}
	v.add("a", 10, 20)
	v.add("a", 5, top)
	checkNormalized(t, "add", v)
	if !slices.Equal(v["a"].Ranges, []seqRange{{5, top}}) {
		t.Fatalf("add [5, MaxInt64] over [10, 20]: %v", v["a"].Ranges)
	}

	a := ackVector{"a": {Ranges: []seqRange{{5, top}}}}
	b := ackVector{"a": {Ranges: []seqRange{{10, 20}}}}
	a.join(b)
	checkNormalized(t, "join", a)
	if !slices.Equal(a["a"].Ranges, []seqRange{{5, top}}) {
		t.Fatalf("join: %v", a["a"].Ranges)
	}

	w := ackVector{"a": {Ranges: []seqRange{{3, top}}}}
	if d := v.minus(w); !d.empty() {
		t.Fatalf("[5, MaxInt64] minus [3, MaxInt64] = %+v, want empty", d["a"])
	}
	if d := w.minus(v); !slices.Equal(d["a"].Ranges, []seqRange{{3, 4}}) {
		t.Fatalf("[3, MaxInt64] minus [5, MaxInt64] = %+v, want [3, 4]", d["a"])
	}

	// Two keys each acknowledging almost every int64: the count saturates.
	two := ackVector{"a": {Ranges: []seqRange{{2, top}}}, "b": {Ranges: []seqRange{{2, top}}}}
	if n, acks := two.rangeCount(); n != 2 || acks != math.MaxInt64 {
		t.Fatalf("rangeCount = %d, %d; want 2, MaxInt64 (saturated)", n, acks)
	}

	var s seqRanges
	s.add(5, 10, 0)
	s.add(1, top, 0)
	if got := s.intervals(); len(got) != 1 || got[0] != [2]int64{1, top} || s.highest() != top {
		t.Fatalf("seqRanges: %v highest %d, want [[1 MaxInt64]]", got, s.highest())
	}
	var lo seqRanges
	lo.add(-5, 10, 0)
	lo.add(math.MinInt64, -20, 0)
	if got := lo.intervals(); len(got) != 2 || got[0][0] != math.MinInt64 || got[1] != [2]int64{-5, 10} {
		t.Fatalf("seqRanges from MinInt64: %v", got)
	}

	rs := addSeqRange([]seqRange{{5, 10}}, seqRange{1, top})
	if !slices.Equal(rs, []seqRange{{1, top}}) {
		t.Fatalf("addSeqRange: %v", rs)
	}
}

// A received vector, skip report or replicated entry whose numbers would
// overflow the arithmetic done on them is refused, naming the field and
// the limit.
func TestHostileSeqBoundsRefused(t *testing.T) {
	const top = math.MaxInt64
	for name, p := range map[string]*clientv1.AckVector{
		"acked":           {Origins: map[string]*clientv1.OriginAcks{"a": {Acked: []*clientv1.SeqRange{{First: 5, Last: top}}}}},
		"mark_delete_seq": {Origins: map[string]*clientv1.OriginAcks{"a": {MarkDeleteSeq: top}}},
		"batch_acks":      {Origins: map[string]*clientv1.OriginAcks{"a": {BatchAcks: []*clientv1.BatchSeqAcks{{Seq: top, Words: []uint64{1}}}}}},
	} {
		_, err := ackVectorFromProto("vector", p)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "9223372036854775806") {
			t.Errorf("%s at MaxInt64: err %v, want one naming %s and the limit", name, err, name)
		}
	}
	if err := validateSkipped([]*clientv1.SkippedSeqs{{Stream: "a", First: 1, Last: top}}); err == nil || !strings.Contains(err.Error(), "skipped[0]") {
		t.Errorf("skip report to MaxInt64: err %v", err)
	}
	// Just below the limits: accepted.
	if _, err := ackVectorFromProto("vector", &clientv1.AckVector{Origins: map[string]*clientv1.OriginAcks{"a": {MarkDeleteSeq: 3, Acked: []*clientv1.SeqRange{{First: 5, Last: top - 1}}}}}); err != nil {
		t.Errorf("range to MaxInt64-1 refused: %v", err)
	}
}

// replEntryBytes encodes a replicated entry as a sender ships it.
func replEntryBytes(t testing.TB, md *clientv1.EntryMetadata) []byte {
	t.Helper()
	b, err := wire.EncodeEntry(md, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidateReplEntriesSeqOverflow(t *testing.T) {
	const top = math.MaxInt64
	ok := func() *clientv1.EntryMetadata {
		return &clientv1.EntryMetadata{OriginRegion: "a", OriginSeq: 7, NumMessages: 2, ProducerName: "p", SequenceId: 10, ProducerIdentity: "id1"}
	}
	if _, err := validateReplEntries([][]byte{replEntryBytes(t, ok())}, 1<<20); err != nil {
		t.Fatalf("well-formed entry refused: %v", err)
	}
	for _, c := range []struct {
		field string
		mut   func(*clientv1.EntryMetadata)
	}{
		// sequence_id + num_messages - 1 wrapped to math.MinInt64: the
		// entry's dedup keys (entryIdent, originProducerKey) got a batch
		// whose highest id is below its first.
		{"sequence_id", func(md *clientv1.EntryMetadata) { md.SequenceId = top }},
		{"sequence_id", func(md *clientv1.EntryMetadata) { md.SequenceId = top - 1 }},
		{"sequence_id", func(md *clientv1.EntryMetadata) { md.SequenceId = -3 }},
		{"highest_sequence_id", func(md *clientv1.EntryMetadata) { md.HighestSequenceId = top }},
		{"origin_seq", func(md *clientv1.EntryMetadata) { md.OriginSeq = top }},
	} {
		md := ok()
		c.mut(md)
		_, err := validateReplEntries([][]byte{replEntryBytes(t, ok()), replEntryBytes(t, md)}, 1<<20)
		if err == nil || !strings.Contains(err.Error(), "entries[1]."+c.field) {
			t.Errorf("%s: err %v, want one naming entries[1].%s", c.field, err, c.field)
			continue
		}
		md.Replicated = true
		if c.field == "sequence_id" && md.SequenceId == top {
			// What the refused entry would have fed dedup.
			if _, first, hs, ok := entryIdent(md); ok && hs >= first {
				t.Errorf("entryIdent(%d, %d) = [%d, %d]: expected the wrapped batch this refuses", md.SequenceId, md.NumMessages, first, hs)
			}
		}
	}
	// The send bound: sequence_id up to MaxInt64 - num_messages.
	if err := checkBatchSeq("", top-2, 2); err != nil {
		t.Errorf("sequence_id MaxInt64-2 with 2 messages refused: %v", err)
	}
	if err := checkBatchSeq("", top-1, 2); err == nil || !strings.Contains(err.Error(), "9223372036854775805 (math.MaxInt64 - num_messages)") {
		t.Errorf("sequence_id MaxInt64-1 with 2 messages: %v", err)
	}
}

// BenchmarkAckVectorDescending measures a received vector of 200 000
// single-value ranges in descending order (about 1.2 MiB on the wire).
func BenchmarkAckVectorDescending(b *testing.B) {
	p := descendingProto(200000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ackVectorFromProtoLim("vector", p, bigVecLimits); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAckVectorAddManyRandom measures addMany of 200 000 ranges in
// random order into a vector already holding 100 000.
func BenchmarkAckVectorAddManyRandom(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	base := ackVector{}
	for i := int64(1); i <= 100000; i++ {
		base.add("a", 4*i, 4*i)
	}
	rs := make([]seqRange, 200000)
	for i := range rs {
		f := int64(rng.Intn(800000) + 2)
		rs[i] = seqRange{f, f}
	}
	b.ReportAllocs()
	for b.Loop() {
		v := base.clone()
		v.addMany("a", rs)
	}
}

package broker

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"google.golang.org/protobuf/proto"
)

// Fuzz targets for what other regions send: acknowledgement vectors
// (SubscriptionUpdate.vector) and replication requests (issue 22 item 6).
// Seeds live in testdata/fuzz/<target>/, so plain go test runs them.

// fuzzVecLimits keeps fuzzed vectors small enough that the model checks
// below (add range by range) stay fast.
var fuzzVecLimits = &vecLimits{maxBytes: 16 << 10, batchSeqs: 64, batchWords: 512}

// fuzzSeedVectors are the f.Add seeds of FuzzAckVectorFromProto.
func fuzzSeedVectors() []*clientv1.AckVector {
	return []*clientv1.AckVector{
		{},
		{Origins: map[string]*clientv1.OriginAcks{"a": {MarkDeleteSeq: 4, Acked: []*clientv1.SeqRange{{First: 9, Last: 9}, {First: 6, Last: 7}, {First: 7, Last: 12}}}}},
		{Origins: map[string]*clientv1.OriginAcks{"a@2": {Acked: []*clientv1.SeqRange{{First: 1, Last: 3}, {First: 5, Last: math.MaxInt64 - 1}},
			BatchAcks: []*clientv1.BatchSeqAcks{{Seq: 4, Words: []uint64{5, 0}}, {Seq: 2, Words: []uint64{1}}}}}},
		{Scoped: map[string]*clientv1.ScopedAcks{"b": {Origins: map[string]*clientv1.OriginAcks{"a": {MarkDeleteSeq: 2, Acked: []*clientv1.SeqRange{{First: 20, Last: 30}, {First: 10, Last: 11}}}}}}},
		{Origins: map[string]*clientv1.OriginAcks{"a": {Acked: []*clientv1.SeqRange{{First: 5, Last: math.MaxInt64}}}}},
		{Origins: map[string]*clientv1.OriginAcks{"a": {MarkDeleteSeq: -1}}},
		descendingProto(300),
	}
}

// FuzzAckVectorFromProto decodes arbitrary bytes as a received AckVector
// and converts it as the subscription sync receiver does. Properties: no
// panic; a refusal is ErrInvalidArgument; an accepted vector is
// normalized, within its bounds, holds exactly what adding the received
// ranges one by one holds, and survives a round trip through its wire
// form; decoding allocates in proportion to the input (the old one-by-one
// insertion allocated O(n²)).
func FuzzAckVectorFromProto(f *testing.F) {
	for _, p := range fuzzSeedVectors() {
		b, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p clientv1.AckVector
		if proto.Unmarshal(data, &p) != nil {
			return
		}
		var v ackVector
		var err error
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v, err = ackVectorFromProtoLim("vector", &p, fuzzVecLimits)
		runtime.ReadMemStats(&after)
		if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(256*len(data)+1<<20); got > bound {
			t.Fatalf("decoding %d bytes allocated %d, bound %d", len(data), got, bound)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("refusal is not ErrInvalidArgument: %v", err)
			}
			return
		}
		checkNormalized(t, "decoded", v)
		if n := v.approxBytes(); n > fuzzVecLimits.maxBytes {
			t.Fatalf("accepted a vector of about %d bytes, limit %d", n, fuzzVecLimits.maxBytes)
		}
		// The model: the received ranges added one by one.
		model := ackVector{}
		each := func(key string, o *clientv1.OriginAcks) {
			model.setMD(key, o.GetMarkDeleteSeq())
			for _, r := range o.GetAcked() {
				model.add(key, r.GetFirst(), r.GetLast())
			}
		}
		for origin, o := range p.GetOrigins() {
			each(origin, o)
		}
		for claimer, sa := range p.GetScoped() {
			for stream, o := range sa.GetOrigins() {
				each(scopedKey(claimer, stream), o)
			}
		}
		for key, m := range model {
			o := v[key]
			if m.MD == 0 && len(m.Ranges) == 0 {
				continue
			}
			if o == nil || o.MD != m.MD || !slices.Equal(o.Ranges, m.Ranges) {
				t.Fatalf("key %q: decoded %+v, one-by-one %+v", key, o, m)
			}
		}
		for key, o := range v {
			if m := model[key]; (o.MD > 0 || len(o.Ranges) > 0) && (m == nil || m.MD == 0 && len(m.Ranges) == 0) {
				t.Fatalf("key %q acknowledged from nothing: %+v", key, o)
			}
			for seq := range o.Batch {
				if o.covers(seq) {
					t.Fatalf("key %q: batch entry %d covered as a whole", key, seq)
				}
			}
		}
		b, err := proto.Marshal(v.toProto())
		if err != nil {
			t.Fatal(err)
		}
		var q clientv1.AckVector
		if err := proto.Unmarshal(b, &q); err != nil {
			t.Fatal(err)
		}
		back, err := ackVectorFromProtoLim("vector", &q, fuzzVecLimits)
		if err != nil {
			t.Fatalf("round trip refused: %v", err)
		}
		if !back.contains(v) || !v.contains(back) {
			t.Fatalf("round trip changed the vector: %v -> %v", v, back)
		}
	})
}

// FuzzAckVectorOps runs random operations (add, addMany, setMD, addBatch,
// join, minus) on two small vectors and checks every result against a
// plain set model: covers must equal the model for every value, ranges
// stay normalized, no batch entry is covered as a whole, and the delta
// v.minus(w) is exactly v \ w.
func FuzzAckVectorOps(f *testing.F) {
	f.Add([]byte{0, 10, 3, 0, 5, 2, 2, 9, 40, 1, 30, 2, 20, 1, 10, 1, 3, 4})
	f.Add([]byte{2, 12, 90, 1, 80, 1, 70, 1, 60, 1, 50, 1, 40, 1, 30, 1, 20, 1, 10, 1, 1, 3, 5, 4})
	f.Add([]byte{1, 20, 4, 6, 30, 0, 25, 5, 3, 2, 4, 4, 0, 26, 1})
	f.Add([]byte{5, 7, 1, 5, 8, 2, 0, 6, 3, 3, 0, 8, 1, 4})
	const top = 130
	f.Fuzz(func(t *testing.T, data []byte) {
		vecs := [2]ackVector{{}, {}}
		models := [2]map[int64]bool{{}, {}}
		next := func() int64 {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int64(b)
		}
		mark := func(m map[int64]bool, first, last int64) {
			for i := max(first, 1); i <= last && i <= top; i++ {
				m[i] = true
			}
		}
		for steps := 0; len(data) > 0 && steps < 200; steps++ {
			op := next()
			x := int(op>>3) & 1
			v, m := vecs[x], models[x]
			switch op % 6 {
			case 0:
				first := next()%120 - 2
				last := first + next()%10 - 1
				v.add("a", first, last)
				mark(m, first, last)
			case 1:
				md := next() % 120
				v.setMD("a", md)
				mark(m, 1, md)
			case 2:
				rs := make([]seqRange, next()%24)
				for i := range rs {
					first := next()%120 - 2
					rs[i] = seqRange{first, first + next()%10 - 1}
					mark(m, rs[i].First, rs[i].Last)
				}
				v.addMany("a", rs)
			case 3:
				v.addBatch("a", next()%120+1, []uint64{uint64(next()) + 1})
			case 4:
				vecs[x].join(vecs[1-x])
				for i := range models[1-x] {
					m[i] = true
				}
			case 5:
				d := vecs[x].minus(vecs[1-x])
				checkNormalized(t, "minus", d)
				for i := int64(1); i <= top; i++ {
					if want := m[i] && !models[1-x][i]; d.covers("a", i) != want {
						t.Fatalf("minus: covers(%d) = %v, want %v", i, d.covers("a", i), want)
					}
				}
				w := vecs[1-x].clone()
				w.join(d)
				if !w.contains(vecs[x]) {
					t.Fatal("w joined with v.minus(w) does not contain v")
				}
			}
			for k := range vecs {
				checkNormalized(t, "ops", vecs[k])
				for i := int64(1); i <= top; i++ {
					if vecs[k].covers("a", i) != models[k][i] {
						t.Fatalf("vector %d after op %d: covers(%d) = %v, want %v (%+v)", k, op%6, i, vecs[k].covers("a", i), models[k][i], vecs[k]["a"])
					}
				}
				if o := vecs[k]["a"]; o != nil {
					for seq := range o.Batch {
						if o.covers(seq) {
							t.Fatalf("vector %d: batch entry %d covered as a whole", k, seq)
						}
					}
				}
			}
		}
	})
}

// fuzzSeedReplRequests are the f.Add seeds of FuzzReplicateRequest.
func fuzzSeedReplRequests(tb testing.TB) []*clientv1.ReplicateRequest {
	enc := func(md *clientv1.EntryMetadata) []byte {
		b, err := wire.EncodeEntry(md, []byte("payload"))
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	good := &clientv1.EntryMetadata{OriginRegion: "a", OriginSeq: 3, OriginLedgerId: 1, OriginEntryId: 2, NumMessages: 2,
		ProducerName: "p", SequenceId: 10, ProducerIdentity: "id1", ReplicateTo: []string{"b"}}
	wrap := &clientv1.EntryMetadata{OriginRegion: "a", OriginSeq: 4, NumMessages: 2, ProducerName: "p", SequenceId: math.MaxInt64}
	top := &clientv1.EntryMetadata{OriginRegion: "a", OriginSeq: math.MaxInt64, NumMessages: 1}
	return []*clientv1.ReplicateRequest{
		{Kind: &clientv1.ReplicateRequest_Open{Open: &clientv1.ReplicateOpen{Topic: "t/n/x", SourceRegion: "a", TargetRegion: "b"}}},
		{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{RequestId: 1, Entries: [][]byte{enc(good)},
			Skipped: []*clientv1.SkippedSeqs{{Stream: "a", First: 1, Last: 2}, {Stream: "a@1", First: 5, Last: 9}}}}},
		{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{RequestId: 2, Entries: [][]byte{enc(good), enc(wrap)}}}},
		{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{RequestId: 3, Entries: [][]byte{enc(top)},
			Skipped: []*clientv1.SkippedSeqs{{Stream: "a", First: 1, Last: math.MaxInt64}}}}},
		{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{RequestId: 4, Entries: [][]byte{{0xff, 0x01, 0x02}}}}},
	}
}

// FuzzReplicateRequest decodes arbitrary bytes as a ReplicateRequest and
// validates its entries and skip reports as the Replicate handler does
// before anything is stored. Properties: no panic; a refusal is
// ErrInvalidArgument; validation is deterministic; an accepted request's
// entries have every field the receiver computes with in bounds (the
// dedup keys they feed are batches [first, highest] with 0 <= first <=
// highest <= MaxInt64-1), re-encode, and validate again; accepted skip
// reports merge into normalized ranges that cover each report.
func FuzzReplicateRequest(f *testing.F) {
	for _, r := range fuzzSeedReplRequests(f) {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	const maxBytes = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		var req clientv1.ReplicateRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		ents := req.GetEntries()
		valid, err := validateReplEntries(ents.GetEntries(), maxBytes)
		_, err2 := validateReplEntries(ents.GetEntries(), maxBytes)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("validation not deterministic: %v then %v", err, err2)
		}
		if err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("refusal is not ErrInvalidArgument: %v", err)
		}
		if err == nil {
			if len(valid) != len(ents.GetEntries()) {
				t.Fatalf("%d entries validated of %d", len(valid), len(ents.GetEntries()))
			}
			again := make([][]byte, len(valid))
			for i, e := range valid {
				md := e.md
				if s := md.GetOriginSeq(); s < 1 || s > maxSeq {
					t.Fatalf("entries[%d]: origin_seq %d accepted", i, s)
				}
				if len(e.payload) > maxBytes {
					t.Fatalf("entries[%d]: payload of %d bytes accepted", i, len(e.payload))
				}
				md.Replicated = true // as stored
				keys := []func(*clientv1.EntryMetadata) (string, int64, int64, bool){dedupKey, originProducerKey, entryIdent}
				for k, key := range keys {
					if _, first, highest, ok := key(md); ok && (first < 0 || highest < first || highest > maxSeq) {
						t.Fatalf("entries[%d]: dedup key %d is the batch [%d, %d]", i, k, first, highest)
					}
				}
				b, err := wire.EncodeEntry(md, e.payload)
				if err != nil {
					t.Fatalf("entries[%d]: re-encode: %v", i, err)
				}
				again[i] = b
			}
			if _, err := validateReplEntries(again, maxBytes); err != nil {
				t.Fatalf("re-encoded entries refused: %v", err)
			}
		}
		if err := validateSkipped(ents.GetSkipped()); err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("skip refusal is not ErrInvalidArgument: %v", err)
			}
			return
		}
		per := map[string][]seqRange{}
		for _, sk := range ents.GetSkipped() {
			per[sk.GetStream()] = addSeqRange(per[sk.GetStream()], seqRange{sk.GetFirst(), sk.GetLast()})
		}
		for stream, rs := range per {
			for i, r := range rs {
				if r.Last < r.First || i > 0 && touches(rs[i-1].Last, r.First) {
					t.Fatalf("stream %q: skip ranges not normalized: %v", stream, rs)
				}
			}
		}
		for _, sk := range ents.GetSkipped() {
			rs := per[sk.GetStream()]
			if !slices.ContainsFunc(rs, func(r seqRange) bool { return r.First <= sk.GetFirst() && sk.GetLast() <= r.Last }) {
				t.Fatalf("skip report [%d, %d] of %q not covered by %v", sk.GetFirst(), sk.GetLast(), sk.GetStream(), rs)
			}
		}
	})
}
